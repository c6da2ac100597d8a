/* SPDX-License-Identifier: Apache-2.0 */
/* The lock-free-read handle tables of the CUDA plugin (cuda_internal.h says
 * why they are not csrc's gp_handle_table). */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define CU_NONE UINT32_MAX
static _Atomic uint64_t cu_serial = 1;

void cu_table_init(cu_table *t, const char *kind) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->mu, NULL);
  t->kind = kind;
  t->free_head = CU_NONE;
}

void cu_table_free(cu_table *t) {
  for (uint32_t c = 0; c < CU_HT_MAX_CHUNKS; c++) {
    cu_slot *chunk = atomic_load(&t->chunks[c]);
    if (chunk == NULL) break;
    free(chunk);
    atomic_store(&t->chunks[c], NULL);
  }
  atomic_store(&t->nslots, 0);
  pthread_mutex_destroy(&t->mu);
}

static cu_slot *cu_slot_at(const cu_table *t, uint32_t idx) {
  cu_slot *chunk = atomic_load_explicit(&t->chunks[idx >> CU_HT_CHUNK_BITS],
                                        memory_order_acquire);
  return chunk == NULL ? NULL : &chunk[idx & (CU_HT_CHUNK - 1)];
}

int cu_table_insert(cu_table *t, void *obj, uint64_t *out) {
  pthread_mutex_lock(&t->mu);
  uint32_t idx;
  if (t->free_head != CU_NONE) {
    idx = t->free_head;
    t->free_head = cu_slot_at(t, idx)->next_free;
  } else {
    idx = atomic_load(&t->nslots);
    if (idx >= CU_HT_CHUNK * CU_HT_MAX_CHUNKS) {
      pthread_mutex_unlock(&t->mu);
      return -1;
    }
    uint32_t c = idx >> CU_HT_CHUNK_BITS;
    if (atomic_load(&t->chunks[c]) == NULL) {
      cu_slot *chunk = calloc(CU_HT_CHUNK, sizeof(cu_slot));
      if (chunk == NULL) {
        pthread_mutex_unlock(&t->mu);
        return -1;
      }
      atomic_store_explicit(&t->chunks[c], chunk, memory_order_release);
    }
    atomic_store_explicit(&t->nslots, idx + 1, memory_order_release);
  }
  cu_slot *s = cu_slot_at(t, idx);
  uint64_t serial = atomic_fetch_add(&cu_serial, 1) & ((1ull << 40) - 1);
  uint64_t h = (serial << 24) | (uint64_t)(idx + 1);
  atomic_store_explicit(&s->obj, obj, memory_order_relaxed);
  atomic_store_explicit(&s->handle, h, memory_order_release);
  s->next_free = CU_NONE;
  t->live++;
  pthread_mutex_unlock(&t->mu);
  *out = h;
  return 0;
}

void *cu_table_remove(cu_table *t, uint64_t h) {
  pthread_mutex_lock(&t->mu);
  void *obj = cu_table_lookup(t, h);
  if (obj != NULL) {
    uint32_t idx = (uint32_t)((h & 0xffffffu) - 1);
    cu_slot *s = cu_slot_at(t, idx);
    atomic_store_explicit(&s->handle, 0, memory_order_release);
    atomic_store_explicit(&s->obj, NULL, memory_order_relaxed);
    s->next_free = t->free_head;
    t->free_head = idx;
    t->live--;
  }
  pthread_mutex_unlock(&t->mu);
  return obj;
}

void cu_table_each(cu_table *t, void (*fn)(void *user, void *obj), void *user) {
  pthread_mutex_lock(&t->mu);
  uint32_t n = atomic_load(&t->nslots);
  for (uint32_t i = 0; i < n; i++) {
    cu_slot *s = cu_slot_at(t, i);
    if (s != NULL && atomic_load(&s->handle) != 0) fn(user, atomic_load(&s->obj));
  }
  pthread_mutex_unlock(&t->mu);
}

gpurt_error *cu_bad_handle(const cu_table *t, const void *h) {
  if (h == NULL)
    return gp_err(GPURT_ERR_INVALID_HANDLE, "%s handle is NULL", t->kind);
  return gp_err(GPURT_ERR_INVALID_HANDLE,
                "invalid %s handle %p: freed, foreign or never created",
                t->kind, h);
}
