/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_graph.c — graphs (ABI 1.3) of the mock plugin, over the prepare
 * helpers of launch, gemm_run, copy and memset (mock_internal.h).
 *
 * A mock graph is the recorded list, validated, with private copies of
 * every item's arguments. graph_launch checks every item again exactly as
 * its eager call would (so a stale handle is an error, never a crash),
 * turns the items into the stream's ops, and appends them to the stream's
 * FIFO under one hold of its lock: the replay runs on the stream's worker
 * thread, in order, with the eager semantics, and nothing else lands
 * inside it. An invalid item enqueues nothing. graph_update swaps in new
 * arguments after checking them the same way.
 */
#include "mock_internal.h"

typedef struct mock_graph {
  mock_rt *rt;
  uint32_t dev;
  uint64_t count;
  uint64_t launches; /* LAUNCH items: what fail_launch_nth counts per replay */
  gp_graph_node *nodes;
  /* nodes (graph_update against graph_launch), and the replay order: a
   * replay is enqueued under mu, after a wait for the previous replay's
   * end (`last`, recorded at the end of each replay) when that replay went
   * to another stream, so that a later replay runs after an earlier one
   * on any stream (gpurt.h's graph_launch) */
  pthread_mutex_t mu;
  ev_rec *last;           /* the latest replay's end, or NULL */
  mock_stream *last_on;   /* its stream (compared, never dereferenced) */
} mock_graph;

static void nodes_free(gp_graph_node *nodes, uint64_t count) {
  if (nodes == NULL) return;
  for (uint64_t i = 0; i < count; i++) gp_graph_node_release(&nodes[i]);
  free(nodes);
}

void mock_graph_free(void *p) {
  mock_graph *g = p;
  if (g == NULL) return;
  pthread_mutex_destroy(&g->mu);
  mock_rec_release(g->rt, g->last);
  nodes_free(g->nodes, g->count);
  free(g);
}

/* The CALL slots the mock records, and their prepares (call_prepare). */
static const uint64_t mock_calls[] = {offsetof(gpurt_api, quant_matmul), offsetof(gpurt_api, grouped_gemm),
                                      offsetof(gpurt_api, kv_append), offsetof(gpurt_api, attention_run)};
static const mock_prepare_fn mock_preps[] = {mock_quant_prepare, mock_grouped_prepare, mock_kv_append_prepare,
                                             mock_attention_run_prepare};

gpurt_error *m_graph_recordable(gpurt_runtime *h, uint64_t slot, uint8_t *out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  return gp_graph_recordable(slot, mock_calls, sizeof mock_calls / sizeof mock_calls[0], out);
}

/* A CALL node's op, through the eager call's own prepare. sh: the
 * replay's stream handle (NULL when only checking). */
static gpurt_error *call_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, const gp_graph_node *n,
                                 mock_op **out) {
  for (size_t i = 0; i < sizeof mock_calls / sizeof mock_calls[0]; i++)
    if (mock_calls[i] == n->slot) return mock_preps[i](rt, s, sh, n->object, &n->call, out);
  return gp_err(GPURT_ERR_INTERNAL, "call: slot %llu has no mock prepare", U(n->slot));
}

/* Checks node n against stream s exactly as its eager call would and, when
 * op is not NULL, makes its op (event ops get their record later: *ev). */
static gpurt_error *graph_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, const gp_graph_node *n,
                                  mock_op **op, mock_event **ev) {
  gpurt_error *e;
  mock_op *o = NULL;
  switch (n->kind) {
    case GPURT_GRAPH_OP_CALL:
      if ((e = call_prepare(rt, s, sh, n, &o))) return e;
      if (o == NULL) { /* nothing to run (nnz 0, M 0): a no-op op keeps the item count */
        if (!(o = calloc(1, sizeof *o))) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "call: no memory");
        o->kind = OP_COPY;
      }
      if (!op) { mock_op_free(rt, o); return NULL; }
      break;
    case GPURT_GRAPH_OP_LAUNCH: {
      gp_launch_exec x;
      if ((e = mock_launch_prepare(rt, s, n->kernel, &n->launch, &x))) return e;
      if (!op) return NULL;
      if (!(o = calloc(1, sizeof *o))) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch: no memory");
      o->kind = OP_LAUNCH;
      o->u.launch = x;
      break;
    }
    case GPURT_GRAPH_OP_GEMM: {
      gp_gemm_exec *x;
      if ((e = mock_gemm_prepare(rt, s, n->plan, &n->gemm, &x))) return e;
      if (!op) { free(x); return NULL; }
      if (!(o = calloc(1, sizeof *o))) { free(x); return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_run: no memory"); }
      o->kind = OP_GEMM;
      o->u.gemm = x;
      break;
    }
    case GPURT_GRAPH_OP_COPY:
      if ((e = mock_copy_prepare(rt, s, &n->copy, &o))) return e;
      if (o == NULL) { /* an empty copy: a no-op op keeps the item count */
        if (!(o = calloc(1, sizeof *o))) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "copy: no memory");
        o->kind = OP_COPY;
      }
      if (!op) { free(o); return NULL; }
      break;
    case GPURT_GRAPH_OP_MEMSET: {
      uint32_t dev;
      if ((e = mock_memset_prepare(rt, s, &n->memset, &dev, &o))) return e;
      if (!op) { free(o); return NULL; }
      break;
    }
    default: { /* events */
      const char *what = n->kind == GPURT_GRAPH_OP_EVENT_RECORD ? "event_record" : "stream_wait_event";
      mock_event *me;
      if ((e = mock_lookup(rt, &rt->events, n->event, (void **)&me))) return gp_err_wrap(e, "%s", what);
      if (mock_is_lost(rt, s->dev)) return mock_lost_err(what, s->dev);
      if (n->kind == GPURT_GRAPH_OP_EVENT_RECORD && me->dev != s->dev)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_record: event %#llx is on device %u but the graph's "
                      "stream is on device %u", H(n->event), me->dev, s->dev);
      if (!op) return NULL;
      if (!(o = calloc(1, sizeof *o))) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory", what);
      o->kind = n->kind == GPURT_GRAPH_OP_EVENT_RECORD ? OP_RECORD : OP_WAIT;
      *ev = me;
      break;
    }
  }
  *op = o;
  return NULL;
}

/* A stand-in for a stream of device dev: the prepare helpers read only
 * its runtime and device. */
static mock_stream graph_stream_of(mock_rt *rt, uint32_t dev) {
  mock_stream s;
  memset(&s, 0, sizeof s);
  s.rt = rt;
  s.dev = dev;
  return s;
}

gpurt_error *m_graph_create(gpurt_runtime *h, const gpurt_graph_create_args *args, gpurt_graph **out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_create: out is NULL");
  *out = NULL;
  gpurt_graph_create_args a;
  if ((e = gp_graph_create_check(args, &a))) return e;
  if ((e = mock_check_dev(rt, a.device, "graph_create"))) return e;
  mock_graph *g = calloc(1, sizeof *g);
  gp_graph_node *nodes = a.count <= SIZE_MAX / sizeof *nodes ? calloc((size_t)a.count, sizeof *nodes) : NULL;
  if (!g || !nodes) {
    free(g);
    free(nodes);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: no memory for %llu items", U(a.count));
  }
  mock_stream s = graph_stream_of(rt, a.device);
  for (uint64_t i = 0; i < a.count; i++) {
    if ((e = gp_graph_item_read_ex(a.items, a.item_size, i, &nodes[i], mock_calls, sizeof mock_calls / sizeof mock_calls[0])) ||
        (e = graph_prepare(rt, &s, NULL, &nodes[i], NULL, NULL))) {
      free(g);
      nodes_free(nodes, i + 1);
      return gp_err_wrap(e, "graph_create: item %llu", U(i));
    }
    if (nodes[i].kind == GPURT_GRAPH_OP_LAUNCH) g->launches++;
  }
  g->rt = rt;
  g->dev = a.device;
  g->count = a.count;
  g->nodes = nodes;
  pthread_mutex_init(&g->mu, NULL);
  uintptr_t hg;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->graphs, g, &hg);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    mock_graph_free(g);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: too many graphs");
  }
  *out = (gpurt_graph *)hg;
  return NULL;
}

gpurt_error *m_graph_launch(gpurt_runtime *h, gpurt_graph *gh, gpurt_stream *sh) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_graph *g;
  if ((e = mock_lookup(rt, &rt->graphs, gh, (void **)&g))) return gp_err_wrap(e, "graph_launch");
  if ((e = gp_need_stream("graph_launch", sh))) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return gp_err_wrap(e, "graph_launch");
  if (s->dev != g->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_launch: graph %#llx was built for device %u but stream %#llx "
                  "is on device %u", H(gh), g->dev, H(sh), s->dev);
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("graph_launch", s->dev);

  pthread_mutex_lock(&g->mu);
  uint64_t count = g->count;
  mock_op **ops = calloc((size_t)count, sizeof *ops);
  mock_event **evs = calloc((size_t)count, sizeof *evs);
  if (!ops || !evs) {
    pthread_mutex_unlock(&g->mu);
    free(ops);
    free(evs);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_launch: no memory for %llu items", U(count));
  }
  /* Pass 1: check every item and make its op; nothing is visible yet. */
  uint64_t i;
  for (i = 0; i < count; i++) {
    if ((e = graph_prepare(rt, s, sh, &g->nodes[i], &ops[i], &evs[i]))) {
      e = gp_err_wrap(e, "graph_launch: item %llu", U(i));
      break;
    }
  }
  uint64_t launch_at = g->launches;
  if (!e && g->launches > 0 && (launch_at = mock_launch_faults(rt, g->launches)) < g->launches) {
    uint64_t seen = 0;
    for (i = 0; i < count; i++)
      if (g->nodes[i].kind == GPURT_GRAPH_OP_LAUNCH && seen++ == launch_at) break;
    e = gp_err_wrap(mock_launch_fault_err(&ops[i]->u.launch), "graph_launch: item %llu", U(i));
    e = gp_err_append(e, "; nothing was enqueued");
    i = count;
  }
  /* The replay's order ops: a wait for the previous replay's end (when it
   * went to another stream) and a record of this one's end. */
  mock_op *wait = NULL, *end = NULL;
  ev_rec *end_rec = NULL;
  if (!e) {
    wait = calloc(1, sizeof *wait);
    end = calloc(1, sizeof *end);
    end_rec = calloc(1, sizeof *end_rec);
    if (!wait || !end || !end_rec) {
      free(wait);
      free(end);
      free(end_rec);
      e = gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_launch: no memory for the replay's order");
      i = count;
    }
  }
  if (e) {
    pthread_mutex_unlock(&g->mu);
    for (uint64_t j = 0; j < i && j < count; j++)
      if (ops[j]) mock_op_free(rt, ops[j]); /* no record attached yet */
    free(ops);
    free(evs);
    return e;
  }
  /* Pass 2, in order: event records are published and waits take the
   * latest record at this point (as the eager calls would); a wait for an
   * event never recorded waits for nothing and is dropped. */
  mock_op **seq = calloc((size_t)count + 2, sizeof *seq);
  if (!seq) {
    pthread_mutex_unlock(&g->mu);
    for (uint64_t j = 0; j < count; j++) mock_op_free(rt, ops[j]);
    free(ops);
    free(evs);
    free(wait);
    free(end);
    free(end_rec);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_launch: no memory for %llu items", U(count));
  }
  uint64_t n = 0;
  if (g->last != NULL && g->last_on != s) {
    pthread_mutex_lock(&rt->ev_mu);
    g->last->refs++;
    pthread_mutex_unlock(&rt->ev_mu);
    wait->kind = OP_WAIT;
    wait->u.rec = g->last;
    seq[n++] = wait;
  } else {
    free(wait);
  }
  for (i = 0; i < count; i++) {
    mock_op *o = ops[i];
    if (o->kind == OP_RECORD) {
      ev_rec *r = calloc(1, sizeof *r);
      if (!r) {
        /* Out of memory midway: the record is skipped, the event keeps
         * its earlier record. Rare enough not to unwind the replay. */
        free(o);
        continue;
      }
      r->refs = 2;
      pthread_mutex_lock(&rt->ev_mu);
      ev_rec *old = evs[i]->latest;
      evs[i]->latest = r;
      pthread_mutex_unlock(&rt->ev_mu);
      mock_rec_release(rt, old);
      o->u.rec = r;
    } else if (o->kind == OP_WAIT) {
      o->u.rec = mock_latest_ref(rt, evs[i]);
      if (o->u.rec == NULL) {
        free(o);
        continue;
      }
    }
    seq[n++] = o;
  }
  end_rec->refs = 2; /* the graph's `last` and the record op */
  end->kind = OP_RECORD;
  end->u.rec = end_rec;
  seq[n++] = end;
  ev_rec *prev = g->last;
  g->last = end_rec;
  g->last_on = s;
  mock_enqueue_many(s, seq, n);
  pthread_mutex_unlock(&g->mu);
  mock_rec_release(rt, prev);
  free(seq);
  free(ops);
  free(evs);
  return NULL;
}

gpurt_error *m_graph_update(gpurt_runtime *h, gpurt_graph *gh, gpurt_graph_update_args *args) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_graph *g;
  if ((e = mock_lookup(rt, &rt->graphs, gh, (void **)&g))) return gp_err_wrap(e, "graph_update");
  gpurt_graph_update_args a;
  if ((e = gp_graph_update_check(args, &a))) return e;
  if (a.count == 0) {
    gp_write_struct(args, &a, sizeof a);
    return NULL;
  }
  gp_graph_node *nodes = a.count <= SIZE_MAX / sizeof *nodes ? calloc((size_t)a.count, sizeof *nodes) : NULL;
  if (!nodes) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_update: no memory for %llu items", U(a.count));
  mock_stream s = graph_stream_of(rt, g->dev);
  uint64_t read = 0; /* nodes read (to release on error) */
  pthread_mutex_lock(&g->mu);
  for (uint64_t i = 0; i < a.count && !e; i++) {
    uint64_t at = a.indices[i];
    if (at >= g->count) {
      e = gp_err(GPURT_ERR_OUT_OF_RANGE, "graph_update: update %llu: item %llu does not exist (the graph has %llu)",
                 U(i), U(at), U(g->count));
      break;
    }
    const gp_graph_node *old = &g->nodes[at];
    read = i + 1;
    if ((e = gp_graph_item_read_ex(a.items, a.item_size, i, &nodes[i], mock_calls, sizeof mock_calls / sizeof mock_calls[0])) ||
        (e = graph_prepare(rt, &s, NULL, &nodes[i], NULL, NULL))) {
      e = gp_err_wrap(e, "graph_update: item %llu", U(at));
      break;
    }
    const char *why = gp_graph_update_forbids(old, &nodes[i]);
    if (why)
      e = gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_update: item %llu (%s): an update cannot change %s",
                 U(at), gp_graph_op_name(old->kind), why);
  }
  if (!e) {
    for (uint64_t i = 0; i < a.count; i++) {
      gp_graph_node *dst = &g->nodes[a.indices[i]];
      gp_graph_node_release(dst);
      *dst = nodes[i];
      nodes[i].owned = NULL; /* moved */
      gp_graph_node_fix(dst);
    }
    a.applied = GPURT_GRAPH_UPDATE_PATCHED;
    read = a.count;
  }
  pthread_mutex_unlock(&g->mu);
  nodes_free(nodes, read);
  if (e) return e;
  gp_write_struct(args, &a, sizeof a);
  return NULL;
}

gpurt_error *m_graph_destroy(gpurt_runtime *h, gpurt_graph *gh) {
  if (gh == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->graphs, (uintptr_t)gh, &o);
  if (st == GP_HANDLE_OK) gp_table_remove(&rt->graphs, (uintptr_t)gh);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_err_wrap(gp_handle_error(st, GP_KIND_GRAPH, (uintptr_t)gh), "graph_destroy");
  mock_graph_free(o);
  return NULL;
}
