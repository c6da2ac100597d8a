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

typedef struct m_attn {
  uint32_t dev;
  gpurt_attention_desc d;
  pthread_mutex_t mu;    /* guards the plan below */
  gp_attention_sched sched;
  int32_t *counts;       /* the plan's qo_indptr[b+1] | kv_indptr[b+1] | last[b] */
  uint64_t cap;          /* entries counts holds (grown by a plan, never shrunk) */
} m_attn;

void mock_attention_destroy(void *ctx, void *obj) {
  (void)ctx;
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

/* A resolved gpurt_kv_pages: host addresses of device memory, and the
 * cache's fp8 scales. */
typedef struct m_pages {
  unsigned char *k, *v;
  uint64_t num_pages;
  const unsigned char *indptr, *indices, *last;
  uint64_t indices_avail; /* entries readable at indices */
  float k_scale, v_scale; /* an fp8 cache's (1.8) */
} m_pages;

/* The pages the engine resolved (and the op's scales), as the worker reads
 * them. */
static void pages_of(const gp_kv_pages_op *p, float k_scale, float v_scale, m_pages *out) {
  out->k_scale = k_scale;
  out->v_scale = v_scale;
  out->k = mock_ptr(&p->k);
  out->v = mock_ptr(&p->v);
  out->num_pages = p->num_pages;
  out->indptr = mock_ptr(&p->indptr);
  out->indices = mock_ptr(&p->indices);
  out->last = mock_ptr(&p->last_page_len);
  out->indices_avail = p->indices.size / 4;
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
  /* 1.10: the rotary embedding (inv_freq NULL: none), q rotated in place,
   * tmp one rotated K head (head_dim elements of the 16-bit type) */
  const unsigned char *inv_freq;
  unsigned char *q, *tmp;
  uint32_t num_qo_heads;
} m_append;

/* Rotates head_dim values of type dt at src (element index si) into dst
 * (element index di) at position pos: rope_neox_freqs_T's pairs. */
static void rope_head(int32_t dt, uint32_t hd, const unsigned char *inv, const void *src, uint64_t si, void *dst,
                      uint64_t di, int32_t pos) {
  for (uint32_t j = 0; j < hd / 2; j++) {
    float u = gp_load(dt, src, si + j), v = gp_load(dt, src, si + j + hd / 2), f;
    memcpy(&f, inv + 4 * j, 4);
    gp_rope_freqs_pair(dt, &u, &v, pos, f);
    gp_store(dt, dst, di + j, u);
    gp_store(dt, dst, di + j + hd / 2, v);
  }
}

static void append_free(void *ctx) {
  m_append *x = ctx;
  free(x->tmp);
  free(x);
}

static void append_run(void *ctx) {
  m_append *x = ctx;
  const gpurt_kv_layout *l = &x->l;
  if (x->q != NULL) /* every row of q, whether its K row is appended or not */
    for (uint64_t i = 0; i < x->nnz; i++)
      for (uint32_t h = 0; h < x->num_qo_heads; h++) {
        uint64_t at = (i * x->num_qo_heads + h) * l->head_dim;
        rope_head(l->dtype, l->head_dim, x->inv_freq, x->q, at, x->q, at, rd32(x->pos, i));
      }
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
      if (x->inv_freq != NULL) { /* K rotated at its position on the way in */
        rope_head(l->dtype, l->head_dim, x->inv_freq, x->k_rows, src, x->tmp, 0, pos);
        mock_kv_store_row(l, x->p.k, dst, x->tmp, 0, x->p.k_scale);
      } else {
        mock_kv_store_row(l, x->p.k, dst, x->k_rows, src, x->p.k_scale);
      }
      mock_kv_store_row(l, x->p.v, dst, x->v_rows, src, x->p.v_scale);
    }
  }
}

gpurt_error *mock_kv_append(void *ctx, gp_queue *q, const gp_kv_append_op *r) {
  (void)ctx;
  m_append *x = calloc(1, sizeof *x);
  if (!x) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kv_append: no memory");
  x->l = r->layout;
  x->batch = r->batch;
  x->nnz = r->nnz;
  pages_of(&r->pages, r->k_scale, r->v_scale, &x->p);
  x->k_rows = mock_ptr(&r->k_rows);
  x->v_rows = mock_ptr(&r->v_rows);
  x->bi = mock_ptr(&r->batch_indices);
  x->pos = mock_ptr(&r->positions);
  if (r->inv_freq.obj != NULL) {
    x->inv_freq = mock_ptr(&r->inv_freq);
    x->q = r->q.obj != NULL ? mock_ptr(&r->q) : NULL;
    x->num_qo_heads = r->num_qo_heads;
    if ((x->tmp = malloc(4ull * r->layout.head_dim)) == NULL) {
      free(x);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kv_append: no memory");
    }
  }
  return mock_submit_fn(q, "kv_append", append_run, append_free, x);
}

/* ------------------------------------------------------------------ */
/* Attention objects and plans                                         */
/* ------------------------------------------------------------------ */

gpurt_error *mock_attention_create(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj) {
  (void)ctx;
  /* Nothing in proportion to max_batch_size (up to 2^32 - 1): each plan
   * keeps its own counts. */
  m_attn *a = calloc(1, sizeof *a);
  if (!a) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "attention_create: no memory");
  a->dev = dev;
  a->d = *d;
  pthread_mutex_init(&a->mu, NULL);
  *obj = a;
  return NULL;
}

/* Keeps the plan's counts (the runs copy them into their ops). */
gpurt_error *mock_attention_plan(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *pa,
                                 const gp_attention_sched *sc) {
  (void)ctx;
  (void)q;
  m_attn *a = obj;
  uint64_t b = pa->batch_size, need = 3 * b + 2;
  pthread_mutex_lock(&a->mu);
  if (need > a->cap) {
    int32_t *c = realloc(a->counts, need * sizeof *c);
    if (c == NULL) {
      pthread_mutex_unlock(&a->mu);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "attention_plan: no memory for batch_size %llu", U(b));
    }
    a->counts = c;
    a->cap = need;
  }
  int32_t *qo = a->counts, *kv = qo + b + 1, *last = kv + b + 1;
  for (uint64_t i = 0; i <= b; i++) {
    qo[i] = pa->qo_indptr ? pa->qo_indptr[i] : (int32_t)i;
    kv[i] = pa->kv_indptr[i];
    if (i < b) last[i] = pa->kv_last_page_len[i];
  }
  a->sched = *sc;
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
        int32_t pg = rd32(x->p.indices, (uint64_t)x->kv[b] + t / ps);
        if (pg < 0 || (uint64_t)pg >= x->p.num_pages) { /* changed since the check: a racing writer */
          nan_rows(x, r0, r1);
          goto next_request;
        }
        uint64_t at = gp_kv_elem(l, (uint64_t)pg, t % ps, hk);
        for (uint32_t d = 0; d < D; d++) {
          kf[t * D + d] = mock_kv_load(l, x->p.k, at + d, x->p.k_scale);
          vf[t * D + d] = mock_kv_load(l, x->p.v, at + d, x->p.v_scale);
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
  next_request:;
  }
out:
  free(kf);
  free(vf);
  free(sc);
  free(acc);
  free(qd);
}

gpurt_error *mock_attention_run(void *ctx, gp_queue *q, const gp_attention_op *r) {
  (void)ctx;
  m_attn *a = r->obj;
  m_run *x = calloc(1, sizeof *x);
  if (!x) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "attention_run: no memory");
  /* The plan's counts, packed for its batch b: qo[b+1] | kv[b+1] | last[b]. */
  pthread_mutex_lock(&a->mu);
  const uint64_t b = a->sched.batch, n = 3 * b + 2;
  int32_t *counts = malloc(n * sizeof *counts);
  if (counts) memcpy(counts, a->counts, n * sizeof *counts);
  x->batch = a->sched.batch;
  x->rows = a->sched.rows;
  x->pages = a->sched.pages;
  pthread_mutex_unlock(&a->mu);
  if (!counts) {
    free(x);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "attention_run: no memory for the plan's %llu counts", U(n));
  }
  x->qo = counts;
  x->kv = counts + b + 1;
  x->last = counts + 2 * b + 2;
  x->d = a->d;
  x->scale = gp_attention_sm_scale(&a->d);
  pages_of(&r->pages, r->k_scale, r->v_scale, &x->p);
  x->q = mock_ptr(&r->q);
  x->o = mock_ptr(&r->o);
  x->qo_dev = mock_ptr(&r->qo_indptr);
  if (q->capturing) ((mock_recording *)q->q)->attention = 1;
  return mock_submit_fn(q, "attention_run", run_run, run_drop, x);
}
