/* SPDX-License-Identifier: Apache-2.0 */
/* sample_rows_T on the CPU (the mock's execution, the float64 reference of
 * gpurt.h's "sample_rows_T"): per-request temperature, top-k, top-p, min-p,
 * repetition and presence penalties, a Philox draw per request (seed,
 * offset) and the chosen token's logprob. Weights, masses and the logprob
 * are double; the penalised logits are rounded to T (they are written back
 * into x, as on every backend). CPU reference math: not linked into the
 * CUDA plugin (scripts/build_cuda.sh's cpu_reference list). */
#include <math.h>
#include <string.h>

#include "gp_common.h"

/* ---- Philox4x32-10 (Salmon et al., SC'11; curand's philox4_32_10 with
 * subsequence 0 and offset 4 * offset gives the same first word) -------- */
static void gp_philox_round(uint32_t ctr[4], const uint32_t key[2]) {
  uint64_t p0 = (uint64_t)0xD2511F53u * ctr[0], p1 = (uint64_t)0xCD9E8D57u * ctr[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t n0 = hi1 ^ ctr[1] ^ key[0], n2 = hi0 ^ ctr[3] ^ key[1];
  ctr[0] = n0, ctr[1] = lo1, ctr[2] = n2, ctr[3] = lo0;
}

uint32_t gp_philox_first(uint64_t seed, uint64_t offset) {
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t ctr[4] = {(uint32_t)offset, (uint32_t)(offset >> 32), 0, 0};
  for (int i = 0; i < 10; i++) {
    if (i > 0) key[0] += 0x9E3779B9u, key[1] += 0xBB67AE85u;
    gp_philox_round(ctr, key);
  }
  return ctr[0];
}

/* ---- the row's order and masses ------------------------------------------- */
static uint32_t sr_order_key(float v) { /* -0 as +0, NaN lowest (argmax_T) */
  if (v != v) return 0;
  if (v == 0.0f) v = 0.0f;
  uint32_t u;
  memcpy(&u, &v, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

typedef struct sr_row {
  int32_t dt;
  const void *x;
  uint64_t cols;
  float mx;      /* the row's maximum (finite here) */
  double temp;   /* > 0 */
  double minp;   /* kept: w >= minp (the argmax always) */
  uint64_t best; /* the argmax's key */
  uint64_t floor;
} sr_row;

static uint64_t sr_key(const sr_row *r, uint64_t c) {
  return ((uint64_t)sr_order_key(gp_load(r->dt, r->x, c)) << 32) | (uint64_t)(0xffffffffu - (uint32_t)c);
}

/* exp((x - max) / temperature) in double; NaN (a NaN logit) is 0. */
static double sr_w(const sr_row *r, uint64_t c) {
  double w = exp(((double)gp_load(r->dt, r->x, c) - (double)r->mx) / r->temp);
  return w == w ? w : 0.0;
}

static int sr_kept(const sr_row *r, uint64_t key, double w) {
  return key >= r->floor && (w >= r->minp || key == r->best);
}

/* The kept mass (weights, or the count when count is set) of the keys >= t. */
static double sr_mass(const sr_row *r, uint64_t t, int count) {
  double s = 0;
  for (uint64_t c = 0; c < r->cols; c++) {
    uint64_t key = sr_key(r, c);
    if (key < t) continue;
    double w = sr_w(r, c);
    if (sr_kept(r, key, w)) s += count ? 1.0 : w;
  }
  return s;
}

/* The largest key t whose kept mass is >= want (> want when strict). */
static uint64_t sr_search(const sr_row *r, double want, int count, int strict) {
  uint64_t t = 0;
  for (int b = 63; b >= 0; b--) {
    uint64_t cand = t | (1ull << b);
    double m = sr_mass(r, cand, count);
    if (strict ? m > want : m >= want) t = cand;
  }
  return t;
}

static float sr_f32(const char *p) {
  float f;
  memcpy(&f, p, 4);
  return f;
}

static int32_t sr_i32(const char *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint64_t sr_u64(const char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* The penalties, in place on row x (rounded to T): each distinct id of the
 * row's history in [0, cols), once. */
static void sr_penalise(int32_t dt, void *x, uint64_t cols, const char *hist, uint64_t nhist,
                        float rep, float pres) {
  int use_rep = isfinite(rep) && rep > 0.0f && rep != 1.0f;
  int use_pres = isfinite(pres) && pres != 0.0f;
  if (!use_rep && !use_pres) return;
  for (uint64_t j = 0; j < nhist; j++) {
    int32_t id = sr_i32(hist + 4 * j);
    if (id < 0 || (uint64_t)id >= cols) continue;
    int seen = 0;
    for (uint64_t i = 0; i < j && !seen; i++) seen = sr_i32(hist + 4 * i) == id;
    if (seen) continue;
    float v = gp_load(dt, x, (uint64_t)id);
    if (use_rep) v = v > 0.0f ? v / rep : v * rep;
    if (use_pres) v = v - pres;
    gp_store(dt, x, (uint64_t)id, v);
  }
}

void gp_sample_rows_run(const gp_launch_exec *e) {
  int32_t dt = e->k->dtype;
  size_t es = gp_dtype_size(dt);
  uint64_t all = e->scalar[3], cols = e->scalar[4], nhist = e->scalar[5];
  uint64_t rows = all < e->grid[0] ? all : e->grid[0];
  const char *p = e->bufs[2];
  char *out = e->bufs[0];
  for (uint64_t r = 0; r < rows; r++) {
    char *x = (char *)e->bufs[1] + r * cols * es;
    float temp = sr_f32(p + GP_SR_TEMP(all) + 4 * r);
    int32_t topk = sr_i32(p + GP_SR_TOPK(all) + 4 * r);
    float topp = sr_f32(p + GP_SR_TOPP(all) + 4 * r);
    float minp = sr_f32(p + GP_SR_MINP(all) + 4 * r);
    sr_penalise(dt, x, cols, p + GP_SR_HIST(all) + 4 * r * nhist, nhist,
                sr_f32(p + GP_SR_REP(all) + 4 * r), sr_f32(p + GP_SR_PRES(all) + 4 * r));
    sr_row row = {dt, x, cols, 0, 1.0, 0.0, 0, 0};
    uint64_t bk = sr_key(&row, 0), best = 0;
    for (uint64_t c = 1; c < cols; c++) {
      uint64_t key = sr_key(&row, c);
      if (key > bk) bk = key, best = c;
    }
    row.mx = gp_load(dt, x, best);
    row.best = bk;
    float lp = NAN;
    if (isfinite(row.mx)) {
      int greedy = !(temp > 0.0f);
      row.temp = greedy ? 1.0 : (double)temp;
      /* the logprob: the full row after penalties and temperature */
      double zall = 0;
      for (uint64_t c = 0; c < cols; c++) zall += sr_w(&row, c);
      if (!greedy && topk != 1) {
        if (topk > 0 && (uint64_t)topk < cols) row.floor = sr_search(&row, (double)topk, 1, 0);
        if (topp < 1.0f) { /* the shortest prefix of the top-k set holding top_p of its mass */
          if (topp > 0.0f) row.floor = sr_search(&row, (double)topp * sr_mass(&row, 0, 0), 0, 0);
          else row.floor = bk;
        }
        if (minp > 0.0f) row.minp = (double)minp;
        double z = sr_mass(&row, 0, 0);
        double u = (double)(gp_philox_first(sr_u64(p + GP_SR_SEED(all) + 8 * r),
                                            sr_u64(p + GP_SR_OFFSET(all) + 8 * r)) >> 8) *
                   (1.0 / 16777216.0);
        uint64_t t = sr_search(&row, u * z, 0, 1);
        /* t is a kept column's key, unless x changed while the row was read
         * (another stream writing it: a data race, whose values are
         * undefined but never a read outside the row): then the argmax. */
        uint64_t c = 0xffffffffu - (uint32_t)t;
        if (c < cols) best = c;
      }
      lp = (float)(((double)gp_load(dt, x, best) - (double)row.mx) / row.temp - log(zall));
    }
    int32_t tok = (int32_t)best;
    memcpy(out + 4 * r, &tok, 4);
    memcpy(out + 4 * all + 4 * r, &lp, 4);
  }
}
