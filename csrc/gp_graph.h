/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_graph.h — what every plugin's graphs (ABI 1.3) share: a node is one
 * recorded item with private copies of its argument structs, read and
 * shape-checked by gp_graph_item_read (the handles are the plugin's to
 * check, with the eager calls' own checks).
 */
#ifndef GPURT_CSRC_GRAPH_H_
#define GPURT_CSRC_GRAPH_H_

#include "gp_common.h"

/* The stream a graph item's copy is checked with by gp_copy_check: the
 * item's own `stream` is NULL (the replay's stream orders it); this marker
 * only says "a stream", it is never looked up. */
#define GP_GRAPH_STREAM ((gpurt_stream *)(uintptr_t)1)

typedef struct gp_graph_node {
  int32_t kind; /* GPURT_GRAPH_OP_* */
  gpurt_kernel *kernel;
  gpurt_launch_args launch; /* .args points at kargs (see gp_graph_node_fix) */
  gpurt_kernel_arg kargs[GPURT_MAX_KERNEL_PARAMS];
  gpurt_gemm_plan *plan;
  gpurt_gemm_run_args gemm;
  gpurt_copy_args copy;
  gpurt_memset_args memset;
  gpurt_event *event;
} gp_graph_node;

/* "launch", "gemm", "copy", "memset", "event_record", "event_wait". */
const char *gp_graph_op_name(int32_t kind);

/* Checks graph_create's args (count >= 1, items set, item_size covers an
 * item's header, flags 0) into *a. */
gpurt_error *gp_graph_create_check(const gpurt_graph_create_args *in, gpurt_graph_create_args *a);
/* Checks graph_update's args into *a (count 0 is valid: nothing to do). */
gpurt_error *gp_graph_update_check(const gpurt_graph_update_args *in, gpurt_graph_update_args *a);

/* Reads item i of an array of item_size-byte items into n (private copies
 * of its argument structs) and checks its shape: a known kind, the fields
 * of its kind set and no others, a NULL stream in a copy or memset, flags
 * 0 and no pageable pointer in a copy, a memset of non-zero size, at most
 * GPURT_MAX_KERNEL_PARAMS launch arguments. Errors do not name the item
 * (the caller prefixes "item N: "). */
gpurt_error *gp_graph_item_read(const gpurt_graph_item *items, uint64_t item_size, uint64_t i,
                                gp_graph_node *n);

/* Points n->launch.args at n->kargs again (after n was copied). */
static inline void gp_graph_node_fix(gp_graph_node *n) { n->launch.args = n->kargs; }

/* What an update may not change of item `old` (NULL when nw may replace
 * it): its kind, its kernel or plan, a copy's size, a memset's size or
 * element size. */
const char *gp_graph_update_forbids(const gp_graph_node *old, const gp_graph_node *nw);

#endif /* GPURT_CSRC_GRAPH_H_ */
