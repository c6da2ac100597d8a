/* SPDX-License-Identifier: Apache-2.0 */
/* Generational handle tables: a handle encodes kind, owner, generation and
 * slot; it is never dereferenced, so freed, foreign or made-up handles are
 * detected instead of crashing. Lookups are lock-free (gp_common.h). */
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

/* Slot i lives in bucket b at offset o: v = i + 16, b = log2(v) - 4. */
static inline void gp_where(uint32_t i, uint32_t *b, uint32_t *o) {
  uint32_t v = i + 16;
  uint32_t lg = 31u - (uint32_t)__builtin_clz(v);
  *b = lg - 4;
  *o = v - (1u << lg);
}

static inline gp_hslot *gp_slot(const gp_handle_table *t, uint32_t i) {
  uint32_t b, o;
  gp_where(i, &b, &o);
  gp_hslot *bucket = atomic_load_explicit(&((gp_handle_table *)t)->buckets[b], memory_order_acquire);
  return bucket ? &bucket[o] : NULL;
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
  pthread_mutex_init(&t->mu, NULL);
  t->free_head = t->free_tail = GP_NONE;
}

void gp_table_free(gp_handle_table *t) {
  for (uint32_t b = 0; b < GP_TABLE_BUCKETS; b++) {
    free(atomic_load(&t->buckets[b]));
    atomic_store(&t->buckets[b], NULL);
  }
  atomic_store(&t->cap, 0);
  atomic_store(&t->live, 0);
  t->free_head = t->free_tail = GP_NONE;
  pthread_mutex_destroy(&t->mu);
}

/* A fresh slot at the end (t->mu held); GP_NONE when full or no memory. */
static uint32_t gp_table_grow(gp_handle_table *t) {
  uint32_t i = atomic_load_explicit(&t->cap, memory_order_relaxed);
  if (i >= GP_MAX_SLOTS) return GP_NONE;
  uint32_t b, o;
  gp_where(i, &b, &o);
  if (atomic_load_explicit(&t->buckets[b], memory_order_relaxed) == NULL) {
    gp_hslot *bucket = calloc((size_t)16 << b, sizeof *bucket);
    if (bucket == NULL) return GP_NONE;
    for (uint32_t k = 0; k < (16u << b); k++) bucket[k].gen = 1;
    atomic_store_explicit(&t->buckets[b], bucket, memory_order_release);
  }
  atomic_store_explicit(&t->cap, i + 1, memory_order_release);
  return i;
}

int gp_table_insert(gp_handle_table *t, void *obj, uintptr_t *out) {
  pthread_mutex_lock(&t->mu);
  uint32_t i = t->free_head;
  if (i != GP_NONE) {
    gp_hslot *s = gp_slot(t, i);
    t->free_head = s->next;
    if (t->free_head == GP_NONE) t->free_tail = GP_NONE;
  } else if ((i = gp_table_grow(t)) == GP_NONE) {
    pthread_mutex_unlock(&t->mu);
    return -1;
  }
  gp_hslot *s = gp_slot(t, i);
  s->next = GP_NONE;
  uintptr_t h = gp_encode(t->kind, t->owner, s->gen, i);
  atomic_store_explicit(&s->obj, obj, memory_order_relaxed);
  atomic_store_explicit(&s->handle, (uint64_t)h, memory_order_release);
  atomic_fetch_add(&t->live, 1);
  pthread_mutex_unlock(&t->mu);
  *out = h;
  return 0;
}

int gp_table_lookup(const gp_handle_table *t, uintptr_t h, void **obj) {
  if (h == 0) return GP_HANDLE_NULL;
  if ((uint32_t)(h >> 56) != t->kind) return GP_HANDLE_WRONG_KIND;
  if ((uint32_t)((h >> 40) & 0xffff) != t->owner) return GP_HANDLE_FOREIGN;
  uint32_t idx = (uint32_t)(h & GP_MAX_SLOTS);
  if (idx == 0 || idx - 1 >= atomic_load_explicit(&((gp_handle_table *)t)->cap, memory_order_acquire))
    return GP_HANDLE_STALE;
  gp_hslot *s = gp_slot(t, idx - 1);
  if (s == NULL || atomic_load_explicit(&s->handle, memory_order_acquire) != (uint64_t)h) return GP_HANDLE_STALE;
  *obj = atomic_load_explicit(&s->obj, memory_order_relaxed);
  return GP_HANDLE_OK;
}

/* Removes slot idx of live handle h (t->mu held); returns its object. */
static void *gp_table_remove_locked(gp_handle_table *t, uintptr_t h) {
  void *obj = NULL;
  if (gp_table_lookup(t, h, &obj) != GP_HANDLE_OK) return NULL;
  uint32_t idx = (uint32_t)(h & GP_MAX_SLOTS) - 1;
  gp_hslot *s = gp_slot(t, idx);
  atomic_store_explicit(&s->handle, 0, memory_order_release);
  atomic_store_explicit(&s->obj, NULL, memory_order_relaxed);
  s->gen = (s->gen + 1) & 0xffff;
  if (s->gen == 0) s->gen = 1;
  s->next = GP_NONE;
  if (t->free_tail == GP_NONE) t->free_head = idx;
  else gp_slot(t, t->free_tail)->next = idx;
  t->free_tail = idx;
  atomic_fetch_sub(&t->live, 1);
  return obj;
}

void *gp_table_remove(gp_handle_table *t, uintptr_t h) {
  pthread_mutex_lock(&t->mu);
  void *obj = gp_table_remove_locked(t, h);
  pthread_mutex_unlock(&t->mu);
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
  pthread_mutex_lock(&t->mu);
  int st = gp_table_lookup(t, h, obj);
  if (st == GP_HANDLE_OK) gp_table_remove_locked(t, h);
  pthread_mutex_unlock(&t->mu);
  return st;
}

gpurt_error *gp_table_full_error(const char *op, uint32_t kind) {
  return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: too many %ss (the handle table is full)", op,
                gp_kind_name(kind));
}

uint32_t gp_table_cap(const gp_handle_table *t) {
  return atomic_load_explicit(&((gp_handle_table *)t)->cap, memory_order_acquire);
}

void *gp_table_at(const gp_handle_table *t, uint32_t i) {
  if (i >= gp_table_cap(t)) return NULL;
  gp_hslot *s = gp_slot(t, i);
  if (s == NULL || atomic_load_explicit(&s->handle, memory_order_acquire) == 0) return NULL;
  return atomic_load_explicit(&s->obj, memory_order_relaxed);
}
