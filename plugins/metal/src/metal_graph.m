/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_graph.m — graphs (ABI 1.3) of the Metal plugin: a recorded list
 * replayed by encoding. Not compiled here (needs macOS); written against
 * the sibling files' interfaces.
 *
 * graph_create keeps private copies of the items (csrc's
 * gp_graph_item_read checks their shape) and checks that each item's
 * kernel, plan or event is a live object of the graph's device. A replay
 * (graph_launch) encodes the list in order on the stream: every maximal run
 * of consecutive launch items is checked whole and then encoded into ONE
 * command buffer by one serial compute encoder (launch_batch's path, so a
 * decode step's kernels cost one command buffer), and each other item
 * (GEMM through MPS, copy, memset, event record or wait) is encoded by its
 * eager entry point, with that entry point's checks. A run or item that
 * fails stops the replay with an error naming the item; the items before it
 * stay enqueued (an invalid launch run enqueues none of its launches).
 * graph_update swaps in new, shape-checked arguments (PATCHED: the next
 * replay encodes them).
 */
#import "metal_internal.h"

#include <stdlib.h>
#include <string.h>

#include "gp_graph.h"

@interface GMGraph : NSObject {
@public
  uint32_t device;
  uint64_t count;
  gp_graph_node *nodes;
  gpurt_launch_item *items; /* scratch for the launch runs: count entries */
  pthread_mutex_t mu;       /* nodes: update against launch */
}
@end

@implementation GMGraph
- (instancetype)init {
  if ((self = [super init])) pthread_mutex_init(&mu, NULL);
  return self;
}
- (void)dealloc {
  free(nodes);
  free(items);
  pthread_mutex_destroy(&mu);
}
@end

/* The item's kernel, plan or event is a live object on device dev. */
static gpurt_error *gm_graph_check_node(GMRuntime *rt, uint32_t dev, const gp_graph_node *n) {
  gpurt_error *e;
  id o;
  switch (n->kind) {
    case GPURT_GRAPH_OP_LAUNCH: {
      if ((e = gm_lookup(rt, &rt->kernels, (uintptr_t)n->kernel, GP_KIND_KERNEL, &o))) return e;
      GMKernel *k = o;
      if (k->device->index != dev) return gp_launch_device_error(k->name.UTF8String, k->device->index, dev);
      return NULL;
    }
    case GPURT_GRAPH_OP_GEMM: {
      if ((e = gm_lookup(rt, &rt->plans, (uintptr_t)n->plan, GP_KIND_GEMM_PLAN, &o))) return e;
      GMPlan *p = o;
      if (p->device->index != dev)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: the plan is for device %u, the graph for %u",
                      p->device->index, dev);
      return NULL;
    }
    case GPURT_GRAPH_OP_EVENT_RECORD:
    case GPURT_GRAPH_OP_EVENT_WAIT: {
      if ((e = gm_lookup(rt, &rt->events, (uintptr_t)n->event, GP_KIND_EVENT, &o))) return e;
      GMEvent *ev = o;
      if (n->kind == GPURT_GRAPH_OP_EVENT_RECORD && ev->device->index != dev)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_record: the event is on device %u, the graph "
                      "on device %u", ev->device->index, dev);
      return NULL;
    }
    default: /* copies and memsets: their buffers are checked when encoded */
      return NULL;
  }
}

gpurt_error *gm_graph_create(gpurt_runtime *h, const gpurt_graph_create_args *args, gpurt_graph **out) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_create: out is NULL");
    *out = NULL;
    gpurt_graph_create_args a;
    if ((e = gp_graph_create_check(args, &a))) return e;
    GMDevice *d;
    if ((e = gm_device(rt, a.device, &d))) return e;
    GMGraph *g = [[GMGraph alloc] init];
    g->device = a.device;
    g->count = a.count;
    g->nodes = calloc((size_t)a.count, sizeof *g->nodes);
    g->items = calloc((size_t)a.count, sizeof *g->items);
    if (g->nodes == NULL || g->items == NULL)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_create: out of host memory for %llu items",
                    (unsigned long long)a.count);
    for (uint64_t i = 0; i < a.count; i++) {
      if ((e = gp_graph_item_read(a.items, a.item_size, i, &g->nodes[i])) ||
          (e = gm_graph_check_node(rt, a.device, &g->nodes[i])))
        return gp_err_wrap(e, "graph_create: item %llu", (unsigned long long)i);
    }
    uintptr_t hv = 0;
    if ((e = gm_insert(rt, &rt->graphs, g, &hv, "graph"))) return e;
    *out = (gpurt_graph *)hv;
    return NULL;
  }
}

/* Encodes items [from, to) of g, all launches, as one launch batch (one
 * command buffer). g->mu held. */
static gpurt_error *gm_graph_launch_run(gpurt_runtime *h, GMGraph *g, gpurt_stream *sh, uint64_t from,
                                        uint64_t to) {
  for (uint64_t i = from; i < to; i++) {
    g->items[i - from].kernel = g->nodes[i].kernel;
    g->items[i - from].args = &g->nodes[i].launch;
  }
  uint64_t done = 0;
  gpurt_error *e = gm_launch_batch(h, sh, to - from, g->items, &done);
  if (e == NULL) return NULL;
  /* launch_batch names its item ("launch_batch: item J: ..."); say which
   * graph item that is. */
  return gp_err_wrap(e, "graph_launch: items %llu..%llu (launch_batch item J is graph item %llu+J)",
                     (unsigned long long)from, (unsigned long long)(to - 1), (unsigned long long)from);
}

gpurt_error *gm_graph_launch(gpurt_runtime *h, gpurt_graph *gh, gpurt_stream *sh) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    id o;
    if ((e = gm_lookup(rt, &rt->graphs, (uintptr_t)gh, GP_KIND_GRAPH, &o))) return gp_err_wrap(e, "graph_launch");
    GMGraph *g = o;
    if ((e = gp_need_stream("graph_launch", sh))) return e;
    GMStream *s;
    if ((e = gm_get_stream(rt, sh, &s))) return gp_err_wrap(e, "graph_launch");
    if (s->device->index != g->device)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_launch: the graph is on device %u, the stream on "
                    "device %u: a graph replays on its own device", g->device, s->device->index);
    if ((e = gm_check_lost(s->device))) return gp_err_wrap(e, "graph_launch");
    pthread_mutex_lock(&g->mu);
    uint64_t i = 0;
    while (i < g->count && e == NULL) {
      const gp_graph_node *n = &g->nodes[i];
      if (n->kind == GPURT_GRAPH_OP_LAUNCH) {
        uint64_t j = i;
        while (j < g->count && g->nodes[j].kind == GPURT_GRAPH_OP_LAUNCH) j++;
        e = gm_graph_launch_run(h, g, sh, i, j);
        i = j;
        continue;
      }
      switch (n->kind) {
        case GPURT_GRAPH_OP_GEMM:
          e = gm_gemm_run(h, sh, n->plan, &n->gemm);
          break;
        case GPURT_GRAPH_OP_COPY: {
          gpurt_copy_args c = n->copy;
          c.stream = sh;
          e = gm_copy(h, &c);
          break;
        }
        case GPURT_GRAPH_OP_MEMSET: {
          gpurt_memset_args m = n->memset;
          m.stream = sh;
          e = gm_memset(h, &m);
          break;
        }
        case GPURT_GRAPH_OP_EVENT_RECORD:
          e = gm_event_record(h, n->event, sh);
          break;
        default:
          e = gm_stream_wait_event(h, sh, n->event);
          break;
      }
      if (e) e = gp_err_wrap(e, "graph_launch: item %llu", (unsigned long long)i);
      i++;
    }
    pthread_mutex_unlock(&g->mu);
    if (e && i > 0) e = gp_err_append(e, "; the items before it stay enqueued");
    return e;
  }
}

gpurt_error *gm_graph_update(gpurt_runtime *h, gpurt_graph *gh, gpurt_graph_update_args *args) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    id o;
    if ((e = gm_lookup(rt, &rt->graphs, (uintptr_t)gh, GP_KIND_GRAPH, &o))) return gp_err_wrap(e, "graph_update");
    GMGraph *g = o;
    gpurt_graph_update_args a;
    if ((e = gp_graph_update_check(args, &a))) return e;
    if (a.count == 0) {
      gp_write_struct(args, &a, sizeof a);
      return NULL;
    }
    gp_graph_node *upd = calloc((size_t)a.count, sizeof *upd);
    if (upd == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_update: out of host memory");
    pthread_mutex_lock(&g->mu);
    for (uint64_t i = 0; i < a.count && e == NULL; i++) {
      uint64_t at = a.indices[i];
      if (at >= g->count) {
        e = gp_err(GPURT_ERR_OUT_OF_RANGE, "graph_update: update %llu: item %llu does not exist (the graph "
                   "has %llu)", (unsigned long long)i, (unsigned long long)at, (unsigned long long)g->count);
        break;
      }
      if ((e = gp_graph_item_read(a.items, a.item_size, i, &upd[i])) ||
          (e = gm_graph_check_node(rt, g->device, &upd[i]))) {
        e = gp_err_wrap(e, "graph_update: item %llu", (unsigned long long)at);
        break;
      }
      const char *why = gp_graph_update_forbids(&g->nodes[at], &upd[i]);
      if (why)
        e = gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_update: item %llu (%s): an update cannot change %s",
                   (unsigned long long)at, gp_graph_op_name(g->nodes[at].kind), why);
    }
    if (e == NULL) {
      for (uint64_t i = 0; i < a.count; i++) {
        g->nodes[a.indices[i]] = upd[i];
        gp_graph_node_fix(&g->nodes[a.indices[i]]);
      }
      a.applied = GPURT_GRAPH_UPDATE_PATCHED;
    }
    pthread_mutex_unlock(&g->mu);
    free(upd);
    if (e) return e;
    gp_write_struct(args, &a, sizeof a);
    return NULL;
  }
}

gpurt_error *gm_graph_destroy(gpurt_runtime *h, gpurt_graph *gh) {
  if (gh == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    pthread_mutex_lock(&rt->mu);
    void *o = NULL;
    int st = gp_table_lookup(&rt->graphs, (uintptr_t)gh, &o);
    id gone = st == GP_HANDLE_OK ? gm_remove_locked(&rt->graphs, (uintptr_t)gh) : nil;
    pthread_mutex_unlock(&rt->mu);
    (void)gone; /* released here; replays already committed hold their own references */
    if (st != GP_HANDLE_OK) return gp_err_wrap(gp_handle_error(st, GP_KIND_GRAPH, (uintptr_t)gh), "graph_destroy");
    return NULL;
  }
}
