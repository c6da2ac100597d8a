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
  /* 1.7 CALL items of the slots without an item kind of their own (a
   * CALL of launch, gemm_run, copy or memset is read as that kind) */
  uint64_t slot;   /* offsetof(gpurt_api, <slot>) */
  void *object;    /* the handle the slot takes after the stream, or NULL */
  union {
    /* One member per recordable op (GP_ZCALLS), named as its slot:
     * quant_matmul, grouped_gemm (.m_sizes points at `owned`), kv_append,
     * attention_run, ... */
#define GP_CALL_MEMBER_(name, NAME, minor, idx, atype, obj) atype name;
    GP_ZCALLS(GP_CALL_MEMBER_)
#undef GP_CALL_MEMBER_
    /* The older short names (CUDA's graph code). */
    gpurt_quant_matmul_args quant;
    gpurt_grouped_gemm_args grouped;
    gpurt_attention_run_args attention;
  } call;
  uint64_t *owned; /* the node's copy of borrowed host arrays, or NULL */
} gp_graph_node;

/* The slots a CALL item may name, and how csrc reads them. */
typedef struct gp_call_slot {
  uint64_t slot;      /* offsetof(gpurt_api, name) */
  const char *name;   /* the slot's name, as in its eager messages */
  int32_t as_kind;    /* the older item kind it is read as, or
                         GPURT_GRAPH_OP_CALL */
  uint8_t object;     /* 1: the slot takes a handle after the stream */
} gp_call_slot;

/* The CALL slots csrc can read (launch, gemm_run, copy, memset and the
 * recordable ops of GP_ZCALLS: quant_matmul, grouped_gemm, kv_append,
 * attention_run, ...); NULL for another offset. */
const gp_call_slot *gp_call_slot_find(uint64_t slot);

/* graph_recordable's body: checks out and writes 1 when slot is launch,
 * gemm_run, copy or memset (every plugin with graphs records those) or
 * one of the plugin's `calls` (ncalls slot offsets of CALL slots it
 * records, as it passes them to gp_graph_item_read_ex). */
gpurt_error *gp_graph_recordable(uint64_t slot, const uint64_t *calls, size_t ncalls, uint8_t *out);

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
/* As gp_graph_item_read, and a CALL item of one of `calls` (ncalls slot
 * offsets: the plugin's recordable slots without an item kind of their
 * own, among GP_ZCALLS's) is
 * read into a GPURT_GRAPH_OP_CALL node: its argument struct copied with
 * the eager call's "<slot>: args" rule, a grouped GEMM's m_sizes copied
 * into n->owned. A CALL of another slot is UNSUPPORTED (the plugin does
 * not record it); a CALL of launch, gemm_run, copy or memset is read as
 * that kind. Release the node with gp_graph_node_release. */
gpurt_error *gp_graph_item_read_ex(const gpurt_graph_item *items, uint64_t item_size, uint64_t i,
                                   gp_graph_node *n, const uint64_t *calls, size_t ncalls);
/* Frees what the node owns (n->owned); the node stays readable. */
void gp_graph_node_release(gp_graph_node *n);

/* Points n->launch.args at n->kargs again (after n was copied). */
static inline void gp_graph_node_fix(gp_graph_node *n) {
  n->launch.args = n->kargs;
  if (n->kind == GPURT_GRAPH_OP_CALL && n->owned) n->call.grouped_gemm.m_sizes = n->owned;
}

/* What an update may not change of item `old` (NULL when nw may replace
 * it): its kind, its kernel or plan, a copy's size, a memset's size or
 * element size, a CALL's slot or object. */
const char *gp_graph_update_forbids(const gp_graph_node *old, const gp_graph_node *nw);

#endif /* GPURT_CSRC_GRAPH_H_ */
