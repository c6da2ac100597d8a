/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_graph.m — the Metal plugin's recording queues (graph_begin ..
 * graph_end) and their replay. The engine records a replay at every
 * graph_launch, from its own checked and re-resolved copy of the items,
 * through the ordinary runs: on a recording each run keeps its encode
 * function (gm_submit) instead of committing a command buffer. graph_launch
 * then encodes the whole list, in order, into ONE command buffer of the
 * stream (consecutive launches share one serial compute encoder; event
 * records take their value and event waits the event's latest record at
 * this point, as eager calls here would) and commits it once, so nothing
 * else on the stream lands inside a replay. An item that fails to encode
 * (Metal gave no encoder) drops the whole command buffer: nothing of the
 * replay is enqueued, and its event records complete at once.
 */
#import "metal_internal.h"

gpurt_error *gm_graph_begin(void *ctx, uint32_t dev, gp_queue *rec) {
  @autoreleasepool {
    GMRecording *r = [[GMRecording alloc] init];
    r->device = gm_dev(ctx, dev);
    rec->q = (void *)CFBridgingRetain(r);
    return NULL;
  }
}

gpurt_error *gm_graph_end(void *ctx, gp_queue *rec, int abort, void **exec) {
  (void)ctx;
  @autoreleasepool {
    if (abort) {
      (void)CFBridgingRelease(rec->q);
    } else {
      *exec = rec->q; /* the table's reference moves to the executable */
    }
    rec->q = NULL;
    return NULL;
  }
}

gpurt_error *gm_graph_launch(void *ctx, void *exec, gp_queue *q) {
  (void)ctx;
  @autoreleasepool {
    GMRecording *r = (__bridge GMRecording *)exec;
    GMStream *s = (__bridge GMStream *)q->q;
    NSUInteger n = r->steps.count;
    if (n == 0) return NULL;
    GMEnc *x;
    gpurt_error *e = gm_stream_begin(s, &x);
    if (e) return e;
    for (NSUInteger i = 0; i < n; i++) {
      gm_encode_fn fn = r->steps[i];
      if ((e = fn(x))) {
        gm_stream_abort(s, x);
        return gp_err_append(gp_err_wrap(e, "operation %lu (%s)", (unsigned long)i, r->names[i].UTF8String),
                             "; nothing of the replay was enqueued");
      }
    }
    gm_stream_commit(s, x,
                     n == 1 ? [@"graph replay: " stringByAppendingString:r->names[0]]
                            : [NSString stringWithFormat:@"graph replay of %lu operations, first %@", (unsigned long)n,
                                                         r->names[0]]);
    return NULL;
  }
}

void gm_graph_destroy(void *ctx, void *exec) {
  (void)ctx;
  @autoreleasepool {
    if (exec != NULL) (void)CFBridgingRelease(exec);
  }
}
