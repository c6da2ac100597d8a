/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_graph.c — graphs (ABI 1.3) as CUDA graphs: the gp_backend entries
 * graph_begin .. graph_destroy. The engine (csrc/gp_engine_graph.c, with
 * gp_backend.graph_once) records a graph once at graph_create and again at
 * each graph_update that is not a patch, and launches the kept executable
 * at every graph_launch after its checks of the items.
 *
 * Recording. graph_begin makes a private stream (cu_stream_new) and a
 * cu_rec. The engine first passes every item's entry on it with
 * GP_QUEUE_PREPARE: each makes what it makes lazily (the GEMM plan's C
 * scratch, the stream's workspace, fp8 scale slots and 16-bit bias copy,
 * the quant kernels' module and scratch, cuBLASLt's handle) and enqueues
 * nothing, because neither cuMemAlloc nor cuStreamSynchronize may run while
 * the stream captures. graph_capture then begins the capture
 * (cuStreamBeginCapture_v2, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, on the
 * engine's calling thread), and the engine records the items through the
 * same entries: launches (the kernel node each added is kept per item,
 * cuStreamGetCaptureInfo_v3, for graph_patch), GEMMs, copies, memsets,
 * kv_append, quant_matmul, grouped_gemm, attention_run (decode objects on
 * FlashInfer's decode kernel, their snapshots kept: cuda_attention.c) and
 * event records and waits (external event nodes). graph_end ends the
 * capture and instantiates (cuGraphInstantiateWithFlags), or, for an
 * update, first tries cuGraphExecUpdate_v2 on the kept executable.
 *
 * An executable owns its private stream: the captured cuBLASLt and quant
 * kernels point into its workspace and scratch. Replays are ordered on the
 * replay stream (cuGraphLaunch); concurrent replays of one executable on
 * different streams share that memory, as CUDA graphs do.
 *
 * Update. Launch items only: their kernel nodes are patched in place
 * (graph_patch: cuGraphExecKernelNodeSetParams_v2, the engine checked the
 * new launch). Otherwise a new recording: cuGraphExecUpdate_v2 into the
 * kept executable (which then adopts the new stream and snapshots; its
 * kernel nodes stay the ones of its own graph), else a new executable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_internal.h"

/* An executable. */
typedef struct cu_exec {
  uint32_t dev;
  cu_stream *st;       /* the private stream its recording captured on */
  CUgraph graph;       /* the graph `exec` was instantiated from */
  CUgraphExec exec;
  uint64_t items;
  CUgraphNode *knodes; /* per item: a launch item's node in `graph` (NULL: none known) */
  cu_attn_snap *snaps; /* per attention object whose runs were captured */
  uint64_t nsnaps;     /* checked before every replay (cu_attention_replay_check) */
  cu_event **evs;      /* the events its items record: marked recorded at each replay */
  uint64_t nevs;
} cu_exec;

/* GPURT_CUDA_GRAPH_DOT=DIR: every graph instantiated afresh is written to
 * DIR/gpurt_graph_<pid>_<n>.dot (cuGraphDebugDotPrint, verbose: each
 * node's kind, kernel and parameters, and the edges, programmatic ones
 * included), to see what a step's graph holds (why one replays slower on
 * the host than another). Read once; best effort (a failure is ignored). */
static void dot_dump(CUgraph graph) {
  static const char *dir;
  static _Atomic int state; /* 0 unread, 1 off, 2 on */
  static _Atomic unsigned seq;
  int s = atomic_load(&state);
  if (s == 0) {
    dir = getenv("GPURT_CUDA_GRAPH_DOT");
    s = dir != NULL && *dir != 0 && cu_drv.p_cuGraphDebugDotPrint != NULL ? 2 : 1;
    atomic_store(&state, s);
  }
  if (s != 2) return;
  char path[4096];
  const int n = snprintf(path, sizeof path, "%s/gpurt_graph_%ld_%u.dot", dir, (long)getpid(), atomic_fetch_add(&seq, 1u));
  if (n > 0 && (size_t)n < sizeof path) (void)cu_drv.p_cuGraphDebugDotPrint(graph, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE);
}

static int cu_graph_funcs(void) {
  return cu_drv.p_cuStreamBeginCapture && cu_drv.p_cuStreamEndCapture &&
         cu_drv.p_cuStreamGetCaptureInfo && cu_drv.p_cuGraphInstantiate && cu_drv.p_cuGraphLaunch &&
         cu_drv.p_cuGraphExecDestroy && cu_drv.p_cuGraphDestroy && cu_drv.p_cuGraphExecUpdate &&
         cu_drv.p_cuGraphExecKernelNodeSetParams && cu_drv.p_cuEventRecordWithFlags;
}

static void rec_free(cu_rec *r) {
  if (r == NULL) return;
  free(r->knodes);
  free(r->snaps);
  free(r->evs);
  free(r);
}

gpurt_error *cu_graph_begin(void *ctx, uint32_t dev, gp_queue *q) {
  cu_runtime *rt = ctx;
  if (!cu_graph_funcs())
    return gp_err(GPURT_ERR_UNSUPPORTED, "the driver lacks the CUDA graph entry points "
                  "(cuStreamBeginCapture_v2, cuGraphInstantiateWithFlags, ...)");
  cu_rec *r = calloc(1, sizeof *r);
  if (r != NULL) {
    r->items = q->items;
    r->knodes = calloc(q->items ? (size_t)q->items : 1, sizeof *r->knodes);
  }
  if (r == NULL || r->knodes == NULL) {
    rec_free(r);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "out of host memory for a recording of %llu items",
                  (unsigned long long)q->items);
  }
  cu_stream *st;
  gpurt_error *e = cu_stream_new(rt, dev, &st);
  if (e) {
    rec_free(r);
    return gp_err_wrap(e, "the graph's stream");
  }
  st->rec = r;
  q->q = st;
  return NULL;
}

gpurt_error *cu_graph_capture(void *ctx, gp_queue *q) {
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  gpurt_error *e = cu_enter(rt, st->dev);
  if (e) return e;
  CUresult r = cu_drv.p_cuStreamBeginCapture(st->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r) return cu_fail(rt, st->dev, r, "cuStreamBeginCapture_v2", NULL);
  st->rec->capturing = 1;
  return NULL;
}

/* Frees an executable (its replays finished or the device lost). */
static void exec_free(cu_runtime *rt, cu_exec *x) {
  cu_enter_quiet(rt, x->dev);
  if (x->exec) cu_drv.p_cuGraphExecDestroy(x->exec);
  if (x->graph) cu_drv.p_cuGraphDestroy(x->graph);
  if (x->st) cu_stream_free(rt, x->st);
  free(x->knodes);
  free(x->snaps);
  free(x->evs);
  free(x);
}

/* Moves what the recording r kept (but its kernel nodes) into x. */
static void exec_adopt(cu_exec *x, cu_rec *r) {
  free(x->snaps);
  free(x->evs);
  x->snaps = r->snaps;
  x->nsnaps = r->nsnaps;
  x->evs = r->evs;
  x->nevs = r->nevs;
  r->snaps = NULL;
  r->evs = NULL;
  r->nsnaps = r->nevs = 0;
}

gpurt_error *cu_graph_end(void *ctx, gp_queue *q, int abort, void **execp) {
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  cu_rec *r = st->rec;
  CUgraph graph = NULL;
  gpurt_error *e = NULL;
  cu_enter_quiet(rt, st->dev);
  if (r->capturing) {
    CUresult cr = cu_drv.p_cuStreamEndCapture(st->s, &graph);
    if (!abort && (cr || graph == NULL))
      e = cu_fail(rt, st->dev, cr ? cr : CUDA_ERROR_UNKNOWN, "cuStreamEndCapture", NULL);
  } else if (!abort) {
    e = gp_err(GPURT_ERR_INTERNAL, "graph_end: the recording never began its capture");
  }
  if (!abort && !e && r->oom)
    e = gp_err(GPURT_ERR_OUT_OF_MEMORY, "out of host memory keeping what the recording captured");
  cu_exec *old = *execp;
  if (!abort && !e && old != NULL) {
    /* An update: into the kept executable where the topology allows. */
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    if (cu_drv.p_cuGraphExecUpdate(old->exec, graph, &info) == CUDA_SUCCESS) {
      /* Its replays in flight read the old stream's memory: they finish
       * first. Its kernel nodes stay those of its own graph. */
      CUresult sr = cu_drv.p_cuCtxSynchronize();
      if (sr) {
        e = cu_fail(rt, st->dev, sr, "graph_update: synchronize", NULL);
      } else {
        cu_stream *ost = old->st;
        old->st = st;
        st->rec = NULL;
        exec_adopt(old, r);
        cu_stream_free(rt, ost);
        cu_drv.p_cuGraphDestroy(graph);
        rec_free(r);
        return NULL;
      }
    }
  }
  cu_exec *x = NULL;
  if (!abort && !e) {
    x = calloc(1, sizeof *x);
    if (x == NULL) e = gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph: out of host memory");
  }
  if (!abort && !e) {
    CUresult ir = cu_drv.p_cuGraphInstantiate(&x->exec, graph, 0);
    if (ir) e = cu_fail(rt, st->dev, ir, "cuGraphInstantiateWithFlags", NULL);
  }
  if (abort || e) {
    free(x);
    if (graph) cu_drv.p_cuGraphDestroy(graph);
    st->rec = NULL;
    cu_stream_free(rt, st);
    rec_free(r);
    return e;
  }
  dot_dump(graph);
  x->dev = st->dev;
  x->st = st;
  x->graph = graph;
  x->items = r->items;
  x->knodes = r->knodes;
  r->knodes = NULL;
  exec_adopt(x, r);
  st->rec = NULL;
  rec_free(r);
  *execp = x;
  return NULL;
}

int cu_graph_patchable(void *ctx, void *exec, uint64_t item) {
  cu_exec *x = exec;
  return item < x->items && x->knodes[item] != NULL;
}

gpurt_error *cu_graph_patch(void *ctx, void *exec, uint64_t item, const gp_launch_op *l) {
  cu_runtime *rt = ctx;
  cu_exec *x = exec;
  gpurt_error *e = cu_enter(rt, x->dev);
  if (e) return e;
  CUDA_KERNEL_NODE_PARAMS p;
  uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
  void *ptrs[GPURT_MAX_KERNEL_PARAMS];
  cu_launch_node(l, &p, vals, ptrs);
  CUresult r = cu_drv.p_cuGraphExecKernelNodeSetParams(x->exec, x->knodes[item], &p);
  if (r) return cu_fail(rt, x->dev, r, "cuGraphExecKernelNodeSetParams_v2", NULL);
  return NULL;
}

/* Under the graph's lock (the engine's): recorded attention runs still fit
 * their objects' plans (made outside the graph, between replays), then
 * one cuGraphLaunch. */
gpurt_error *cu_graph_launch(void *ctx, void *exec, gp_queue *q) {
  cu_runtime *rt = ctx;
  cu_exec *x = exec;
  cu_stream *st = q->q;
  gpurt_error *e = cu_enter(rt, x->dev);
  if (e) return e;
  for (uint64_t i = 0; i < x->nsnaps; i++)
    if ((e = cu_attention_replay_check(&x->snaps[i]))) return e;
  CUresult r = cu_drv.p_cuGraphLaunch(x->exec, st->s);
  if (r) return cu_fail(rt, x->dev, r, "cuGraphLaunch", st->last_kernel);
  for (uint64_t i = 0; i < x->nevs; i++) atomic_store(&x->evs[i]->recorded, 1);
  return NULL;
}

/* Replays still running read the executable's stream memory: they finish
 * first. */
void cu_graph_destroy(void *ctx, void *exec) {
  cu_runtime *rt = ctx;
  cu_exec *x = exec;
  if (x == NULL) return;
  cu_enter_quiet(rt, x->dev);
  if (!cu_dev_lost(rt, x->dev)) (void)cu_drv.p_cuCtxSynchronize();
  exec_free(rt, x);
}
