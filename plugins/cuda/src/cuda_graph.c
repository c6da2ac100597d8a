/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_graph.c — graphs (ABI 1.3): a recorded list captured into a CUDA
 * graph inside one call, and replayed with cuGraphLaunch.
 *
 * Capture. Every graph owns a private stream (a handle of rt->streams, made
 * by stream_create). graph_create makes the lazy allocations the GEMM
 * items need on it (cu_gemm_graph_warm: its workspace, fp8 scale slots,
 * 16-bit bias copy, the plans' C scratch: neither cuMemAlloc nor
 * cuStreamSynchronize may run while it captures), then, on the calling
 * thread, cuStreamBeginCapture_v2(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
 * replays the items through the eager entry points on that stream (so
 * each is checked exactly as its eager call: launch, gemm_run, copy,
 * memset), event records and waits as external event nodes
 * (CU_EVENT_RECORD_EXTERNAL / CU_EVENT_WAIT_EXTERNAL), cuStreamEndCapture,
 * and cuGraphInstantiateWithFlags. Capture begins and ends inside the one
 * call, so the Go caller's thread changes nothing. After each launch item
 * the node it added (cuStreamGetCaptureInfo_v3) is kept for patching.
 *
 * The private stream's workspace and GEMM scratch are the graph's for its
 * whole life: the captured cuBLASLt kernels point into them. A graph's
 * replays are ordered on the replay stream; concurrent replays of one
 * graph on different streams share that memory, as CUDA graphs do.
 *
 * CALL items (1.7): kv_append, attention_run, quant_matmul and
 * grouped_gemm are captured through their eager entry points too, after
 * the lazy work of quant_matmul and grouped_gemm was made on the graph's
 * stream (cu_graph_warm_call). attention_run records the kernels of the
 * object's current plan, made in FlashInfer's CUDA-graph mode: plans made
 * between replays rewrite the same workspace, so the replay runs the
 * latest plan; graph_launch first checks, per attention object, that it
 * is planned on the replay stream, for the captured batch, into the
 * captured workspace (cu_attention_replay_check), and refuses otherwise.
 *
 * Update. Launch items only: their kernel nodes are patched in place
 * (cuGraphExecKernelNodeSetParams_v2) after launch's checks of the new
 * arguments. Otherwise the list with the new items is captured again and
 * the executable updated (cuGraphExecUpdate_v2), else instantiated anew.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* The CALL slots (1.7) this plugin records (cu_graph_capture runs them). */
static const uint64_t cu_calls[] = {offsetof(gpurt_api, kv_append), offsetof(gpurt_api, attention_run),
                                    offsetof(gpurt_api, quant_matmul), offsetof(gpurt_api, grouped_gemm)};
#define CU_NCALLS (sizeof cu_calls / sizeof cu_calls[0])
#include "gp_graph.h"

typedef struct cu_graph {
  uint32_t dev;
  uint64_t count;
  gp_graph_node *nodes;
  CUgraphNode *knodes; /* per item: a launch item's node in `graph` (NULL: none known) */
  gpurt_stream *cap;   /* the private stream (a handle of rt->streams) */
  CUgraph graph;       /* the graph `exec` was instantiated from */
  CUgraphExec exec;
  int has_records;     /* an EVENT_RECORD item: launch marks its events recorded */
  cu_attn_snap *snaps; /* per attention object whose runs were captured (count at most) */
  uint64_t nsnaps;     /* checked before every replay (cu_attention_replay_check) */
  pthread_mutex_t mu;  /* nodes, knodes, graph, exec: update against launch */
} cu_graph;

#define GERR(op, fmt, ...) gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: " fmt, op, __VA_ARGS__)

static int cu_graph_funcs(void) {
  return cu_drv.p_cuStreamBeginCapture && cu_drv.p_cuStreamEndCapture &&
         cu_drv.p_cuStreamGetCaptureInfo && cu_drv.p_cuGraphInstantiate && cu_drv.p_cuGraphLaunch &&
         cu_drv.p_cuGraphExecDestroy && cu_drv.p_cuGraphDestroy && cu_drv.p_cuGraphExecUpdate &&
         cu_drv.p_cuGraphExecKernelNodeSetParams && cu_drv.p_cuEventRecordWithFlags;
}

/* An event record or wait item on st, as an external event node. */
static gpurt_error *cu_graph_event(cu_runtime *rt, cu_stream *st, const gp_graph_node *n) {
  gpurt_error *e = NULL;
  int rec = n->kind == GPURT_GRAPH_OP_EVENT_RECORD;
  const char *op = rec ? "event_record" : "stream_wait_event";
  cu_event *ev = cu_get(&rt->events, n->event, &e);
  if (ev == NULL) return gp_err_wrap(e, "%s", op);
  if (rec && ev->dev != st->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_record: the event is on device %u, the graph "
                  "on device %u", ev->dev, st->dev);
  CUresult r = rec ? cu_drv.p_cuEventRecordWithFlags(ev->ev, st->s, CU_EVENT_RECORD_EXTERNAL)
                   : cu_drv.p_cuStreamWaitEvent(st->s, ev->ev, CU_EVENT_WAIT_EXTERNAL);
  if (r) return cu_fail(rt, st->dev, r, rec ? "cuEventRecordWithFlags (external, captured)"
                                            : "cuStreamWaitEvent (external, captured)", NULL);
  return NULL;
}

/* Captures nodes[0..count) on the graph's stream into *out (knodes: the
 * launch items' nodes). Errors name the item; nothing is left capturing. */
/* Records the snapshot of a captured attention run in snaps (one entry
 * per object: the runs of one object share its plan). */
static void cu_graph_snap(cu_attn_snap *snaps, uint64_t *n, const cu_attn_snap *s) {
  for (uint64_t j = 0; j < *n; j++)
    if (snaps[j].handle == s->handle) {
      if (s->pages_avail < snaps[j].pages_avail) snaps[j].pages_avail = s->pages_avail;
      return;
    }
  snaps[(*n)++] = *s;
}

/* Makes, before the capture, what a CALL item's call makes lazily. */
static gpurt_error *cu_graph_warm_call(gpurt_runtime *h, cu_graph *g, const gp_graph_node *n) {
  if (n->slot == offsetof(gpurt_api, quant_matmul)) return cu_quant_graph_warm(h, g->cap, &n->call.quant);
  if (n->slot == offsetof(gpurt_api, grouped_gemm)) return cu_grouped_graph_warm(h, g->cap, &n->call.grouped);
  return NULL; /* kv_append: one kernel; attention_run: its plan made the workspace */
}

static gpurt_error *cu_graph_capture(gpurt_runtime *h, cu_runtime *rt, cu_graph *g,
                                     const gp_graph_node *nodes, const char *op, CUgraph *out,
                                     CUgraphNode *knodes, cu_attn_snap *snaps, uint64_t *nsnaps) {
  gpurt_error *e = NULL;
  *nsnaps = 0;
  cu_stream *st = cu_get(&rt->streams, g->cap, &e);
  if (st == NULL) return gp_err_wrap(e, "%s: the graph's stream", op);
  for (uint64_t i = 0; i < g->count; i++)
    if ((nodes[i].kind == GPURT_GRAPH_OP_GEMM && (e = cu_gemm_graph_warm(rt, st, nodes[i].plan, &nodes[i].gemm))) ||
        (nodes[i].kind == GPURT_GRAPH_OP_CALL && (e = cu_graph_warm_call(h, g, &nodes[i]))))
      return gp_err_wrap(e, "%s: item %llu", op, (unsigned long long)i);
  if ((e = cu_enter(rt, g->dev))) return e;
  CUresult r = cu_drv.p_cuStreamBeginCapture(st->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r) return cu_fail(rt, g->dev, r, "cuStreamBeginCapture_v2", NULL);
  uint64_t i;
  for (i = 0; i < g->count && e == NULL; i++) {
    const gp_graph_node *n = &nodes[i];
    knodes[i] = NULL;
    switch (n->kind) {
      case GPURT_GRAPH_OP_LAUNCH: {
        if ((e = cu_launch(h, g->cap, n->kernel, &n->launch))) break;
        CUstreamCaptureStatus cs;
        const CUgraphNode *deps = NULL;
        size_t nd = 0;
        if (cu_drv.p_cuStreamGetCaptureInfo(st->s, &cs, NULL, NULL, &deps, NULL, &nd) ==
                CUDA_SUCCESS && nd == 1)
          knodes[i] = deps[0];
        break;
      }
      case GPURT_GRAPH_OP_GEMM:
        e = cu_gemm_run(h, g->cap, n->plan, &n->gemm);
        break;
      case GPURT_GRAPH_OP_COPY: {
        gpurt_copy_args c = n->copy;
        c.stream = g->cap;
        e = cu_copy(h, &c);
        break;
      }
      case GPURT_GRAPH_OP_MEMSET: {
        gpurt_memset_args m = n->memset;
        m.stream = g->cap;
        e = cu_memset(h, &m);
        break;
      }
      case GPURT_GRAPH_OP_CALL: /* one of cu_calls (cu_graph_recordable) */
        if (n->slot == offsetof(gpurt_api, kv_append)) {
          e = cu_kv_append(h, g->cap, &n->call.kv_append);
        } else if (n->slot == offsetof(gpurt_api, attention_run)) {
          cu_attn_snap sn;
          e = cu_attention_capture(h, g->cap, (gpurt_attention *)n->object, &n->call.attention, &sn);
          if (e == NULL) cu_graph_snap(snaps, nsnaps, &sn);
        } else if (n->slot == offsetof(gpurt_api, quant_matmul)) {
          e = cu_quant_matmul(h, g->cap, &n->call.quant);
        } else if (n->slot == offsetof(gpurt_api, grouped_gemm)) {
          e = cu_grouped_gemm(h, g->cap, &n->call.grouped);
        } else {
          e = gp_err(GPURT_ERR_INTERNAL, "call: slot %llu is not recorded by this plugin",
                     (unsigned long long)n->slot);
        }
        break;
      default:
        e = cu_graph_event(rt, st, n);
        break;
    }
  }
  CUgraph graph = NULL;
  r = cu_drv.p_cuStreamEndCapture(st->s, &graph);
  if (e) {
    if (graph) cu_drv.p_cuGraphDestroy(graph);
    return gp_err_wrap(e, "%s: item %llu", op, (unsigned long long)(i - 1));
  }
  if (r || graph == NULL) {
    if (graph) cu_drv.p_cuGraphDestroy(graph);
    return cu_fail(rt, g->dev, r ? r : CUDA_ERROR_UNKNOWN, "cuStreamEndCapture", NULL);
  }
  *out = graph;
  return NULL;
}

static gpurt_error *cu_graph_instantiate(cu_runtime *rt, uint32_t dev, CUgraph graph,
                                         CUgraphExec *out) {
  CUresult r = cu_drv.p_cuGraphInstantiate(out, graph, 0);
  if (r) return cu_fail(rt, dev, r, "cuGraphInstantiateWithFlags", NULL);
  return NULL;
}

/* Frees what g owns but its stream (context current). */
static void cu_graph_free(cu_graph *g) {
  if (g->exec) cu_drv.p_cuGraphExecDestroy(g->exec);
  if (g->graph) cu_drv.p_cuGraphDestroy(g->graph);
  pthread_mutex_destroy(&g->mu);
  for (uint64_t i = 0; g->nodes != NULL && i < g->count; i++) gp_graph_node_release(&g->nodes[i]);
  free(g->nodes);
  free(g->knodes);
  free(g->snaps);
  free(g);
}

void cu_release_graph(void *u, void *o) {
  cu_graph *g = o;
  cu_enter_quiet(u, g->dev);
  cu_graph_free(g);
}

gpurt_error *cu_graph_create(gpurt_runtime *h, const gpurt_graph_create_args *args,
                             gpurt_graph **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "graph_create", &e);
  if (!rt) return e;
  *out = NULL;
  gpurt_graph_create_args a;
  if ((e = gp_graph_create_check(args, &a))) return e;
  if (a.device >= rt->ndev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_create: device %u out of range (%u devices)",
                  a.device, rt->ndev);
  if (!cu_graph_funcs())
    return gp_err(GPURT_ERR_UNSUPPORTED, "graph_create: the driver lacks the CUDA graph entry "
                  "points (cuStreamBeginCapture_v2, cuGraphInstantiateWithFlags, ...)");
  cu_graph *g = calloc(1, sizeof *g);
  if (g == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: out of host memory");
  g->dev = a.device;
  g->count = a.count;
  g->nodes = calloc((size_t)a.count, sizeof *g->nodes);
  g->knodes = calloc((size_t)a.count, sizeof *g->knodes);
  g->snaps = calloc((size_t)a.count, sizeof *g->snaps);
  pthread_mutex_init(&g->mu, NULL);
  if (g->nodes == NULL || g->knodes == NULL || g->snaps == NULL) {
    cu_graph_free(g);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: out of host memory for %llu items",
                  (unsigned long long)a.count);
  }
  for (uint64_t i = 0; i < a.count; i++) {
    if ((e = gp_graph_item_read_ex(a.items, a.item_size, i, &g->nodes[i], cu_calls, CU_NCALLS))) {
      cu_graph_free(g);
      return gp_err_wrap(e, "graph_create: item %llu", (unsigned long long)i);
    }
    if (g->nodes[i].kind == GPURT_GRAPH_OP_EVENT_RECORD) g->has_records = 1;
  }
  if ((e = cu_stream_create(h, a.device, &g->cap))) {
    cu_graph_free(g);
    return gp_err_wrap(e, "graph_create: the graph's stream");
  }
  if ((e = cu_graph_capture(h, rt, g, g->nodes, "graph_create", &g->graph, g->knodes, g->snaps, &g->nsnaps)) ||
      (e = cu_graph_instantiate(rt, g->dev, g->graph, &g->exec))) {
    gpurt_stream *cap = g->cap;
    cu_enter_quiet(rt, g->dev);
    cu_graph_free(g);
    gp_error_destroy(cu_stream_destroy(h, cap));
    return e;
  }
  uint64_t hv;
  gpurt_stream *cap = g->cap;
  /* cu_insert releases g when the table is full: its stream goes too. */
  if ((e = cu_insert(rt, &rt->graphs, g, cu_release_graph, "graph_create", &hv))) {
    gp_error_destroy(cu_stream_destroy(h, cap));
    return e;
  }
  *out = (gpurt_graph *)(uintptr_t)hv;
  return NULL;
}

gpurt_error *cu_graph_launch(gpurt_runtime *h, gpurt_graph *gh, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_graph *g = cu_rt_obj(h, CU_TABLE(graphs), gh, &rt, &e);
  if (g == NULL) return e;
  if ((e = gp_need_stream("graph_launch", sh))) return e;
  cu_stream *st = cu_get(&rt->streams, sh, &e);
  if (st == NULL) return e;
  if (st->dev != g->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_launch: the graph is on device %u, the stream "
                  "on device %u: a graph replays on its own device", g->dev, st->dev);
  if ((e = cu_enter(rt, g->dev))) return e;
  pthread_mutex_lock(&g->mu);
  /* Recorded attention runs: their objects' plans still fit what was
   * captured (the plan is made outside the graph, between replays). */
  for (uint64_t i = 0; i < g->nsnaps; i++)
    if ((e = cu_attention_replay_check(rt, &g->snaps[i], sh))) {
      pthread_mutex_unlock(&g->mu);
      return e;
    }
  CUresult r = cu_drv.p_cuGraphLaunch(g->exec, st->s);
  if (r == CUDA_SUCCESS && g->has_records)
    for (uint64_t i = 0; i < g->count; i++)
      if (g->nodes[i].kind == GPURT_GRAPH_OP_EVENT_RECORD) {
        cu_event *ev = cu_table_lookup(&rt->events, (uint64_t)(uintptr_t)g->nodes[i].event);
        if (ev) atomic_store(&ev->recorded, 1);
      }
  pthread_mutex_unlock(&g->mu);
  if (r) return cu_fail(rt, g->dev, r, "cuGraphLaunch", st->last_kernel);
  return NULL;
}

/* Patches launch item i of g's executable with the new node n (checked as
 * launch checks it); g->mu held, context current. */
static gpurt_error *cu_graph_patch(cu_runtime *rt, cu_graph *g, const cu_stream *st, uint64_t i,
                                   const gp_graph_node *n) {
  cu_kernel *k;
  gpurt_launch_args a;
  uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
  void *ptrs[GPURT_MAX_KERNEL_PARAMS];
  gpurt_error *e = cu_launch_params(rt, st, n->kernel, &n->launch, &k, &a, vals, ptrs);
  if (e) return e;
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.func = k->fn;
  p.gridDimX = a.grid[0];
  p.gridDimY = a.grid[1];
  p.gridDimZ = a.grid[2];
  p.blockDimX = a.block[0];
  p.blockDimY = a.block[1];
  p.blockDimZ = a.block[2];
  p.sharedMemBytes = a.shared_mem_bytes;
  p.kernelParams = a.num_args ? ptrs : NULL;
  CUresult r = cu_drv.p_cuGraphExecKernelNodeSetParams(g->exec, g->knodes[i], &p);
  if (r) return cu_fail(rt, g->dev, r, "cuGraphExecKernelNodeSetParams_v2", NULL);
  return NULL;
}

gpurt_error *cu_graph_update(gpurt_runtime *h, gpurt_graph *gh, gpurt_graph_update_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_graph *g = cu_rt_obj(h, CU_TABLE(graphs), gh, &rt, &e);
  if (g == NULL) return e;
  gpurt_graph_update_args a;
  if ((e = gp_graph_update_check(args, &a))) return e;
  if (a.count == 0) {
    gp_write_struct(args, &a, sizeof a);
    return NULL;
  }
  cu_stream *st = cu_get(&rt->streams, g->cap, &e);
  if (st == NULL) return gp_err_wrap(e, "graph_update: the graph's stream");
  gp_graph_node *upd = calloc((size_t)a.count, sizeof *upd);
  gp_graph_node *next = calloc((size_t)g->count, sizeof *next);
  CUgraphNode *kn = calloc((size_t)g->count, sizeof *kn);
  cu_attn_snap *sn = calloc((size_t)g->count, sizeof *sn);
  uint64_t nsn = 0;
  if (!upd || !next || !kn || !sn) {
    free(upd);
    free(next);
    free(kn);
    free(sn);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_update: out of host memory");
  }
  pthread_mutex_lock(&g->mu);
  int patch = 1;
  for (uint64_t i = 0; i < a.count && !e; i++) {
    uint64_t at = a.indices[i];
    if (at >= g->count) {
      e = gp_err(GPURT_ERR_OUT_OF_RANGE, "graph_update: update %llu: item %llu does not exist (the "
                 "graph has %llu)", (unsigned long long)i, (unsigned long long)at,
                 (unsigned long long)g->count);
      break;
    }
    if ((e = gp_graph_item_read_ex(a.items, a.item_size, i, &upd[i], cu_calls, CU_NCALLS))) {
      e = gp_err_wrap(e, "graph_update: item %llu", (unsigned long long)at);
      break;
    }
    const char *why = gp_graph_update_forbids(&g->nodes[at], &upd[i]);
    if (why)
      e = gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_update: item %llu (%s): an update cannot change %s",
                 (unsigned long long)at, gp_graph_op_name(g->nodes[at].kind), why);
    if (upd[i].kind != GPURT_GRAPH_OP_LAUNCH || g->knodes[at] == NULL) patch = 0;
  }
  if (!e) e = cu_enter(rt, g->dev);
  if (!e && patch) {
    /* Check every launch first (launch's checks), then patch: an invalid
     * one changes nothing. */
    cu_kernel *k;
    gpurt_launch_args la;
    uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
    void *ptrs[GPURT_MAX_KERNEL_PARAMS];
    for (uint64_t i = 0; i < a.count && !e; i++)
      if ((e = cu_launch_params(rt, st, upd[i].kernel, &upd[i].launch, &k, &la, vals, ptrs)))
        e = gp_err_wrap(e, "graph_update: item %llu", (unsigned long long)a.indices[i]);
    for (uint64_t i = 0; i < a.count && !e; i++)
      if ((e = cu_graph_patch(rt, g, st, a.indices[i], &upd[i])))
        e = gp_err_wrap(e, "graph_update: item %llu (nodes before it were patched)",
                        (unsigned long long)a.indices[i]);
    if (!e) {
      for (uint64_t i = 0; i < a.count; i++) {
        g->nodes[a.indices[i]] = upd[i];
        gp_graph_node_fix(&g->nodes[a.indices[i]]);
      }
      a.applied = GPURT_GRAPH_UPDATE_PATCHED;
    }
  } else if (!e) {
    memcpy(next, g->nodes, (size_t)g->count * sizeof *next);
    for (uint64_t i = 0; i < a.count; i++) next[a.indices[i]] = upd[i];
    for (uint64_t i = 0; i < g->count; i++) gp_graph_node_fix(&next[i]);
    CUgraph graph = NULL;
    if (!(e = cu_graph_capture(h, rt, g, next, "graph_update", &graph, kn, sn, &nsn))) {
      CUgraphExecUpdateResultInfo info;
      memset(&info, 0, sizeof info);
      if (cu_drv.p_cuGraphExecUpdate(g->exec, graph, &info) == CUDA_SUCCESS) {
        /* The executable keeps the topology of g->graph, whose kernel
         * nodes (g->knodes) stay the ones to patch. */
        cu_drv.p_cuGraphDestroy(graph);
        a.applied = GPURT_GRAPH_UPDATE_EXEC_UPDATE;
      } else {
        CUgraphExec exec = NULL;
        if ((e = cu_graph_instantiate(rt, g->dev, graph, &exec))) {
          cu_drv.p_cuGraphDestroy(graph);
        } else {
          /* Replays already enqueued finish with the old executable
           * (CUDA frees an executable in flight when it completes). */
          cu_drv.p_cuGraphExecDestroy(g->exec);
          cu_drv.p_cuGraphDestroy(g->graph);
          g->exec = exec;
          g->graph = graph;
          memcpy(g->knodes, kn, (size_t)g->count * sizeof *kn);
          a.applied = GPURT_GRAPH_UPDATE_REINSTANTIATED;
        }
      }
      if (!e) {
        memcpy(g->nodes, next, (size_t)g->count * sizeof *next);
        for (uint64_t i = 0; i < g->count; i++) gp_graph_node_fix(&g->nodes[i]);
        memcpy(g->snaps, sn, (size_t)nsn * sizeof *sn);
        g->nsnaps = nsn;
      }
    }
  }
  pthread_mutex_unlock(&g->mu);
  free(upd);
  free(next);
  free(kn);
  free(sn);
  if (e) return e;
  gp_write_struct(args, &a, sizeof a);
  return NULL;
}

gpurt_error *cu_graph_destroy(gpurt_runtime *h, gpurt_graph *gh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_graph *g = cu_rt_take(h, CU_TABLE(graphs), gh, &rt, &e);
  if (g == NULL) return e;
  cu_enter_quiet(rt, g->dev);
  /* Replays still running read the graph's stream's workspace: let them
   * finish before it is freed. */
  if (!cu_dev_lost(rt, g->dev)) {
    CUresult r = cu_drv.p_cuCtxSynchronize();
    if (r) e = cu_fail(rt, g->dev, r, "graph_destroy: synchronize", NULL);
  }
  gpurt_stream *cap = g->cap;
  cu_graph_free(g);
  gpurt_error *se = cu_stream_destroy(h, cap);
  if (e == NULL) e = se;
  else gp_error_destroy(se);
  return e;
}

/* 1.7: the slots this plugin records in a graph. CALL items of launch,
 * gemm_run, copy and memset are read as their own kinds (csrc); of the
 * CALL slots without a kind of their own, every one: kv_append (one
 * kernel, nothing lazy); quant_matmul and grouped_gemm, their lazy module
 * load, scratch growth and cuBLASLt handle made before the capture
 * (cu_quant_graph_warm, as cu_gemm_graph_warm for GEMM; grouped_gemm's
 * m_sizes are host values, copied when the item is read: the graph
 * replays the routing it was recorded with, an update with new m_sizes
 * captures again); attention_run of a decode object on FlashInfer's
 * decode kernel, planned in FlashInfer's CUDA-graph mode (the plan stays
 * outside the graph and rewrites the same workspace between replays; a
 * replay needs the plan's batch to be the captured one, checked at
 * graph_launch: cu_attention_replay_check). */
gpurt_error *cu_graph_recordable(gpurt_runtime *h, uint64_t slot, uint8_t *out) {
  gpurt_error *e = NULL;
  if (cu_rt(h, &e) == NULL) return e;
  return gp_graph_recordable(slot, cu_calls, CU_NCALLS, out);
}
