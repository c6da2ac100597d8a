/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mock's attention over a paged KV cache (ABI 1.5): the reference the
 * GPU backends are compared against. Every score, softmax and weighted sum
 * is computed in double from the exact f16/bf16 inputs, then rounded once
 * to the output type (round to nearest even).
 *
 * Objects: an attention (gpurt_attention) holds its descriptor and the
 * last plan's host counts. A run copies the plan into its operation, so a
 * later plan (or destroy) never changes work already enqueued. When the
 * run executes on the stream's worker it reads the page table from device
 * memory, as a GPU does, and checks it against the plan: a differing count
 * makes every output row NaN, an index out of range makes its request's
 * rows NaN (GPUs leave both undefined; the mock makes them visible). An
 * append skips the rows whose batch index, position or page is out of
 * range.
 */
#include <math.h>

#include "gp_attention.h"
#include "mock_internal.h"

/* ------------------------------------------------------------------ */
/* Helpers: streams, device memory views, stream calls, the table      */
/* ------------------------------------------------------------------ */

/* A stream handle (non-NULL, valid, device not lost); writes its device. */
static gpurt_error *stream_get(mock_rt *rt, gpurt_stream *h, const char *what, mock_stream **out, uint32_t *dev) {
  gpurt_error *ns = gp_need_stream(what, h);
  if (ns) return ns;
  mock_stream *s;
  gpurt_error *e = mock_lookup(rt, &rt->streams, h, (void **)&s);
  if (e) return gp_err_wrap(e, "%s", what);
  if (mock_is_lost(rt, s->dev)) return mock_lost_err(what, s->dev);
  *out = s;
  *dev = s->dev;
  return NULL;
}

/* Device memory: buffer h on device dev, bytes [off, off+size) inside it;
 * writes the host address of byte off and, when avail is not NULL, the
 * bytes from off to the buffer's end. */
static gpurt_error *buffer_view(mock_rt *rt, uint32_t dev, gpurt_buffer *h, uint64_t off, uint64_t size,
                                const char *what, const char *name, unsigned char **out, uint64_t *avail) {
  if (h == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, name);
  mock_buf *b;
  gpurt_error *e = mock_lookup(rt, &rt->bufs, h, (void **)&b);
  if (e) return gp_err_wrap(e, "%s: %s", what, name);
  if (b->dev != dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s %#llx is on device %u but the stream is on device %u", what,
                  name, H(h), b->dev, dev);
  if (!gp_in_range(b->size, off, size))
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: %s needs %llu bytes from offset %llu, beyond buffer %#llx of %llu "
                  "bytes", what, name, U(size), U(off), H(h), U(b->size));
  *out = b->data + off;
  if (avail) *avail = b->size - off;
  return NULL;
}

typedef struct m_attn {
  uint32_t dev;
  gpurt_attention_desc d;
  pthread_mutex_t mu;    /* guards the plan below */
  int planned;
  gpurt_stream *stream;  /* the stream of the last plan */
  gp_attention_sched sched;
  int32_t *counts;       /* qo_indptr[max+1] | kv_indptr[max+1] | last[max] */
} m_attn;

void mock_attention_free(void *obj) {
  m_attn *a = obj;
  if (a == NULL) return;
  pthread_mutex_destroy(&a->mu);
  free(a->counts);
  free(a);
}

static int32_t rd32(const unsigned char *base, uint64_t i) {
  int32_t v;
  memcpy(&v, base + i * 4, 4);
  return v;
}

/* ------------------------------------------------------------------ */
/* Pages                                                               */
/* ------------------------------------------------------------------ */

/* A resolved gpurt_kv_pages: host addresses of device memory. */
typedef struct m_pages {
  unsigned char *k, *v;
  uint64_t num_pages;
  const unsigned char *indptr, *indices, *last;
  uint64_t indices_avail; /* entries readable at indices */
} m_pages;

/* Resolves the pages: K/V regions of num_pages pages, indptr (batch+1),
 * last_page_len (batch), and indices (`indices_min` entries at least). */
static gpurt_error *pages_view(mock_rt *rt, uint32_t dev, const gpurt_kv_layout *l, const gpurt_kv_pages *p,
                                uint32_t batch, uint64_t indices_min, const char *w, m_pages *out) {
  gpurt_error *e;
  gp_kv_extent x;
  unsigned char *ind;
  uint64_t avail = 0;
  if ((e = gp_kv_pages_check(l, p, batch, indices_min, UINT64_MAX, w, &x)) ||
      (e = buffer_view(rt, dev, p->k, p->k_offset, x.kv, w, "k", &out->k, NULL)) ||
      (e = buffer_view(rt, dev, p->v, p->v_offset, x.kv, w, "v", &out->v, NULL)) ||
      (e = buffer_view(rt, dev, p->indptr, p->indptr_offset, x.indptr, w, "indptr",
                       (unsigned char **)&out->indptr, NULL)) ||
      (e = buffer_view(rt, dev, p->last_page_len, p->last_page_len_offset, x.last, w, "last_page_len",
                       (unsigned char **)&out->last, NULL)) ||
      (e = buffer_view(rt, dev, p->indices, p->indices_offset, x.indices, w, "indices", &ind, &avail)))
    return e;
  out->indices = ind;
  out->indices_avail = avail / 4;
  out->num_pages = p->num_pages;
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Append                                                              */
/* ------------------------------------------------------------------ */

typedef struct m_append {
  gpurt_kv_layout l;
  m_pages p;
  uint32_t batch;
  uint64_t nnz;
  const unsigned char *k_rows, *v_rows, *bi, *pos;
  float k_scale, v_scale; /* an fp8 cache's (1.8) */
} m_append;

static void append_run(void *ctx) {
  m_append *x = ctx;
  const gpurt_kv_layout *l = &x->l;
  for (uint64_t i = 0; i < x->nnz; i++) {
    int32_t b = rd32(x->bi, i), pos = rd32(x->pos, i);
    if (b < 0 || (uint32_t)b >= x->batch || pos < 0) continue;
    int32_t p0 = rd32(x->p.indptr, (uint64_t)b), p1 = rd32(x->p.indptr, (uint64_t)b + 1);
    int32_t last = rd32(x->p.last, (uint64_t)b);
    if (p0 < 0 || p1 <= p0 || (uint64_t)p1 > x->p.indices_avail || last < 1 || (uint32_t)last > l->page_size)
      continue;
    uint64_t len = (uint64_t)(p1 - p0 - 1) * l->page_size + (uint64_t)last;
    if ((uint64_t)pos >= len) continue;
    int32_t page = rd32(x->p.indices, (uint64_t)p0 + (uint64_t)pos / l->page_size);
    if (page < 0 || (uint64_t)page >= x->p.num_pages) continue;
    uint64_t slot = (uint64_t)pos % l->page_size;
    for (uint32_t h = 0; h < l->num_kv_heads; h++) {
      uint64_t dst = gp_kv_elem(l, (uint64_t)page, slot, h);
      uint64_t src = (i * l->num_kv_heads + h) * l->head_dim;
      mock_kv_store_row(l, x->p.k, dst, x->k_rows, src, x->k_scale);
      mock_kv_store_row(l, x->p.v, dst, x->v_rows, src, x->v_scale);
    }
  }
}

gpurt_error *mock_kv_append_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, void *object, const void *args,
                                    mock_op **out) {
  (void)sh;
  (void)object;
  const char *w = "kv_append";
  uint32_t dev = s->dev;
  gpurt_error *e;
  *out = NULL;
  gpurt_kv_append_args a;
  uint64_t rows;
  if ((e = gp_kv_append_check(args, &a, &rows))) return e;
  if (a.nnz == 0) return NULL;
  m_append *x = calloc(1, sizeof *x);
  if (!x) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory", w);
  x->l = a.layout;
  x->batch = a.batch_size;
  x->nnz = a.nnz;
  x->k_scale = a.k_scale;
  x->v_scale = a.v_scale;
  unsigned char *kr, *vr, *bi, *pos;
  if ((e = pages_view(rt, dev, &a.layout, &a.pages, a.batch_size, 1, w, &x->p)) ||
      (e = gp_attention_align(w, "k_rows", a.k_rows_offset, 16)) ||
      (e = gp_attention_align(w, "v_rows", a.v_rows_offset, 16)) ||
      (e = gp_attention_align(w, "batch_indices", a.batch_indices_offset, 4)) ||
      (e = gp_attention_align(w, "positions", a.positions_offset, 4)) ||
      (e = buffer_view(rt, dev, a.k_rows, a.k_rows_offset, rows, w, "k_rows", &kr, NULL)) ||
      (e = buffer_view(rt, dev, a.v_rows, a.v_rows_offset, rows, w, "v_rows", &vr, NULL)) ||
      (e = buffer_view(rt, dev, a.batch_indices, a.batch_indices_offset, 4 * a.nnz, w, "batch_indices", &bi,
                            NULL)) ||
      (e = buffer_view(rt, dev, a.positions, a.positions_offset, 4 * a.nnz, w, "positions", &pos, NULL))) {
    free(x);
    return e;
  }
  x->k_rows = kr;
  x->v_rows = vr;
  x->bi = bi;
  x->pos = pos;
  return mock_fn_op(w, append_run, free, x, out);
}

gpurt_error *m_kv_append(gpurt_runtime *h, gpurt_stream *sh, const gpurt_kv_append_args *args) {
  return mock_call(h, sh, "kv_append", 1, mock_kv_append_prepare, NULL, args);
}

/* ------------------------------------------------------------------ */
/* Attention objects and plans                                         */
/* ------------------------------------------------------------------ */

gpurt_error *m_attention_create(gpurt_runtime *h, uint32_t dev, const gpurt_attention_desc *desc,
                                   gpurt_attention **out) {
  const char *w = "attention_create";
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: out is NULL", w);
  *out = NULL;
  if ((e = mock_check_dev(rt, dev, w))) return e;
  gpurt_attention_desc d;
  if ((e = gp_read_struct(&d, sizeof d, desc, "attention_create: desc"))) return e;
  if ((e = gp_attention_desc_check(&d))) return e;
  m_attn *a = calloc(1, sizeof *a);
  uint64_t n = d.max_batch_size;
  int32_t *counts = calloc(3 * n + 2, sizeof *counts);
  if (!a || !counts) {
    free(a);
    free(counts);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory for max_batch_size %llu", w, U(n));
  }
  a->dev = dev;
  a->d = d;
  a->counts = counts;
  pthread_mutex_init(&a->mu, NULL);
  uintptr_t ha;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->attns, a, &ha);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    mock_attention_free(a);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: too many attention objects", w);
  }
  *out = (gpurt_attention *)ha;
  return NULL;
}

gpurt_error *m_attention_destroy(gpurt_runtime *h, gpurt_attention *ah) {
  if (ah == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  void *o = NULL;
  pthread_mutex_lock(&rt->mu);
  int st = gp_table_lookup(&rt->attns, (uintptr_t)ah, &o);
  if (st == GP_HANDLE_OK) gp_table_remove(&rt->attns, (uintptr_t)ah);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_ATTENTION, (uintptr_t)ah);
  m_attn *a = o;
  /* Enqueued runs own copies of what they need: nothing to wait for. */
  mock_attention_free(a);
  return NULL;
}

gpurt_error *m_attention_plan(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                                 const gpurt_attention_plan_args *args) {
  const char *w = "attention_plan";
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_stream *s;
  uint32_t dev = 0;
  if ((e = stream_get(rt, sh, w, &s, &dev))) return e;
  m_attn *a;
  if ((e = mock_lookup(rt, &rt->attns, ah, (void **)&a))) return gp_err_wrap(e, "%s", w);
  if (a->dev != dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: attention %#llx is for device %u but the stream is on device %u",
                  w, H(ah), a->dev, dev);
  gpurt_attention_plan_args pa;
  if ((e = gp_read_struct(&pa, sizeof pa, args, "attention_plan: args"))) return e;
  gp_attention_sched sc;
  if ((e = gp_attention_plan_check(&a->d, &pa, &sc))) return e;
  uint64_t n = a->d.max_batch_size, b = pa.batch_size;
  pthread_mutex_lock(&a->mu);
  int32_t *qo = a->counts, *kv = a->counts + n + 1, *last = a->counts + 2 * n + 2;
  for (uint64_t i = 0; i <= b; i++) {
    qo[i] = pa.qo_indptr ? pa.qo_indptr[i] : (int32_t)i;
    kv[i] = pa.kv_indptr[i];
    if (i < b) last[i] = pa.kv_last_page_len[i];
  }
  a->sched = sc;
  a->stream = sh;
  a->planned = 1;
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Runs                                                                */
/* ------------------------------------------------------------------ */

typedef struct m_run {
  gpurt_attention_desc d;
  double scale;
  uint32_t batch;
  uint64_t rows, pages;
  int32_t *qo, *kv, *last; /* the plan's counts (owned, one allocation at qo) */
  const unsigned char *q;
  unsigned char *o;
  m_pages p;
  const unsigned char *qo_dev; /* prefill */
  float k_scale, v_scale; /* an fp8 cache's (1.8) */
} m_run;

static void run_drop(void *ctx) {
  m_run *x = ctx;
  free(x->qo);
  free(x);
}

/* Writes NaN into rows [r0, r1) of the output. */
static void nan_rows(m_run *x, uint64_t r0, uint64_t r1) {
  uint64_t per = (uint64_t)x->d.num_qo_heads * x->d.layout.head_dim;
  for (uint64_t i = r0 * per; i < r1 * per; i++) gp_store(gp_kv_qo_dtype(&x->d.layout), x->o, i, NAN);
}

static void run_run(void *ctx) {
  m_run *x = ctx;
  const gpurt_kv_layout *l = &x->d.layout;
  int32_t dt = gp_kv_qo_dtype(l); /* queries and outputs */
  uint32_t D = l->head_dim, Hq = x->d.num_qo_heads, Hk = l->num_kv_heads, group = Hq / Hk;
  uint32_t ps = l->page_size;
  int prefill = x->d.kind == GPURT_ATTENTION_PREFILL;
  double cap = x->d.logits_soft_cap;
  /* The device's page table must be the plan's. */
  for (uint32_t b = 0; b <= x->batch; b++) {
    if (rd32(x->p.indptr, b) != x->kv[b] || (b < x->batch && rd32(x->p.last, b) != x->last[b]) ||
        (prefill && rd32(x->qo_dev, b) != x->qo[b])) {
      nan_rows(x, 0, x->rows);
      return;
    }
  }
  uint64_t max_kv = 0;
  for (uint32_t b = 0; b < x->batch; b++) {
    uint64_t kv = (uint64_t)(x->kv[b + 1] - x->kv[b] - 1) * ps + (uint64_t)x->last[b];
    if (kv > max_kv) max_kv = kv;
  }
  float *kf = malloc(max_kv * D * sizeof *kf);
  float *vf = malloc(max_kv * D * sizeof *vf);
  double *sc = malloc(max_kv * sizeof *sc);
  double *acc = malloc(D * sizeof *acc);
  double *qd = malloc(D * sizeof *qd);
  if (!kf || !vf || !sc || !acc || !qd) {
    nan_rows(x, 0, x->rows);
    goto out;
  }
  for (uint32_t b = 0; b < x->batch; b++) {
    uint64_t r0 = (uint64_t)x->qo[b], r1 = (uint64_t)x->qo[b + 1];
    uint64_t np = (uint64_t)(x->kv[b + 1] - x->kv[b]);
    uint64_t kv = (np - 1) * ps + (uint64_t)x->last[b];
    int bad = 0;
    for (uint64_t j = 0; j < np; j++) {
      int32_t pg = rd32(x->p.indices, (uint64_t)x->kv[b] + j);
      if (pg < 0 || (uint64_t)pg >= x->p.num_pages) bad = 1;
    }
    if (bad) {
      nan_rows(x, r0, r1);
      continue;
    }
    for (uint32_t hk = 0; hk < Hk; hk++) {
      /* Gather this request's K and V for KV head hk (exact in f32). */
      for (uint64_t t = 0; t < kv; t++) {
        uint64_t pg = (uint64_t)rd32(x->p.indices, (uint64_t)x->kv[b] + t / ps);
        uint64_t at = gp_kv_elem(l, pg, t % ps, hk);
        for (uint32_t d = 0; d < D; d++) {
          kf[t * D + d] = mock_kv_load(l, x->p.k, at + d, x->k_scale);
          vf[t * D + d] = mock_kv_load(l, x->p.v, at + d, x->v_scale);
        }
      }
      for (uint32_t hq = hk * group; hq < (hk + 1) * group; hq++) {
        for (uint64_t r = r0; r < r1; r++) {
          uint64_t qbase = (r * Hq + hq) * D;
          for (uint32_t d = 0; d < D; d++) qd[d] = gp_load(dt, x->q, qbase + d);
          uint64_t n = kv;
          if (x->d.causal) n = kv - (r1 - r0) + (r - r0) + 1;
          double m = -INFINITY;
          for (uint64_t t = 0; t < n; t++) {
            const float *kr = kf + t * D;
            double s = 0;
            for (uint32_t d = 0; d < D; d++) s += qd[d] * (double)kr[d];
            s *= x->scale;
            if (cap > 0) s = cap * tanh(s / cap);
            sc[t] = s;
            if (s > m) m = s;
          }
          double den = 0;
          for (uint32_t d = 0; d < D; d++) acc[d] = 0;
          for (uint64_t t = 0; t < n; t++) {
            double p = exp(sc[t] - m);
            den += p;
            const float *vr = vf + t * D;
            for (uint32_t d = 0; d < D; d++) acc[d] += p * (double)vr[d];
          }
          for (uint32_t d = 0; d < D; d++) gp_store(dt, x->o, qbase + d, (float)(acc[d] / den));
        }
      }
    }
  }
out:
  free(kf);
  free(vf);
  free(sc);
  free(acc);
  free(qd);
}

gpurt_error *mock_attention_run_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, void *object,
                                        const void *args, mock_op **out) {
  gpurt_attention *ah = object;
  const char *w = "attention_run";
  uint32_t dev = s->dev;
  gpurt_error *e;
  *out = NULL;
  m_attn *a;
  if ((e = mock_lookup(rt, &rt->attns, ah, (void **)&a))) return gp_err_wrap(e, "%s", w);
  gpurt_attention_run_args ra;
  if ((e = gp_read_struct(&ra, sizeof ra, args, "attention_run: args"))) return e;
  m_run *x = calloc(1, sizeof *x);
  uint64_t n = a->d.max_batch_size;
  int32_t *counts = calloc(3 * n + 2, sizeof *counts);
  if (!x || !counts) {
    free(x);
    free(counts);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory", w);
  }
  x->qo = counts;
  pthread_mutex_lock(&a->mu);
  int planned = a->planned;
  gpurt_stream *ps = a->stream;
  uint64_t b = a->sched.batch;
  if (planned) {
    memcpy(counts, a->counts, (3 * n + 2) * sizeof *counts);
    x->batch = a->sched.batch;
    x->rows = a->sched.rows;
    x->pages = a->sched.pages;
  }
  pthread_mutex_unlock(&a->mu);
  if (!planned || (sh != NULL && ps != sh)) {
    run_drop(x);
    if (!planned)
      return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx has no plan (call attention_plan first)", w,
                    H(ah));
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: stream %#llx is not the stream of the last plan (%#llx); "
                  "runs go on the plan's stream", w, H(sh), H(ps));
  }
  /* Pack the counts: qo[b+1] | kv[b+1] | last[b] are at fixed offsets of n. */
  x->kv = counts + n + 1;
  x->last = counts + 2 * n + 2;
  x->d = a->d;
  x->scale = gp_attention_sm_scale(&a->d);
  const gpurt_kv_layout *l = &a->d.layout;
  uint64_t row_bytes = (uint64_t)a->d.num_qo_heads * l->head_dim * gp_dtype_size(gp_kv_qo_dtype(l));
  unsigned char *q, *o, *qo_dev = NULL;
  x->k_scale = ra.k_scale;
  x->v_scale = ra.v_scale;
  if ((e = gp_kv_scales_check(l, ra.k_scale, ra.v_scale, w)) ||
      (e = gp_attention_align(w, "q", ra.q_offset, 16)) || (e = gp_attention_align(w, "o", ra.o_offset, 16)) ||
      (e = buffer_view(rt, dev, ra.q, ra.q_offset, x->rows * row_bytes, w, "q", &q, NULL)) ||
      (e = buffer_view(rt, dev, ra.o, ra.o_offset, x->rows * row_bytes, w, "o", &o, NULL)) ||
      (e = pages_view(rt, dev, l, &ra.pages, (uint32_t)b, x->pages, w, &x->p))) {
    run_drop(x);
    return e;
  }
  if (a->d.kind == GPURT_ATTENTION_PREFILL) {
    if ((e = gp_attention_align(w, "qo_indptr", ra.qo_indptr_offset, 4)) ||
        (e = buffer_view(rt, dev, ra.qo_indptr, ra.qo_indptr_offset, 4 * (b + 1), w, "qo_indptr", &qo_dev,
                              NULL))) {
      run_drop(x);
      return e;
    }
  } else if (ra.qo_indptr != NULL) {
    run_drop(x);
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: qo_indptr is set for decode (pass NULL)", w);
  }
  x->q = q;
  x->o = o;
  x->qo_dev = qo_dev;
  return mock_fn_op(w, run_run, run_drop, x, out);
}

gpurt_error *m_attention_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                             const gpurt_attention_run_args *args) {
  return mock_call(h, sh, "attention_run", 1, mock_attention_run_prepare, ah, args);
}
