/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_engine_graph.c — graphs (1.3, CALL items 1.7) for every backend.
 *
 * A graph is the recorded list, validated, with private copies of every
 * item's arguments (gp_graph.c reads them). graph_launch checks every item
 * again exactly as its eager call would (a stale handle is an error, never
 * a crash), then records the replay through the backend: graph_begin, each
 * item's run (the eager front half with the recording queue as its
 * stream), graph_end, one graph_launch of the executable on the stream. A
 * replay waits for the previous one when that went to another stream (an
 * event recorded at the end of every replay), so a later replay runs after
 * an earlier one on any stream. graph_update swaps in new arguments after
 * checking them the same way.
 *
 * A backend whose executables replay many times (gp_backend.graph_once:
 * CUDA, where a capture and an instantiation cost milliseconds) gets its
 * recording made once, at graph_create, and again at each graph_update
 * (from the updated items; the old executable is destroyed only when the
 * new one was made). graph_launch then checks the items and launches the
 * kept executable: every item again when any object of the runtime was
 * destroyed since the last full check (rt->destroys moved: a stale handle
 * is an error, never a launch of freed memory), otherwise only the
 * attention_run items whose object was planned anew with another batch,
 * row count or page count since their last check (gp_attn.gen), or that
 * replay on another stream: in decode, the steps that start a page;
 * nothing is allocated. The backend orders the replays of one executable itself. An
 * update of launch items only is patched into the executable when the
 * backend kept their nodes (graph_patchable / graph_patch: the per-step
 * update of a sampler's seed costs no recording); any other update
 * records again, and graph_end may update the old executable in place.
 */
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"

typedef struct gp_graph {
  uint32_t dev;
  uint64_t count;
  gp_graph_node *nodes;
  pthread_mutex_t mu;   /* nodes, and the replay order below */
  void *order_ev;       /* the backend's event recorded at the end of every replay */
  int replayed;
  gpurt_stream *last_on; /* the stream of the latest replay (compared, never used) */
  /* graph_once: */
  void *exec;           /* the executable, recorded at create / update */
  uint64_t checked;     /* rt->destroys when every item was last checked */
  int has_attn;         /* an attention_run item (checked at every launch) */
  /* Per item, for attention_run items: its object's gen and the replay
   * stream at its last good check (0: none since the graph was made or its
   * items updated); a launch with both unchanged skips its check. */
  uint64_t *agen;
  gpurt_stream **ash;
} gp_graph;

/* The CALL slots the engine can record (GP_ZCALLS), their front halves and
 * the bit a backend clears them with (gp_backend.unrecordable). */
#define CALL_OFF_(name, NAME, minor, idx, atype, obj) offsetof(gpurt_api, name),
#define CALL_FN_(name, NAME, minor, idx, atype, obj) gp_##name##_on,
#define CALL_BIT_(name, NAME, minor, idx, atype, obj) GP_REC_##NAME,
static const uint64_t all_calls[] = {GP_ZCALLS(CALL_OFF_)};
static const gp_call_fn call_fns[] = {GP_ZCALLS(CALL_FN_)};
static const uint32_t call_bits[] = {GP_ZCALLS(CALL_BIT_)};
#undef CALL_OFF_
#undef CALL_FN_
#undef CALL_BIT_
#define NALL (sizeof all_calls / sizeof all_calls[0])

/* The slots this backend records (n of them into calls). */
static size_t backend_calls(uint64_t calls[NALL]) {
  size_t n = 0;
  for (size_t i = 0; i < NALL; i++)
    if (!(gp_eb->unrecordable & call_bits[i])) calls[n++] = all_calls[i];
  return n;
}

static gpurt_error *record(gp_rt *rt, gp_graph *g, const gp_graph_node *nodes, gpurt_stream *sh,
                           const char *op, void **exec);
static int is_attention(const gp_graph_node *n);
static gp_stream stream_of(uint32_t dev);

static void nodes_free(gp_graph_node *nodes, uint64_t count) {
  if (nodes == NULL) return;
  for (uint64_t i = 0; i < count; i++) gp_graph_node_release(&nodes[i]);
  free(nodes);
}

void gp_graph_free(gp_rt *rt, void *p) {
  gp_graph *g = p;
  if (g == NULL) return;
  pthread_mutex_destroy(&g->mu);
  if (g->exec) gp_eb->graph_destroy(rt->ctx, g->exec);
  if (g->order_ev) gp_eb->event_destroy(rt->ctx, g->order_ev);
  nodes_free(g->nodes, g->count);
  free(g->agen);
  free(g->ash);
  free(g);
}

gpurt_error *gp_e_graph_recordable(gpurt_runtime *h, uint64_t slot, uint8_t *out) {
  GP_RT_OR_RETURN(h);
  uint64_t calls[NALL];
  size_t n = backend_calls(calls);
  return gp_graph_recordable(slot, calls, n, out);
}

/* Checks node n against stream s exactly as its eager call would and, when
 * run, enqueues it on s (a recording queue). sh: the replay's stream
 * handle (NULL when only checking). */
static gpurt_error *node_on(gp_rt *rt, gp_stream *s, gpurt_stream *sh, const gp_graph_node *n, int run) {
  switch (n->kind) {
    case GPURT_GRAPH_OP_CALL:
      for (size_t i = 0; i < NALL; i++)
        if (all_calls[i] == n->slot) return call_fns[i](rt, s, sh, n->object, &n->call, run);
      return gp_err(GPURT_ERR_INTERNAL, "call: slot %llu has no front half", U(n->slot));
    case GPURT_GRAPH_OP_LAUNCH: {
      gp_launch_op op;
      gpurt_error *e = gp_launch_resolve(rt, s, n->kernel, &n->launch, &op);
      if (e || !run) return e;
      return gp_eb->launch(rt->ctx, &s->q, &op);
    }
    case GPURT_GRAPH_OP_GEMM:
      return gp_gemm_on(rt, s, n->plan, &n->gemm, run);
    case GPURT_GRAPH_OP_COPY:
      return gp_copy_async(rt, s, &n->copy, run);
    case GPURT_GRAPH_OP_MEMSET:
      return gp_memset_on(rt, s, &n->memset, run);
    default:
      return gp_event_on(rt, s, n->event, n->kind == GPURT_GRAPH_OP_EVENT_RECORD, run);
  }
}

/* A stand-in for a stream of device dev: the front halves read only its
 * device when they only check. */
static gp_stream stream_of(uint32_t dev) {
  gp_stream s;
  memset(&s, 0, sizeof s);
  s.q.dev = dev;
  return s;
}

gpurt_error *gp_e_graph_create(gpurt_runtime *h, const gpurt_graph_create_args *args, gpurt_graph **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "graph_create");
  gpurt_graph_create_args a;
  if ((e = gp_graph_create_check(args, &a))) return e;
  if ((e = gp_check_dev(rt, a.device, "graph_create"))) return e;
  gp_graph *g = calloc(1, sizeof *g);
  gp_graph_node *nodes = a.count <= SIZE_MAX / sizeof *nodes ? calloc((size_t)a.count, sizeof *nodes) : NULL;
  if (!g || !nodes) {
    free(g);
    free(nodes);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: no memory for %llu items", U(a.count));
  }
  gp_stream s = stream_of(a.device);
  uint64_t calls[NALL];
  size_t ncalls = backend_calls(calls);
  g->checked = atomic_load(&rt->destroys); /* before the checks: a destroy during them re-checks */
  for (uint64_t i = 0; i < a.count; i++) {
    if ((e = gp_graph_item_read_ex(a.items, a.item_size, i, &nodes[i], calls, ncalls)) ||
        (e = node_on(rt, &s, NULL, &nodes[i], 0))) {
      free(g);
      nodes_free(nodes, i + 1);
      return gp_err_wrap(e, "graph_create: item %llu", U(i));
    }
  }
  g->dev = a.device;
  g->count = a.count;
  g->nodes = nodes;
  for (uint64_t i = 0; i < a.count; i++) g->has_attn |= is_attention(&nodes[i]);
  pthread_mutex_init(&g->mu, NULL);
  if (gp_eb->graph_once && a.count > 0) {
    g->agen = calloc((size_t)a.count, sizeof *g->agen);
    g->ash = calloc((size_t)a.count, sizeof *g->ash);
    if (!g->agen || !g->ash) {
      gp_graph_free(rt, g);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: no memory for %llu items", U(a.count));
    }
  }
  if (gp_eb->graph_once) {
    if ((e = record(rt, g, g->nodes, NULL, "graph_create", &g->exec))) {
      g->exec = NULL;
      gp_graph_free(rt, g);
      return e;
    }
  } else if ((e = gp_eb->event_create(rt->ctx, a.device, 0, &g->order_ev))) {
    gp_graph_free(rt, g);
    return e;
  }
  uintptr_t hg;
  int r = gp_table_insert(&rt->graphs, g, &hg);
  if (r != 0) {
    gp_graph_free(rt, g);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: too many graphs");
  }
  *out = (gpurt_graph *)hg;
  return NULL;
}

static int is_attention(const gp_graph_node *n) {
  return n->kind == GPURT_GRAPH_OP_CALL && n->slot == offsetof(gpurt_api, attention_run);
}

/* Records nodes[0..g->count) on a recording queue of the backend (g->mu
 * held, or g not yet shared) into *exec; op names the calling slot. An
 * item the backend refuses while recording ends the recording: nothing was
 * enqueued. Per replay (no graph_once), the replay waits for the previous
 * one on another stream and records the order event at its end. */
static gpurt_error *record(gp_rt *rt, gp_graph *g, const gp_graph_node *nodes, gpurt_stream *sh,
                           const char *op, void **exec) {
  gp_stream rs;
  memset(&rs, 0, sizeof rs);
  rs.q.items = g->count;
  gpurt_error *e = gp_eb->graph_begin(rt->ctx, g->dev, &rs.q);
  if (e) return gp_err_wrap(e, "%s", op);
  rs.q.dev = g->dev;
  int per_replay = !gp_eb->graph_once;
  uint64_t i = 0;
  if (!per_replay && gp_eb->graph_capture) {
    /* The preparing pass: what the runs make lazily, made before the
     * recording starts (nothing enqueued). */
    rs.q.capturing = GP_QUEUE_PREPARE;
    for (; !e && i < g->count; i++)
      if (nodes[i].kind != GPURT_GRAPH_OP_EVENT_RECORD && nodes[i].kind != GPURT_GRAPH_OP_EVENT_WAIT &&
          (rs.q.item = i, e = node_on(rt, &rs, sh, &nodes[i], 1)))
        e = gp_err_wrap(e, "%s: item %llu", op, U(i));
    if (!e && (e = gp_eb->graph_capture(rt->ctx, &rs.q))) e = gp_err_wrap(e, "%s", op);
    i = 0;
  }
  rs.q.capturing = GP_QUEUE_RECORD;
  if (per_replay && g->replayed && g->last_on != sh && (e = gp_eb->event_wait(rt->ctx, &rs.q, g->order_ev)))
    e = gp_err_wrap(e, "%s", op);
  for (; !e && i < g->count; i++)
    if ((rs.q.item = i, e = node_on(rt, &rs, sh, &nodes[i], 1))) {
      e = gp_err_wrap(e, "%s: item %llu", op, U(i));
      if (per_replay) e = gp_err_append(e, "; nothing was enqueued");
    }
  if (!e && per_replay && (e = gp_eb->event_record(rt->ctx, g->order_ev, &rs.q))) e = gp_err_wrap(e, "%s", op);
  gpurt_error *end = gp_eb->graph_end(rt->ctx, &rs.q, e != NULL, exec);
  if (e) {
    gp_error_destroy(end);
    return e;
  }
  return end ? gp_err_wrap(end, "%s", op) : NULL;
}

/* An attention item's object's gen (0 when its handle does not resolve:
 * the check then says why). */
static uint64_t attn_gen(gp_rt *rt, const gp_graph_node *n) {
  gp_attn *a;
  gpurt_error *e = gp_lookup(rt, &rt->attns, n->object, (void **)&a);
  if (e) {
    gp_error_destroy(e);
    return 0;
  }
  return __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE);
}

/* graph_once: checks the items against the replay's stream s (every one
 * when an object was destroyed since the last full check, else the
 * attention runs whose object was planned anew since their last check, or
 * which replay on another stream) and launches the kept executable (g->mu
 * held). In decode a plan changes the checked schedule only when a page
 * starts, so most replays check nothing. */
static gpurt_error *launch_kept(gp_rt *rt, gp_graph *g, gp_stream *s, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  uint64_t now = atomic_load(&rt->destroys);
  int all = now != g->checked;
  if (all || g->has_attn)
    for (uint64_t i = 0; i < g->count && !e; i++) {
      const gp_graph_node *n = &g->nodes[i];
      int attn = is_attention(n);
      if (!all && !attn) continue;
      /* The gen is read before the check: a plan racing with it bumps it
       * again, and the next launch checks. */
      uint64_t gen = attn ? attn_gen(rt, n) : 0;
      if (!all && gen != 0 && gen == g->agen[i] && sh == g->ash[i]) continue;
      if ((e = node_on(rt, s, sh, n, 0))) {
        e = gp_err_wrap(e, "graph_launch: item %llu", U(i));
      } else if (attn) {
        g->agen[i] = gen;
        g->ash[i] = sh;
      }
    }
  if (e) return e;
  if (all) g->checked = now;
  return gp_eb->graph_launch(rt->ctx, g->exec, &s->q);
}

gpurt_error *gp_e_graph_launch(gpurt_runtime *h, gpurt_graph *gh, gpurt_stream *sh) {
  GP_RT_OR_RETURN(h);
  gp_graph *g;
  if ((e = gp_lookup(rt, &rt->graphs, gh, (void **)&g))) return gp_err_wrap(e, "graph_launch");
  if ((e = gp_need_stream("graph_launch", sh))) return e;
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return gp_err_wrap(e, "graph_launch");
  if (s->q.dev != g->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_launch: graph %#llx was built for device %u but stream %#llx "
                  "is on device %u", H(gh), g->dev, H(sh), s->q.dev);
  if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, "graph_launch", s->q.dev);
  pthread_mutex_lock(&g->mu);
  if (gp_eb->graph_once) {
    e = launch_kept(rt, g, s, sh);
    pthread_mutex_unlock(&g->mu);
    return e;
  }
  /* Pass 1: every item checked against the replay's stream. */
  for (uint64_t i = 0; i < g->count && !e; i++)
    if ((e = node_on(rt, s, sh, &g->nodes[i], 0))) e = gp_err_wrap(e, "graph_launch: item %llu", U(i));
  void *exec = NULL;
  if (!e) e = record(rt, g, g->nodes, sh, "graph_launch", &exec);
  if (!e) {
    e = gp_eb->graph_launch(rt->ctx, exec, &s->q);
    gp_eb->graph_destroy(rt->ctx, exec);
    if (!e) {
      g->replayed = 1;
      g->last_on = sh;
    }
  }
  pthread_mutex_unlock(&g->mu);
  return e;
}

/* graph_once: records the graph with the checked updates (nodes[i] for
 * item a->indices[i]) into a new executable that replaces the kept one
 * (g->mu held). On an error nothing changed. The recording reads a
 * shallow copy of the items with the updates swapped in, in a scratch
 * array (the update's path, not the launch's). */
static gpurt_error *rerecord(gp_rt *rt, gp_graph *g, gp_graph_node *nodes, gpurt_graph_update_args *a,
                             uint64_t checked) {
  gp_graph_node *next = calloc((size_t)g->count, sizeof *next);
  if (!next) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_update: no memory for %llu items", U(g->count));
  memcpy(next, g->nodes, (size_t)g->count * sizeof *next);
  for (uint64_t i = 0; i < a->count; i++) next[a->indices[i]] = nodes[i];
  for (uint64_t i = 0; i < g->count; i++) gp_graph_node_fix(&next[i]);
  void *exec = g->exec; /* the backend may update it in place */
  gpurt_error *e = record(rt, g, next, NULL, "graph_update", &exec);
  free(next); /* shallow: owns nothing */
  if (e) return e;
  g->checked = checked;
  if (exec == g->exec) {
    a->applied = GPURT_GRAPH_UPDATE_EXEC_UPDATE;
    return NULL;
  }
  /* Replays already enqueued finish with the old executable (the backend
   * keeps what they use alive until they have). */
  gp_eb->graph_destroy(rt->ctx, g->exec);
  g->exec = exec;
  a->applied = GPURT_GRAPH_UPDATE_REINSTANTIATED;
  return NULL;
}

/* graph_once: whether the updates (nodes[i] for item a->indices[i]) can
 * be patched into the kept executable: all launches, each a node the
 * backend kept. */
static int patchable(gp_rt *rt, gp_graph *g, const gp_graph_node *nodes, const gpurt_graph_update_args *a) {
  if (!gp_eb->graph_patch || !gp_eb->graph_patchable) return 0;
  for (uint64_t i = 0; i < a->count; i++)
    if (nodes[i].kind != GPURT_GRAPH_OP_LAUNCH || !gp_eb->graph_patchable(rt->ctx, g->exec, a->indices[i]))
      return 0;
  return 1;
}

/* graph_once: patches the updates into the kept executable (g->mu held;
 * each already checked). *done: how many were patched, also on an error. */
static gpurt_error *patch(gp_rt *rt, gp_graph *g, gp_graph_node *nodes, gpurt_graph_update_args *a,
                          uint64_t *done) {
  gp_stream s = stream_of(g->dev);
  gpurt_error *e = NULL;
  for (*done = 0; *done < a->count; (*done)++) {
    uint64_t i = *done, at = a->indices[i];
    gp_launch_op op;
    if ((e = gp_launch_resolve(rt, &s, nodes[i].kernel, &nodes[i].launch, &op)) ||
        (e = gp_eb->graph_patch(rt->ctx, g->exec, at, &op))) {
      e = gp_err_wrap(e, "graph_update: item %llu", U(at));
      if (i > 0) e = gp_err_append(e, " (the %llu updates before it were applied)", U(i));
      return e;
    }
  }
  a->applied = GPURT_GRAPH_UPDATE_PATCHED;
  return NULL;
}

gpurt_error *gp_e_graph_update(gpurt_runtime *h, gpurt_graph *gh, gpurt_graph_update_args *args) {
  GP_RT_OR_RETURN(h);
  gp_graph *g;
  if ((e = gp_lookup(rt, &rt->graphs, gh, (void **)&g))) return gp_err_wrap(e, "graph_update");
  gpurt_graph_update_args a;
  if ((e = gp_graph_update_check(args, &a))) return e;
  if (a.count == 0) {
    gp_write_struct(args, &a, sizeof a);
    return NULL;
  }
  gp_graph_node *nodes = a.count <= SIZE_MAX / sizeof *nodes ? calloc((size_t)a.count, sizeof *nodes) : NULL;
  if (!nodes) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_update: no memory for %llu items", U(a.count));
  gp_stream s = stream_of(g->dev);
  uint64_t calls[NALL];
  size_t ncalls = backend_calls(calls);
  uint64_t read = 0; /* nodes read (to release on error) */
  pthread_mutex_lock(&g->mu);
  uint64_t checked = atomic_load(&rt->destroys);
  for (uint64_t i = 0; i < a.count && !e; i++) {
    uint64_t at = a.indices[i];
    if (at >= g->count) {
      e = gp_err(GPURT_ERR_OUT_OF_RANGE, "graph_update: update %llu: item %llu does not exist (the graph has %llu)",
                 U(i), U(at), U(g->count));
      break;
    }
    const gp_graph_node *old = &g->nodes[at];
    read = i + 1;
    if ((e = gp_graph_item_read_ex(a.items, a.item_size, i, &nodes[i], calls, ncalls)) ||
        (e = node_on(rt, &s, NULL, &nodes[i], 0))) {
      e = gp_err_wrap(e, "graph_update: item %llu", U(at));
      break;
    }
    const char *why = gp_graph_update_forbids(old, &nodes[i]);
    if (why)
      e = gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_update: item %llu (%s): an update cannot change %s", U(at),
                 gp_graph_op_name(old->kind), why);
  }
  uint64_t patched = a.count; /* the updates applied (all, unless a patch fails) */
  if (!e && gp_eb->graph_once) {
    if (patchable(rt, g, nodes, &a)) e = patch(rt, g, nodes, &a, &patched);
    else e = rerecord(rt, g, nodes, &a, checked);
  }
  if (!e || patched < a.count) {
    for (uint64_t i = 0; i < patched; i++) {
      gp_graph_node *dst = &g->nodes[a.indices[i]];
      gp_graph_node_release(dst);
      *dst = nodes[i];
      nodes[i].owned = NULL; /* moved */
      gp_graph_node_fix(dst);
    }
    /* The items are patched in place: every later replay records them
     * (graph_once: rerecord recorded them into a new executable). */
    if (!gp_eb->graph_once) a.applied = GPURT_GRAPH_UPDATE_PATCHED;
    g->has_attn = 0;
    for (uint64_t i = 0; i < g->count; i++) g->has_attn |= is_attention(&g->nodes[i]);
    if (g->agen) { /* updated items are checked again at the next launch */
      memset(g->agen, 0, (size_t)g->count * sizeof *g->agen);
      memset(g->ash, 0, (size_t)g->count * sizeof *g->ash);
    }
    read = a.count;
  }
  pthread_mutex_unlock(&g->mu);
  nodes_free(nodes, read);
  if (e) return e;
  gp_write_struct(args, &a, sizeof a);
  return NULL;
}

gpurt_error *gp_e_graph_destroy(gpurt_runtime *h, gpurt_graph *gh) {
  return gp_destroy(h, offsetof(gp_rt, graphs), gh, "graph_destroy", gp_graph_free);
}
