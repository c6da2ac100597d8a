/* SPDX-License-Identifier: Apache-2.0 */
/* Error objects, struct_size-aware struct access, and the lock-free-read
 * generational handle tables of the CUDA plugin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"

/* ---- errors ------------------------------------------------------------ */

static char cu_oom_msg[] = "cuda: out of memory while reporting an error";
static struct gpurt_error cu_oom_error = {GPURT_ERR_OUT_OF_MEMORY, 1, 0,
                                          sizeof(cu_oom_msg) - 1, cu_oom_msg};

gpurt_error *cu_errv(int32_t code, int64_t vendor, const char *fmt,
                     va_list ap) {
  char body[2048];
  vsnprintf(body, sizeof body, fmt, ap);
  static const char prefix[] = "cuda: ";
  size_t plen = sizeof prefix - 1, blen = strlen(body);
  struct gpurt_error *e = malloc(sizeof *e + plen + blen + 1);
  if (e == NULL) return &cu_oom_error;
  e->code = code;
  e->is_static = 0;
  e->vendor_code = vendor;
  e->msg = (char *)(e + 1);
  memcpy(e->msg, prefix, plen);
  memcpy(e->msg + plen, body, blen + 1);
  e->len = plen + blen;
  return e;
}

gpurt_error *cu_err(int32_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gpurt_error *e = cu_errv(code, 0, fmt, ap);
  va_end(ap);
  return e;
}

gpurt_error *cu_errvendor(int32_t code, int64_t vendor, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gpurt_error *e = cu_errv(code, vendor, fmt, ap);
  va_end(ap);
  return e;
}

void cu_error_get(const gpurt_error *err, gpurt_error_info *out) {
  if (out == NULL || out->struct_size < sizeof(uint64_t)) return;
  gpurt_error_info info;
  memset(&info, 0, sizeof info);
  if (err == NULL) {
    info.code = GPURT_OK;
    info.message = "";
  } else {
    info.code = err->code;
    info.vendor_code = err->vendor_code;
    info.message = err->msg;
    info.message_len = err->len;
  }
  cu_write_struct(out, &info, sizeof info);
}

void cu_error_destroy(gpurt_error *err) {
  if (err == NULL || err->is_static) return;
  free(err);
}

/* ---- structs ----------------------------------------------------------- */

gpurt_error *cu_read_struct(void *local, size_t local_size, const void *in,
                            const char *what) {
  if (in == NULL) {
    memset(local, 0, local_size);
    return cu_err(GPURT_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  }
  uint64_t sz;
  memcpy(&sz, in, sizeof sz);
  if (__builtin_expect(sz >= local_size, 1)) { /* the caller's struct is as new as ours */
    memcpy(local, in, local_size);
    return NULL;
  }
  memset(local, 0, local_size); /* an older caller: zero what it lacks */
  if (sz < sizeof(uint64_t))
    return cu_err(GPURT_ERR_INVALID_ARGUMENT, "%s has struct_size %llu, below 8",
                  what, (unsigned long long)sz);
  memcpy(local, in, sz < local_size ? (size_t)sz : local_size);
  return NULL;
}

gpurt_error *cu_check_out(const void *out, const char *what) {
  if (out == NULL) return cu_err(GPURT_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  uint64_t sz;
  memcpy(&sz, out, sizeof sz);
  if (sz < sizeof(uint64_t))
    return cu_err(GPURT_ERR_INVALID_ARGUMENT, "%s has struct_size %llu, below 8",
                  what, (unsigned long long)sz);
  return NULL;
}

void cu_write_struct(void *out, const void *local, size_t local_size) {
  uint64_t sz;
  memcpy(&sz, out, sizeof sz);
  size_t n = sz < local_size ? (size_t)sz : local_size;
  if (n > sizeof(uint64_t))
    memcpy((char *)out + sizeof(uint64_t),
           (const char *)local + sizeof(uint64_t), n - sizeof(uint64_t));
}

void cu_strlcpy(char *dst, size_t cap, const char *src) {
  if (cap == 0) return;
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = 0;
}

/* ---- handle tables ------------------------------------------------------ */

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
    return cu_err(GPURT_ERR_INVALID_HANDLE, "%s handle is NULL", t->kind);
  return cu_err(GPURT_ERR_INVALID_HANDLE,
                "invalid %s handle %p: freed, foreign or never created",
                t->kind, h);
}
