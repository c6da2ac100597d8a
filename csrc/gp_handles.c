/* SPDX-License-Identifier: Apache-2.0 */
/* Generational handle tables: a handle encodes kind, owner, generation and
 * slot; it is never dereferenced, so freed, foreign or made-up handles are
 * detected instead of crashing. */
#include <stdlib.h>
#include <string.h>

#include "gp_comm.h"
#include "gp_common.h"

_Static_assert(sizeof(uintptr_t) == 8, "gpurt plugins need 64-bit pointers");

#define GP_IDX_BITS 24u
#define GP_MAX_SLOTS ((1u << GP_IDX_BITS) - 1u)
#define GP_NONE UINT32_MAX

static uintptr_t gp_encode(uint32_t kind, uint32_t owner, uint32_t gen, uint32_t idx) {
  return ((uintptr_t)(kind & 0xff) << 56) | ((uintptr_t)(owner & 0xffff) << 40) |
         ((uintptr_t)(gen & 0xffff) << 24) | (uintptr_t)(idx + 1);
}

const char *gp_kind_name(uint32_t kind) {
  switch (kind) {
    case GP_KIND_RUNTIME: return "runtime";
    case GP_KIND_BUFFER: return "buffer";
    case GP_KIND_HOST_BUFFER: return "host buffer";
    case GP_KIND_STREAM: return "stream";
    case GP_KIND_EVENT: return "event";
    case GP_KIND_MODULE: return "module";
    case GP_KIND_KERNEL: return "kernel";
    case GP_KIND_GEMM_PLAN: return "gemm plan";
    case GP_KIND_GRAPH: return "graph";
    case GP_KIND_ATTENTION: return "attention";
    case GP_KIND_COMM: return "communicator";
    default: return "handle";
  }
}

void gp_table_init(gp_handle_table *t, uint32_t kind, uint32_t owner) {
  memset(t, 0, sizeof *t);
  t->kind = kind;
  t->owner = owner & 0xffff;
  t->free_head = t->free_tail = GP_NONE;
}

void gp_table_free(gp_handle_table *t) {
  free(t->objs);
  free(t->gens);
  free(t->next);
  t->objs = NULL;
  t->gens = t->next = NULL;
  t->cap = t->live = 0;
  t->free_head = t->free_tail = GP_NONE;
}

static int gp_table_grow(gp_handle_table *t) {
  uint32_t ncap = t->cap ? t->cap * 2 : 16;
  if (ncap > GP_MAX_SLOTS) ncap = GP_MAX_SLOTS;
  if (ncap <= t->cap) return -1;
  void **o = realloc(t->objs, ncap * sizeof *o);
  if (o == NULL) return -1;
  t->objs = o;
  uint32_t *g = realloc(t->gens, ncap * sizeof *g);
  if (g == NULL) return -1;
  t->gens = g;
  uint32_t *n = realloc(t->next, ncap * sizeof *n);
  if (n == NULL) return -1;
  t->next = n;
  for (uint32_t i = t->cap; i < ncap; i++) {
    t->objs[i] = NULL;
    t->gens[i] = 1;
    t->next[i] = GP_NONE;
    if (t->free_tail == GP_NONE) t->free_head = i;
    else t->next[t->free_tail] = i;
    t->free_tail = i;
  }
  t->cap = ncap;
  return 0;
}

int gp_table_insert(gp_handle_table *t, void *obj, uintptr_t *out) {
  if (t->free_head == GP_NONE && gp_table_grow(t) != 0) return -1;
  uint32_t i = t->free_head;
  t->free_head = t->next[i];
  if (t->free_head == GP_NONE) t->free_tail = GP_NONE;
  t->next[i] = GP_NONE;
  t->objs[i] = obj;
  t->live++;
  *out = gp_encode(t->kind, t->owner, t->gens[i], i);
  return 0;
}

int gp_table_lookup(const gp_handle_table *t, uintptr_t h, void **obj) {
  if (h == 0) return GP_HANDLE_NULL;
  if ((uint32_t)(h >> 56) != t->kind) return GP_HANDLE_WRONG_KIND;
  if ((uint32_t)((h >> 40) & 0xffff) != t->owner) return GP_HANDLE_FOREIGN;
  uint32_t idx = (uint32_t)(h & GP_MAX_SLOTS);
  uint32_t gen = (uint32_t)((h >> 24) & 0xffff);
  if (idx == 0 || idx - 1 >= t->cap) return GP_HANDLE_STALE;
  idx--;
  if (t->objs[idx] == NULL || (t->gens[idx] & 0xffff) != gen) return GP_HANDLE_STALE;
  *obj = t->objs[idx];
  return GP_HANDLE_OK;
}

void *gp_table_remove(gp_handle_table *t, uintptr_t h) {
  void *obj = NULL;
  if (gp_table_lookup(t, h, &obj) != GP_HANDLE_OK) return NULL;
  uint32_t idx = (uint32_t)(h & GP_MAX_SLOTS) - 1;
  t->objs[idx] = NULL;
  t->gens[idx] = (t->gens[idx] + 1) & 0xffff;
  if (t->gens[idx] == 0) t->gens[idx] = 1;
  t->next[idx] = GP_NONE;
  if (t->free_tail == GP_NONE) t->free_head = idx;
  else t->next[t->free_tail] = idx;
  t->free_tail = idx;
  t->live--;
  return obj;
}

gpurt_error *gp_handle_error(int status, uint32_t kind, uintptr_t h) {
  const char *name = gp_kind_name(kind);
  switch (status) {
    case GP_HANDLE_NULL:
      return gp_err(GPURT_ERR_INVALID_HANDLE, "%s handle is NULL", name);
    case GP_HANDLE_WRONG_KIND: {
      uint32_t other = (uint32_t)(h >> 56);
      const char *oname = gp_kind_name(other);
      if (oname[0] == 'h' && oname[1] == 'a')
        return gp_err(GPURT_ERR_INVALID_HANDLE,
                      "invalid %s handle %#llx: never created by this plugin",
                      name, (unsigned long long)h);
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "invalid %s handle %#llx: it is a %s handle", name,
                    (unsigned long long)h, oname);
    }
    case GP_HANDLE_FOREIGN:
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "invalid %s handle %#llx: belongs to another runtime", name,
                    (unsigned long long)h);
    default:
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "invalid %s handle %#llx: freed or never created", name,
                    (unsigned long long)h);
  }
}

int gp_table_take(gp_handle_table *t, uintptr_t h, void **obj) {
  int st = gp_table_lookup(t, h, obj);
  if (st == GP_HANDLE_OK) gp_table_remove(t, h);
  return st;
}

gpurt_error *gp_table_full_error(const char *op, uint32_t kind) {
  return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: too many %ss (the handle table is full)", op,
                gp_kind_name(kind));
}

uint32_t gp_table_cap(const gp_handle_table *t) { return t->cap; }
void *gp_table_at(const gp_handle_table *t, uint32_t i) {
  return i < t->cap ? t->objs[i] : NULL;
}
