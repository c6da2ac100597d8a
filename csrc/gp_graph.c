/* SPDX-License-Identifier: Apache-2.0 */
/* gp_graph.c — the shape checks of graph items (ABI 1.3); see gp_graph.h. */
#include "gp_graph.h"

#include <stdlib.h>
#include <string.h>

#define U(x) ((unsigned long long)(x))
#define H(p) ((unsigned long long)(uintptr_t)(p))

const char *gp_graph_op_name(int32_t k) {
  switch (k) {
    case GPURT_GRAPH_OP_LAUNCH: return "launch";
    case GPURT_GRAPH_OP_GEMM: return "gemm";
    case GPURT_GRAPH_OP_COPY: return "copy";
    case GPURT_GRAPH_OP_MEMSET: return "memset";
    case GPURT_GRAPH_OP_EVENT_RECORD: return "event_record";
    case GPURT_GRAPH_OP_EVENT_WAIT: return "event_wait";
    case GPURT_GRAPH_OP_CALL: return "call";
    default: return "unknown";
  }
}

static gpurt_error *item_size_check(const char *op, uint64_t item_size) {
  if (item_size < offsetof(gpurt_graph_item, kind) + sizeof(int32_t))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: item_size %llu is smaller than an item's header", op,
                  U(item_size));
  return NULL;
}

gpurt_error *gp_graph_create_check(const gpurt_graph_create_args *in, gpurt_graph_create_args *a) {
  gpurt_error *e;
  if ((e = gp_read_struct(a, sizeof *a, in, "graph_create: args"))) return e;
  if (a->flags != 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_create: unknown flags %#x", a->flags);
  if (a->count == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_create: count is 0 (a graph has items)");
  if (a->items == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_create: items is NULL with count %llu", U(a->count));
  if (a->count > UINT32_MAX)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_create: count %llu is too large", U(a->count));
  return item_size_check("graph_create", a->item_size);
}

gpurt_error *gp_graph_update_check(const gpurt_graph_update_args *in, gpurt_graph_update_args *a) {
  gpurt_error *e;
  if ((e = gp_read_struct(a, sizeof *a, in, "graph_update: args"))) return e;
  a->applied = GPURT_GRAPH_UPDATE_NONE;
  if (a->count == 0) return NULL;
  if (a->indices == NULL || a->items == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_update: indices or items is NULL with count %llu",
                  U(a->count));
  if (a->count > UINT32_MAX)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_update: count %llu is too large", U(a->count));
  return item_size_check("graph_update", a->item_size);
}

#define CALL_SLOT(field, kind, obj) {offsetof(gpurt_api, field), #field, kind, obj}
static const gp_call_slot call_slots[] = {
    CALL_SLOT(launch, GPURT_GRAPH_OP_LAUNCH, 1),
    CALL_SLOT(gemm_run, GPURT_GRAPH_OP_GEMM, 1),
    CALL_SLOT(copy, GPURT_GRAPH_OP_COPY, 0),
    CALL_SLOT(memset, GPURT_GRAPH_OP_MEMSET, 0),
#define CALL_ROW_(name, NAME, minor, idx, atype, obj) CALL_SLOT(name, GPURT_GRAPH_OP_CALL, obj),
    GP_ZCALLS(CALL_ROW_)
#undef CALL_ROW_
};

const gp_call_slot *gp_call_slot_find(uint64_t slot) {
  for (size_t i = 0; i < sizeof call_slots / sizeof call_slots[0]; i++)
    if (call_slots[i].slot == slot) return &call_slots[i];
  return NULL;
}

static int listed(uint64_t slot, const uint64_t *calls, size_t ncalls) {
  for (size_t i = 0; i < ncalls; i++)
    if (calls[i] == slot) return 1;
  return 0;
}

gpurt_error *gp_graph_recordable(uint64_t slot, const uint64_t *calls, size_t ncalls, uint8_t *out) {
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "graph_recordable: out is NULL");
  const gp_call_slot *cs = gp_call_slot_find(slot);
  *out = cs != NULL && (cs->as_kind != GPURT_GRAPH_OP_CALL || listed(slot, calls, ncalls));
  return NULL;
}

void gp_graph_node_release(gp_graph_node *n) {
  free(n->owned);
  n->owned = NULL;
}

/* A CALL item: checks its slot, object and args, then either rewrites it
 * as the older kind of its slot (*it) or reads it into n. */
static gpurt_error *call_read(gpurt_graph_item *it, gp_graph_node *n, const uint64_t *calls, size_t ncalls) {
  if (it->struct_size < offsetof(gpurt_graph_item, args) + sizeof it->args)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "call: the item's struct_size %llu ends before args (a CALL item "
                  "is ABI 1.7's gpurt_graph_item)", U(it->struct_size));
  const gp_call_slot *cs = gp_call_slot_find(it->slot);
  if (cs == NULL)
    return gp_err(GPURT_ERR_UNSUPPORTED, "call: the slot at offset %llu of gpurt_api is not one a graph records",
                  U(it->slot));
  if (it->args == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "call: args is NULL (%s needs its argument struct)", cs->name);
  if (cs->object && it->object == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "call: object is NULL (%s takes a handle)", cs->name);
  if (!cs->object && it->object != NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "call: object is %#llx but %s takes no handle", H(it->object),
                  cs->name);
  /* The item's own shape is the caller's to get right on every plugin,
   * so it is checked before what this plugin can record. */
  if (cs->as_kind == GPURT_GRAPH_OP_CALL && !listed(it->slot, calls, ncalls))
    return gp_err(GPURT_ERR_UNSUPPORTED, "call: this plugin does not record %s in a graph (graph_recordable "
                  "says 0)", cs->name);
  if (it->kernel || it->launch || it->plan || it->gemm || it->copy || it->memset || it->event)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "call: a field of another kind of item is set (only slot, object "
                  "and args may be)");
  switch (cs->as_kind) {
    case GPURT_GRAPH_OP_LAUNCH:
      it->kernel = it->object;
      it->launch = it->args;
      break;
    case GPURT_GRAPH_OP_GEMM:
      it->plan = it->object;
      it->gemm = it->args;
      break;
    case GPURT_GRAPH_OP_COPY: it->copy = it->args; break;
    case GPURT_GRAPH_OP_MEMSET: it->memset = it->args; break;
    default: break;
  }
  it->kind = cs->as_kind;
  if (cs->as_kind != GPURT_GRAPH_OP_CALL) return NULL;
  n->kind = GPURT_GRAPH_OP_CALL;
  n->slot = it->slot;
  n->object = it->object;
  /* The argument struct, with the eager call's "<slot>: args" rule. */
  gpurt_error *e = NULL;
#define READ_CALL_(name, NAME, minor, idx, atype, obj) \
  if (it->slot == offsetof(gpurt_api, name)) e = gp_read_struct(&n->call.name, sizeof n->call.name, it->args, #name ": args");
  GP_ZCALLS(READ_CALL_)
#undef READ_CALL_
  if (e || it->slot != offsetof(gpurt_api, grouped_gemm)) return e;
  /* grouped_gemm: m_sizes is borrowed host memory; keep a copy (the
   * replay's check, gp_grouped_check, reads it). */
  gpurt_grouped_gemm_args *g = &n->call.grouped_gemm;
  if (g->m_sizes != NULL && g->group_count >= 1 && g->group_count <= UINT32_MAX) {
    if (g->group_count > SIZE_MAX / sizeof(uint64_t) ||
        (n->owned = malloc((size_t)g->group_count * sizeof(uint64_t))) == NULL)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "grouped_gemm: no memory to copy %llu m_sizes", U(g->group_count));
    memcpy(n->owned, g->m_sizes, (size_t)g->group_count * sizeof(uint64_t));
    g->m_sizes = n->owned;
  }
  return NULL;
}

gpurt_error *gp_graph_item_read(const gpurt_graph_item *items, uint64_t item_size, uint64_t i,
                                gp_graph_node *n) {
  return gp_graph_item_read_ex(items, item_size, i, n, NULL, 0);
}

gpurt_error *gp_graph_item_read_ex(const gpurt_graph_item *items, uint64_t item_size, uint64_t i,
                                   gp_graph_node *n, const uint64_t *calls, size_t ncalls) {
  const gpurt_graph_item *src =
      (const gpurt_graph_item *)(const void *)((const unsigned char *)items + i * item_size);
  gpurt_graph_item it;
  gpurt_error *e;
  if ((e = gp_read_struct(&it, sizeof it, src, "item"))) return e;
  memset(n, 0, sizeof *n);
  n->kind = it.kind;
  gp_graph_node_fix(n);
  if (it.kind == GPURT_GRAPH_OP_CALL) {
    if ((e = call_read(&it, n, calls, ncalls))) {
      gp_graph_node_release(n);
      return e;
    }
    if (it.kind == GPURT_GRAPH_OP_CALL) return NULL;
    n->kind = it.kind;
  }
  int extra;
  switch (it.kind) {
    case GPURT_GRAPH_OP_LAUNCH:
      extra = it.plan || it.gemm || it.copy || it.memset || it.event;
      if (it.kernel == NULL || it.launch == NULL)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch: kernel and launch must be set");
      if ((e = gp_launch_read(it.launch, &n->launch))) return e;
      if (n->launch.num_args > GPURT_MAX_KERNEL_PARAMS)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch: %u arguments (at most %u)", n->launch.num_args,
                      GPURT_MAX_KERNEL_PARAMS);
      if (n->launch.num_args > 0 && n->launch.args == NULL)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch: args is NULL with num_args %u", n->launch.num_args);
      if (n->launch.num_args > 0) memcpy(n->kargs, n->launch.args, n->launch.num_args * sizeof n->kargs[0]);
      gp_graph_node_fix(n);
      n->kernel = it.kernel;
      break;
    case GPURT_GRAPH_OP_GEMM:
      extra = it.kernel || it.launch || it.copy || it.memset || it.event;
      if (it.plan == NULL || it.gemm == NULL)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm: plan and gemm must be set");
      if ((e = gp_read_struct(&n->gemm, sizeof n->gemm, it.gemm, "gemm_run: args"))) return e;
      n->plan = it.plan;
      break;
    case GPURT_GRAPH_OP_COPY:
      extra = it.kernel || it.launch || it.plan || it.gemm || it.memset || it.event;
      if (it.copy == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: copy must be set");
      if ((e = gp_read_struct(&n->copy, sizeof n->copy, it.copy, "copy: args"))) return e;
      if (n->copy.stream != NULL || n->copy.flags != 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: stream must be NULL and flags 0 in a graph (stream "
                      "%#llx, flags %#x): the replay's stream orders it", H(n->copy.stream), n->copy.flags);
      if (n->copy.dst_ptr != NULL || n->copy.src_ptr != NULL)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: %s_ptr is pageable memory; a graph copies between "
                      "device buffers and host buffers only", n->copy.dst_ptr ? "dst" : "src");
      break;
    case GPURT_GRAPH_OP_MEMSET:
      extra = it.kernel || it.launch || it.plan || it.gemm || it.copy || it.event;
      if (it.memset == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "memset: memset must be set");
      if ((e = gp_read_struct(&n->memset, sizeof n->memset, it.memset, "memset: args"))) return e;
      if (n->memset.stream != NULL)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "memset: stream must be NULL in a graph (it is %#llx): the "
                      "replay's stream orders it", H(n->memset.stream));
      if (n->memset.size == 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "memset: size is 0 (an empty memset is no graph item)");
      break;
    case GPURT_GRAPH_OP_EVENT_RECORD:
    case GPURT_GRAPH_OP_EVENT_WAIT:
      extra = it.kernel || it.launch || it.plan || it.gemm || it.copy || it.memset;
      if (it.event == NULL)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: event must be set", gp_graph_op_name(it.kind));
      n->event = it.event;
      break;
    default:
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kind %d is not a graph operation (GPURT_GRAPH_OP_*)", it.kind);
  }
  if (extra)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: a field of another kind of item is set (only the %s fields "
                  "may be)", gp_graph_op_name(it.kind), gp_graph_op_name(it.kind));
  return NULL;
}

const char *gp_graph_update_forbids(const gp_graph_node *old, const gp_graph_node *nw) {
  if (nw->kind != old->kind) return "its kind";
  if (nw->kind == GPURT_GRAPH_OP_LAUNCH && nw->kernel != old->kernel) return "its kernel";
  if (nw->kind == GPURT_GRAPH_OP_GEMM && nw->plan != old->plan) return "its plan";
  if (nw->kind == GPURT_GRAPH_OP_COPY && nw->copy.size != old->copy.size) return "its size";
  if (nw->kind == GPURT_GRAPH_OP_MEMSET &&
      (nw->memset.size != old->memset.size || nw->memset.element_size != old->memset.element_size))
    return "its size or element size";
  if ((nw->kind == GPURT_GRAPH_OP_EVENT_RECORD || nw->kind == GPURT_GRAPH_OP_EVENT_WAIT) && nw->event != old->event)
    return "its event";
  if (nw->kind == GPURT_GRAPH_OP_CALL && nw->slot != old->slot) return "its slot";
  if (nw->kind == GPURT_GRAPH_OP_CALL && nw->object != old->object) return "its object";
  return NULL;
}
