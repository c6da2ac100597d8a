/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_memory.c — the mock's device memory (its own allocations, with
 * guard bytes checked on free and poison written), pinned host memory,
 * copy and memset. The engine has checked and resolved every operand.
 * See mock_internal.h for the objects and the locking.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

gpurt_error *mock_mem_alloc(void *ctx, uint32_t d, uint64_t size, gp_mem *out) {
  mock_rt *rt = ctx;
  if (mock_alloc_fault(rt))
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u allocating %llu bytes "
                  "(injected fault: fail_alloc_nth)", d, U(size));
  pthread_mutex_lock(&rt->mu);
  uint64_t free_b = rt->memory - rt->used[d];
  if (size > free_b) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u: asked for %llu bytes, "
                  "%llu bytes free of %llu", d, U(size), U(free_b), U(rt->memory));
  }
  rt->used[d] += size; /* reserve while allocating */
  pthread_mutex_unlock(&rt->mu);

  mock_buf *b = calloc(1, sizeof *b);
  void *raw = NULL;
  if (b == NULL || size > SIZE_MAX - 2 * MOCK_GUARD || posix_memalign(&raw, 256, (size_t)size + 2 * MOCK_GUARD) != 0) {
    free(b);
    pthread_mutex_lock(&rt->mu);
    rt->used[d] -= size;
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u: the host could not "
                  "back %llu bytes (malloc failed)", d, U(size));
  }
  b->dev = d;
  b->size = size;
  b->raw = raw;
  b->data = b->raw + MOCK_GUARD;
  memset(b->raw, MOCK_GUARD_BYTE, MOCK_GUARD);
  memset(b->data, MOCK_FRESH, size);
  memset(b->data + size, MOCK_GUARD_BYTE, MOCK_GUARD);
  memset(out, 0, sizeof *out);
  out->obj = b;
  out->addr = (uint64_t)(uintptr_t)b->data;
  return NULL;
}

/* Frees a buffer's memory: guards checked, poison written. An overwritten
 * guard is an error (the engine names the buffer before it). */
gpurt_error *mock_mem_free(void *ctx, gp_mem *m) {
  mock_rt *rt = ctx;
  mock_buf *b = m->obj;
  pthread_mutex_lock(&rt->mu);
  rt->used[b->dev] -= b->size;
  pthread_mutex_unlock(&rt->mu);
  const char *where = NULL;
  uint64_t at = 0;
  for (uint32_t i = 0; i < MOCK_GUARD; i++)
    if (b->raw[i] != MOCK_GUARD_BYTE) { where = "before its start"; at = MOCK_GUARD - i; break; }
  if (!where)
    for (uint32_t i = 0; i < MOCK_GUARD; i++)
      if (b->data[b->size + i] != MOCK_GUARD_BYTE) { where = "after its end"; at = i; break; }
  gpurt_error *e = NULL;
  if (where)
    e = gp_err(GPURT_ERR_OUT_OF_RANGE, "guard bytes %s were overwritten (an out-of-range write, %llu bytes %s); "
               "the buffer was freed", where, U(at), where[0] == 'b' ? "before" : "past the end");
  memset(b->data, MOCK_POISON, b->size);
  free(b->raw);
  free(b);
  return e;
}

void mock_corrupt_guard(const gp_mem *m) {
  mock_buf *b = m->obj;
  b->data[b->size] ^= 0xff;
}

gpurt_error *mock_host_alloc(void *ctx, uint64_t size, gp_mem *out, void **host_ptr) {
  mock_rt *rt = ctx;
  if (mock_alloc_fault(rt))
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of pinned host memory allocating %llu bytes "
                  "(injected fault: fail_alloc_nth)", U(size));
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  uint64_t asz = (size + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
  mock_host *hb = calloc(1, sizeof *hb);
  void *p = NULL;
  if (hb == NULL || asz < size || asz > SIZE_MAX || posix_memalign(&p, (size_t)page, (size_t)asz) != 0) {
    free(hb);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of pinned host memory: asked for %llu bytes "
                  "(malloc failed)", U(size));
  }
  memset(p, 0, (size_t)asz);
  hb->size = size;
  hb->alloc_size = asz;
  hb->ptr = p;
  memset(out, 0, sizeof *out);
  out->obj = hb;
  out->addr = (uint64_t)(uintptr_t)p;
  *host_ptr = p;
  return NULL;
}

void mock_host_free(void *ctx, gp_mem *m) {
  (void)ctx;
  mock_host *hb = m->obj;
  memset(hb->ptr, MOCK_POISON, (size_t)hb->alloc_size);
  free(hb->ptr);
  free(hb);
}

gpurt_error *mock_copy(void *ctx, gp_queue *q, const gp_copy *c) {
  (void)ctx;
  void *dst = mock_ptr(&c->dst);
  const void *src = mock_ptr(&c->src);
  if (q == NULL) {
    memmove(dst, src, (size_t)c->size);
    return NULL;
  }
  mock_op *op = NULL;
  gpurt_error *e = mock_op_new("copy", OP_COPY, &op);
  if (e) return e;
  op->sync = c->sync;
  op->u.copy.dst = dst;
  op->u.copy.src = src;
  op->u.copy.size = c->size;
  mock_submit(q, op);
  return NULL;
}

gpurt_error *mock_memset(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value, uint32_t es) {
  mock_rt *rt = ctx;
  mock_op *op = NULL;
  gpurt_error *e = mock_op_new("memset", OP_MEMSET, &op);
  if (e) return e;
  op->u.fill.dst = mock_ptr(dst);
  op->u.fill.size = size;
  op->u.fill.value = value;
  op->u.fill.es = es;
  if (q) {
    mock_submit(q, op);
    return NULL;
  }
  mock_op_run(rt, dst->dev, op);
  free(op);
  return NULL;
}
