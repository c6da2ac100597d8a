/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_engine_ops.c — the engine's front halves of the operation families:
 * quantized and grouped matmul (1.4), the paged KV cache's append and
 * attention (1.5), collectives (1.6). Each reads and checks the caller's
 * struct (gp_quant.c, gp_attention.c, gp_comm.c), resolves every handle and
 * operand, and hands the backend's run a descriptor of gp_mem's.
 */
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"

gpurt_error *gp_call(gpurt_runtime *h, gpurt_stream *sh, const char *what, int wrap, gp_call_fn fn, void *object,
                     const void *args) {
  GP_RT_OR_RETURN(h);
  gp_stream *s;
  if ((e = gp_stream_get(rt, sh, what, wrap, &s))) return e;
  return fn(rt, s, sh, object, args, 1);
}

/* ---- quantized and grouped matmul (1.4) ------------------------------------------- */

gpurt_error *gp_quant_matmul_on(gp_rt *rt, gp_stream *s, gpurt_stream *sh, void *object, const void *args, int run) {
  (void)sh;
  (void)object;
  const char *w = "quant_matmul";
  gpurt_error *e;
  gp_quant_op r;
  memset(&r, 0, sizeof r);
  if ((e = gp_quant_mm_check(args, &r.c))) return e;
  const gpurt_quant_matmul_args *a = &r.c.a;
  const gp_view_req v[] = {
      {"w", a->w, a->w_offset, r.c.w_bytes, &r.w},
      {"scales", a->scales, a->scales_offset, r.c.s_bytes, &r.scales},
      {"biases", a->biases, a->biases_offset, r.c.s_bytes, &r.biases},
      {"x", a->x, a->x_offset, r.c.x_bytes, &r.x},
      {"y", a->y, a->y_offset, r.c.y_bytes, &r.y},
  };
  if ((e = gp_views(rt, GP_VIEW_OPERAND, s->q.dev, w, v, 5))) return e;
  if (!run) return NULL;
  return gp_eb->quant_matmul(rt->ctx, &s->q, &r);
}

gpurt_error *gp_grouped_gemm_on(gp_rt *rt, gp_stream *s, gpurt_stream *sh, void *object, const void *args, int run) {
  (void)sh;
  (void)object;
  const char *w = "grouped_gemm";
  gpurt_error *e;
  gp_grouped_op r;
  memset(&r, 0, sizeof r);
  if ((e = gp_grouped_check(args, &r.c))) return e;
  const gpurt_grouped_gemm_args *a = &r.c.a;
  const gp_view_req v[] = {
      {"a", a->a, a->a_offset, r.c.a_bytes, &r.a},
      {"b", a->b, a->b_offset, r.c.b_bytes, &r.b},
      {"d", a->d, a->d_offset, r.c.d_bytes, &r.d},
      /* fp8 only: */
      {"scale_a", a->scale_a, a->scale_a_offset, r.c.sa_bytes, &r.scale_a},
      {"scale_b", a->scale_b, a->scale_b_offset, r.c.sb_bytes, &r.scale_b},
  };
  if ((e = gp_views(rt, GP_VIEW_OPERAND, s->q.dev, w, v, r.c.fp8 ? 5 : 3))) return e;
  if (r.c.dev_counts) { /* 1.11: group_count uint32 counts on the device */
    const gp_view_req m = {"m_counts", a->m_counts, a->m_counts_offset, a->group_count * 4, &r.m_counts};
    if ((e = gp_views(rt, GP_VIEW_OPERAND, s->q.dev, w, &m, 1))) return e;
  }
  if (!run || r.c.total_m == 0) return NULL; /* M = 0: nothing to compute */
  return gp_eb->grouped_gemm(rt->ctx, &s->q, &r);
}

gpurt_error *gp_e_quant_matmul(gpurt_runtime *h, gpurt_stream *sh, const gpurt_quant_matmul_args *args) {
  return gp_call(h, sh, "quant_matmul", 0, gp_quant_matmul_on, NULL, args);
}

gpurt_error *gp_e_grouped_gemm(gpurt_runtime *h, gpurt_stream *sh, const gpurt_grouped_gemm_args *args) {
  return gp_call(h, sh, "grouped_gemm", 0, gp_grouped_gemm_on, NULL, args);
}

/* ---- the paged KV cache (1.5) ------------------------------------------------------ */

/* Resolves a page table: K/V regions of num_pages pages, indptr (batch+1),
 * last_page_len (batch), and indices (n_indices entries at least). */
static gpurt_error *pages_view(gp_rt *rt, uint32_t dev, const gpurt_kv_layout *l, const gpurt_kv_pages *p,
                               uint32_t batch, uint64_t n_indices, const char *w, gp_kv_pages_op *out) {
  gpurt_error *e;
  gp_kv_extent x;
  if ((e = gp_kv_pages_check(l, p, batch, n_indices, UINT64_MAX, w, &x))) return e;
  const gp_view_req v[] = {
      {"k", p->k, p->k_offset, x.kv, &out->k},
      {"v", p->v, p->v_offset, x.kv, &out->v},
      {"indptr", p->indptr, p->indptr_offset, x.indptr, &out->indptr},
      {"last_page_len", p->last_page_len, p->last_page_len_offset, x.last, &out->last_page_len},
      {"indices", p->indices, p->indices_offset, x.indices, &out->indices},
  };
  if ((e = gp_views(rt, GP_VIEW_NAMED, dev, w, v, 5))) return e;
  out->num_pages = p->num_pages;
  return NULL;
}

gpurt_error *gp_kv_append_on(gp_rt *rt, gp_stream *s, gpurt_stream *sh, void *object, const void *args, int run) {
  (void)sh;
  (void)object;
  const char *w = "kv_append";
  uint32_t dev = s->q.dev;
  gpurt_error *e;
  gpurt_kv_append_args a;
  uint64_t rows;
  if ((e = gp_kv_append_check(args, &a, &rows))) return e;
  if (a.nnz == 0) return NULL;
  gp_kv_append_op r;
  memset(&r, 0, sizeof r);
  r.layout = a.layout;
  r.batch = a.batch_size;
  r.nnz = a.nnz;
  if (a.layout.dtype == GPURT_DTYPE_FP8_E4M3) r.k_scale = a.k_scale, r.v_scale = a.v_scale;
  if ((e = pages_view(rt, dev, &a.layout, &a.pages, a.batch_size, 1, w, &r.pages)) ||
      (e = gp_attention_align(w, "k_rows", a.k_rows_offset, 16)) ||
      (e = gp_attention_align(w, "v_rows", a.v_rows_offset, 16)) ||
      (e = gp_attention_align(w, "batch_indices", a.batch_indices_offset, 4)) ||
      (e = gp_attention_align(w, "positions", a.positions_offset, 4)))
    return e;
  const gp_view_req v[] = {
      {"k_rows", a.k_rows, a.k_rows_offset, rows, &r.k_rows},
      {"v_rows", a.v_rows, a.v_rows_offset, rows, &r.v_rows},
      {"batch_indices", a.batch_indices, a.batch_indices_offset, 4 * a.nnz, &r.batch_indices},
      {"positions", a.positions, a.positions_offset, 4 * a.nnz, &r.positions},
  };
  if ((e = gp_views(rt, GP_VIEW_NAMED, dev, w, v, 4))) return e;
  if (a.inv_freq != NULL) { /* 1.10: the rotary embedding on the way in */
    r.num_qo_heads = a.num_qo_heads;
    const uint64_t q_bytes = a.nnz * a.num_qo_heads * a.layout.head_dim * gp_dtype_size(a.layout.dtype);
    if ((e = gp_attention_align(w, "inv_freq", a.inv_freq_offset, 4)) ||
        (a.q && (e = gp_attention_align(w, "q", a.q_offset, 16))))
      return e;
    const gp_view_req rv[] = {
        {"inv_freq", a.inv_freq, a.inv_freq_offset, 4ull * (a.layout.head_dim / 2), &r.inv_freq},
        {"q", a.q, a.q_offset, q_bytes, &r.q},
    };
    if ((e = gp_views(rt, GP_VIEW_NAMED, dev, w, rv, a.q ? 2 : 1))) return e;
  }
  if (!run) return NULL;
  return gp_eb->kv_append(rt->ctx, &s->q, &r);
}

gpurt_error *gp_e_kv_append(gpurt_runtime *h, gpurt_stream *sh, const gpurt_kv_append_args *args) {
  return gp_call(h, sh, "kv_append", 1, gp_kv_append_on, NULL, args);
}

void gp_attn_free(gp_rt *rt, gp_attn *a) {
  if (a == NULL) return;
  gp_eb->attention_destroy(rt->ctx, a->obj);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

gpurt_error *gp_e_attention_create(gpurt_runtime *h, uint32_t dev, const gpurt_attention_desc *desc,
                                   gpurt_attention **out) {
  const char *w = "attention_create";
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, w);
  if ((e = gp_check_dev(rt, dev, w))) return e;
  gpurt_attention_desc d;
  if ((e = gp_read_struct(&d, sizeof d, desc, "attention_create: desc"))) return e;
  if ((e = gp_attention_desc_check(&d))) return e;
  gp_attn *a = calloc(1, sizeof *a);
  if (!a) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory", w);
  if ((e = gp_eb->attention_create(rt->ctx, dev, &d, &a->obj))) {
    free(a);
    return e;
  }
  a->dev = dev;
  a->d = d;
  pthread_mutex_init(&a->mu, NULL);
  uintptr_t ha;
  int r = gp_table_insert(&rt->attns, a, &ha);
  if (r != 0) {
    gp_attn_free(rt, a);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: too many attention objects", w);
  }
  *out = (gpurt_attention *)ha;
  return NULL;
}

static void attn_drop(gp_rt *rt, void *a) { gp_attn_free(rt, a); }

gpurt_error *gp_e_attention_destroy(gpurt_runtime *h, gpurt_attention *ah) {
  return gp_destroy(h, offsetof(gp_rt, attns), ah, NULL, attn_drop);
}

gpurt_error *gp_e_attention_plan(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                                 const gpurt_attention_plan_args *args) {
  const char *w = "attention_plan";
  GP_RT_OR_RETURN(h);
  gp_stream *s;
  if ((e = gp_stream_get(rt, sh, w, 1, &s))) return e;
  uint32_t dev = s->q.dev;
  gp_attn *a;
  if ((e = gp_lookup(rt, &rt->attns, ah, (void **)&a))) return gp_err_wrap(e, "%s", w);
  if (a->dev != dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: attention %#llx is for device %u but the stream is on device %u",
                  w, H(ah), a->dev, dev);
  gpurt_attention_plan_args pa;
  if ((e = gp_read_struct(&pa, sizeof pa, args, "attention_plan: args"))) return e;
  gp_attention_sched sc;
  if ((e = gp_attention_plan_check(&a->d, &pa, &sc))) return e;
  pthread_mutex_lock(&a->mu);
  e = gp_eb->attention_plan(rt->ctx, &s->q, a->obj, &pa, &sc);
  if (!e) {
    if (!a->planned || a->stream != sh || a->sched.batch != sc.batch || a->sched.rows != sc.rows ||
        a->sched.pages != sc.pages)
      __atomic_store_n(&a->gen, a->gen + 1, __ATOMIC_RELEASE);
    a->sched = sc;
    a->stream = sh;
    a->planned = 1;
  }
  pthread_mutex_unlock(&a->mu);
  return e;
}

gpurt_error *gp_attention_run_on(gp_rt *rt, gp_stream *s, gpurt_stream *sh, void *object, const void *args,
                                 int run) {
  gpurt_attention *ah = object;
  const char *w = "attention_run";
  uint32_t dev = s->q.dev;
  gpurt_error *e;
  gp_attn *a;
  if ((e = gp_lookup(rt, &rt->attns, ah, (void **)&a))) return gp_err_wrap(e, "%s", w);
  gpurt_attention_run_args ra;
  if ((e = gp_read_struct(&ra, sizeof ra, args, "attention_run: args"))) return e;
  pthread_mutex_lock(&a->mu);
  int planned = a->planned;
  gpurt_stream *ps = a->stream;
  gp_attention_sched sc = a->sched;
  pthread_mutex_unlock(&a->mu);
  if (!planned)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx has no plan (call attention_plan first)", w,
                  H(ah));
  if (sh != NULL && ps != sh)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: stream %#llx is not the stream of the last plan (%#llx); "
                  "runs go on the plan's stream", w, H(sh), H(ps));
  const gpurt_kv_layout *l = &a->d.layout;
  uint64_t row_bytes = (uint64_t)a->d.num_qo_heads * l->head_dim * gp_dtype_size(gp_kv_qo_dtype(l));
  gp_attention_op r;
  memset(&r, 0, sizeof r);
  r.obj = a->obj;
  if (l->dtype == GPURT_DTYPE_FP8_E4M3) r.k_scale = ra.k_scale, r.v_scale = ra.v_scale;
  int n = GP_VIEW_NAMED;
  if ((e = gp_kv_scales_check(l, ra.k_scale, ra.v_scale, w)) || (e = gp_attention_align(w, "q", ra.q_offset, 16)) || (e = gp_attention_align(w, "o", ra.o_offset, 16)) ||
      (e = gp_view(rt, n, dev, w, "q", ra.q, ra.q_offset, sc.rows * row_bytes, 0, &r.q)) ||
      (e = gp_view(rt, n, dev, w, "o", ra.o, ra.o_offset, sc.rows * row_bytes, 0, &r.o)) ||
      (e = pages_view(rt, dev, l, &ra.pages, sc.batch, sc.pages, w, &r.pages)))
    return e;
  if (a->d.kind == GPURT_ATTENTION_PREFILL) {
    if ((e = gp_attention_align(w, "qo_indptr", ra.qo_indptr_offset, 4)) ||
        (e = gp_view(rt, n, dev, w, "qo_indptr", ra.qo_indptr, ra.qo_indptr_offset, 4 * ((uint64_t)sc.batch + 1), 0,
                     &r.qo_indptr)))
      return e;
  } else if (ra.qo_indptr != NULL) {
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: qo_indptr is set for decode (pass NULL)", w);
  }
  if (!run) return NULL;
  return gp_eb->attention_run(rt->ctx, &s->q, &r);
}

gpurt_error *gp_e_attention_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                                const gpurt_attention_run_args *args) {
  return gp_call(h, sh, "attention_run", 1, gp_attention_run_on, ah, args);
}

/* ---- collectives (1.6) ------------------------------------------------------------- */

static gpurt_error *comm_get(gp_rt *rt, gpurt_comm *h, const char *what, gp_comm **out) {
  gpurt_error *e = gp_lookup(rt, &rt->comms, h, (void **)out);
  if (e) return gp_err_wrap(e, "%s", what);
  return NULL;
}

static gpurt_error *comm_unsupported(const char *what) {
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the %s backend has no collectives", what, gp_eb->name);
}

void gp_comm_free(gp_rt *rt, gp_comm *c) {
  if (c == NULL) return;
  gp_eb->comm_destroy(rt->ctx, c->obj);
  free(c);
}

gpurt_error *gp_e_comm_unique_id(gpurt_runtime *h, gpurt_comm_id *out) {
  GP_RT_OR_RETURN(h);
  if ((e = gp_check_out(out, "comm_unique_id: out"))) return e;
  if (gp_eb->comm_unique_id == NULL) return comm_unsupported("comm_unique_id");
  gpurt_comm_id id;
  memset(&id, 0, sizeof id);
  id.struct_size = sizeof id;
  if ((e = gp_eb->comm_unique_id(rt->ctx, id.bytes))) return e;
  gp_write_struct(out, &id, sizeof id);
  return NULL;
}

static void comm_drop(gp_rt *rt, void *c) { gp_comm_free(rt, c); }

gpurt_error *gp_e_comm_create(gpurt_runtime *h, const gpurt_comm_create_args *args, gpurt_comm **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "comm_create");
  if (gp_eb->comm_create == NULL) return comm_unsupported("comm_create");
  gpurt_comm_create_args a;
  if ((e = gp_comm_create_check(args, &a, rt->ndev))) return e;
  for (uint32_t i = 0; i < a.device_count; i++)
    if (gp_is_lost(rt, a.devices[i])) return gp_lost_err(rt, "comm_create", a.devices[i]);
  gp_comm *c = calloc(1, sizeof *c);
  if (!c) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_create: no memory");
  c->nranks = a.nranks ? a.nranks : a.device_count;
  c->first_rank = a.first_rank;
  c->local = a.device_count;
  memcpy(c->devs, a.devices, a.device_count * sizeof *a.devices);
  atomic_init(&c->aborted, 0);
  if ((e = gp_eb->comm_create(rt->ctx, &a, c->nranks, &c->obj))) {
    free(c);
    return e;
  }
  GP_RETURN_INSERTED(&rt->comms, c, "comm_create", comm_drop, out);
}

gpurt_error *gp_e_comm_destroy(gpurt_runtime *h, gpurt_comm *ch) {
  GP_RT_OR_RETURN(h);
  if (ch == NULL) return NULL;
  gp_comm *c;
  if ((e = gp_take(rt, &rt->comms, ch, (void **)&c))) return gp_err_wrap(e, "comm_destroy");
  /* The communicator's work on its devices completes first (as
   * ncclCommDestroy); an aborted one has nothing left to wait for. */
  for (uint32_t i = 0; i < c->local && !atomic_load(&c->aborted); i++) {
    gpurt_error *d = gp_drain_device(rt, c->devs[i]);
    if (d && !e) e = d;
    else if (d) gp_error_destroy(d);
  }
  gp_comm_free(rt, c);
  return e;
}

gpurt_error *gp_e_comm_abort(gpurt_runtime *h, gpurt_comm *ch) {
  GP_RT_OR_RETURN(h);
  gp_comm *c;
  if ((e = comm_get(rt, ch, "comm_abort", &c))) return e;
  atomic_store(&c->aborted, 1);
  gp_eb->comm_abort(rt->ctx, c->obj);
  return NULL;
}

gpurt_error *gp_e_comm_query(gpurt_runtime *h, gpurt_comm *ch) {
  GP_RT_OR_RETURN(h);
  gp_comm *c;
  if ((e = comm_get(rt, ch, "comm_query", &c))) return e;
  if (atomic_load(&c->aborted))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "comm_query: the communicator was aborted (destroy it)");
  return gp_eb->comm_query(rt->ctx, c->obj, "comm_query");
}

/* Ops of a comm_run group resolved on the stack (as CUDA's comm_run). */
#define GP_COMM_ON_STACK 16

gpurt_error *gp_e_comm_run(gpurt_runtime *h, gpurt_comm *ch, const gpurt_comm_run_args *args) {
  GP_RT_OR_RETURN(h);
  gp_comm *c;
  if ((e = comm_get(rt, ch, "comm_run", &c))) return e;
  if (atomic_load(&c->aborted))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "comm_run: the communicator was aborted (destroy it)");
  if ((e = gp_eb->comm_query(rt->ctx, c->obj, "comm_run"))) return e;
  gpurt_comm_run_args a;
  if ((e = gp_comm_run_read(args, &a))) return e;
  gp_comm_ranks rk = {c->nranks, c->first_rank, c->local};
  /* A step's group (a few ops) resolves on the stack: no allocation. */
  gp_coll_item stack_items[GP_COMM_ON_STACK];
  gpurt_coll_op stack_ops[GP_COMM_ON_STACK];
  int heap = a.count > GP_COMM_ON_STACK;
  gp_coll_item *items = !heap ? stack_items
                        : a.count <= SIZE_MAX / sizeof *items ? calloc((size_t)a.count, sizeof *items) : NULL;
  gpurt_coll_op *ops = !heap ? stack_ops
                       : a.count <= SIZE_MAX / sizeof *ops ? calloc((size_t)a.count, sizeof *ops) : NULL;
  if (!items || !ops) {
    if (heap) free(items), free(ops);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_run: no memory for %llu ops", U(a.count));
  }
  if (!heap) memset(items, 0, (size_t)a.count * sizeof *items), memset(ops, 0, (size_t)a.count * sizeof *ops);
  for (uint64_t i = 0; i < a.count && !e; i++) {
    if ((e = gp_coll_op_read(&a, i, &rk, &ops[i]))) break;
    gpurt_coll_op *o = &ops[i];
    gp_coll_item *it = &items[i];
    uint32_t dev = c->devs[o->rank - c->first_rank];
    gp_stream *s;
    if ((e = gp_lookup(rt, &rt->streams, o->stream, (void **)&s))) {
      e = gp_err_wrap(e, "comm_run: op %llu: stream", U(i));
      break;
    }
    if ((e = gp_coll_device(i, NULL, o->rank, dev, s->q.dev))) break;
    if (gp_is_lost(rt, dev)) {
      e = gp_lost_err(rt, "comm_run", dev);
      break;
    }
    uint64_t sb, rb;
    gp_coll_bytes(o, c->nranks, &sb, &rb);
    const char *side[2] = {"send", "recv"};
    gpurt_buffer *bh[2] = {gp_coll_uses_send(o) ? o->send : NULL, o->recv};
    uint64_t off[2] = {o->send_offset, o->recv_offset}, need[2] = {sb, rb};
    gp_mem *m[2] = {&it->send, &it->recv};
    for (int k = 0; k < 2 && !e; k++) {
      if (bh[k] == NULL) continue;
      gp_buf *b;
      if ((e = gp_buf_get(rt, bh[k], &b))) {
        e = gp_err_wrap(e, "comm_run: op %llu: %s", U(i), side[k]);
        break;
      }
      if ((e = gp_coll_device(i, side[k], o->rank, dev, b->m.dev)) ||
          (e = gp_coll_range(i, side[k], b->m.size, off[k], need[k])))
        break;
      gp_mem_at(b, off[k], m[k]);
    }
    it->op = *o;
    it->q = &s->q;
    it->dev = dev;
  }
  if (!e) e = gp_comm_group_check(ops, a.count, &rk);
  if (!e) e = gp_eb->comm_run(rt->ctx, c->obj, items, a.count);
  if (heap) free(items), free(ops);
  return e;
}
