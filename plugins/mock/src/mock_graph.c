/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_graph.c — the mock's recording queues (graph_begin .. graph_end)
 * and their replay. The engine records a replay's items on a recording
 * queue through the ordinary runs (each appends its op instead of
 * enqueueing it); graph_launch then publishes the replay's event records
 * and takes the latest record of every event it waits for, in order (as
 * the eager calls would at this point), and appends the whole list to
 * the stream's FIFO under one hold of its lock: nothing else lands inside
 * a replay. The refuse_replay_nth fault refuses a replay holding an
 * attention run, before anything of it is enqueued, as the CUDA plugin
 * refuses one whose attention plan no longer fits the captured kernels
 * (its workspace was reallocated, or the plan switched kernels): the
 * caller captures again (llm's launchStep).
 */
#include "mock_internal.h"

gpurt_error *mock_graph_begin(void *ctx, uint32_t dev, gp_queue *rec) {
  mock_recording *r = calloc(1, sizeof *r);
  if (!r) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "no memory for the recording");
  r->rt = ctx;
  r->dev = dev;
  rec->q = r;
  return NULL;
}

static void ops_free(mock_rt *rt, mock_op *op) {
  while (op) {
    mock_op *next = op->next;
    mock_op_free(rt, op);
    op = next;
  }
}

gpurt_error *mock_graph_end(void *ctx, gp_queue *rec, int abort, void **exec) {
  mock_recording *r = rec->q;
  if (abort) {
    ops_free(ctx, r->head);
    free(r);
    return NULL;
  }
  *exec = r;
  return NULL;
}

gpurt_error *mock_graph_launch(void *ctx, void *exec, gp_queue *q) {
  mock_rt *rt = ctx;
  mock_recording *r = exec;
  if (r->attention && mock_replay_fault(rt))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "graph_launch: a recorded attention run no longer fits its "
                  "object's plan (injected fault: refuse_replay_nth): capture the graph again");
  uint64_t n = 0;
  for (mock_op *op = r->head; op; op = op->next) n++;
  mock_op **seq = n ? calloc((size_t)n, sizeof *seq) : NULL;
  if (n && !seq) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "graph_launch: no memory for %llu operations", U(n));
  uint64_t k = 0;
  mock_op *next;
  for (mock_op *op = r->head; op; op = next) {
    next = op->next;
    if (op->kind == OP_RECORD && op->u.ev.ev) {
      op->u.ev.rec = mock_rec_publish(rt, op->u.ev.ev);
      if (op->u.ev.rec == NULL) { /* out of memory: the event keeps its earlier record */
        free(op);
        continue;
      }
    } else if (op->kind == OP_WAIT && op->u.ev.ev) {
      op->u.ev.rec = mock_latest_ref(rt, op->u.ev.ev);
      if (op->u.ev.rec == NULL) { /* never recorded: nothing to wait for */
        free(op);
        continue;
      }
    }
    seq[k++] = op;
  }
  r->head = r->tail = NULL; /* the stream owns the ops now */
  if (k) mock_enqueue_many(q->q, seq, k);
  free(seq);
  return NULL;
}

void mock_graph_destroy(void *ctx, void *exec) {
  mock_recording *r = exec;
  if (!r) return;
  ops_free(ctx, r->head);
  free(r);
}
