/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The checks of ABI 1.6 (collectives) shared by every plugin: create
 * arguments, one operation, and a call's group.
 */
#include "gp_comm.h"

#define U(x) ((unsigned long long)(x))

const char *gp_coll_kind_name(int32_t kind) {
  switch (kind) {
    case GPURT_COLL_ALL_REDUCE: return "all_reduce";
    case GPURT_COLL_ALL_GATHER: return "all_gather";
    case GPURT_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case GPURT_COLL_BROADCAST: return "broadcast";
    case GPURT_COLL_SEND: return "send";
    case GPURT_COLL_RECV: return "recv";
    default: return "unknown";
  }
}

gpurt_error *gp_comm_create_check(const gpurt_comm_create_args *in, gpurt_comm_create_args *a,
                                  uint32_t ndev) {
  const char *w = "comm_create";
  gpurt_error *e;
  if ((e = gp_read_struct(a, sizeof *a, in, "comm_create: args"))) return e;
  if (a->device_count == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: device_count is 0 (a handle has >= 1 local rank)", w);
  if (a->device_count > GP_COMM_MAX_LOCAL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: device_count %u exceeds %u local ranks", w, a->device_count,
                  GP_COMM_MAX_LOCAL);
  if (a->devices == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: devices is NULL with device_count %u", w, a->device_count);
  for (uint32_t i = 0; i < a->device_count; i++) {
    if (a->devices[i] >= ndev)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: devices[%u] is %u but the runtime has %u device(s)", w, i,
                    a->devices[i], ndev);
    for (uint32_t j = 0; j < i; j++)
      if (a->devices[j] == a->devices[i])
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: devices[%u] and devices[%u] are both device %u "
                      "(one rank per device)", w, j, i, a->devices[i]);
  }
  if (a->reserved != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: reserved is %u (must be 0)", w, a->reserved);
  if (a->nranks == 0) {
    if (a->first_rank != 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: first_rank is %u with nranks 0 (every rank is local; "
                    "it must be 0)", w, a->first_rank);
    if (a->unique_id != NULL || a->unique_id_len != 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: a unique id is given with nranks 0 (every rank is local; "
                    "pass NULL and 0)", w);
  } else {
    if (a->nranks < a->device_count)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: nranks %u is below device_count %u", w, a->nranks,
                    a->device_count);
    if ((uint64_t)a->first_rank + a->device_count > a->nranks)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: ranks %u..%llu are outside 0..%u (first_rank %u, "
                    "device_count %u, nranks %u)", w, a->first_rank,
                    U((uint64_t)a->first_rank + a->device_count - 1), a->nranks - 1, a->first_rank,
                    a->device_count, a->nranks);
    if (a->unique_id == NULL)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: unique_id is NULL with nranks %u (pass the id from "
                    "comm_unique_id)", w, a->nranks);
    if (a->unique_id_len != GPURT_COMM_ID_BYTES)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: unique_id_len is %llu (must be %u)", w,
                    U(a->unique_id_len), GPURT_COMM_ID_BYTES);
  }
  if (a->timeout_ms == 0) a->timeout_ms = GP_COMM_DEFAULT_TIMEOUT_MS;
  return NULL;
}

gpurt_error *gp_comm_run_read(const gpurt_comm_run_args *in, gpurt_comm_run_args *a) {
  gpurt_error *e;
  if ((e = gp_read_struct(a, sizeof *a, in, "comm_run: args"))) return e;
  if (a->count == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: count is 0 (a group has >= 1 op)");
  if (a->ops == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: ops is NULL with count %llu", U(a->count));
  if (a->op_size < sizeof(uint64_t))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op_size is %llu, below 8", U(a->op_size));
  if (a->count > (1ull << 20))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: count %llu exceeds 2^20 ops", U(a->count));
  return NULL;
}

static int is_reduction(int32_t kind) {
  return kind == GPURT_COLL_ALL_REDUCE || kind == GPURT_COLL_REDUCE_SCATTER;
}

int gp_coll_uses_send(const gpurt_coll_op *op) {
  if (op->kind == GPURT_COLL_RECV) return 0;
  if (op->kind == GPURT_COLL_BROADCAST) return op->rank == op->peer;
  return 1;
}

static int uses_recv(const gpurt_coll_op *op) { return op->kind != GPURT_COLL_SEND; }

void gp_coll_bytes(const gpurt_coll_op *op, uint32_t nranks, uint64_t *send_bytes, uint64_t *recv_bytes) {
  uint64_t b = op->count * (uint64_t)gp_dtype_size(op->dtype);
  uint64_t s = b, r = b;
  if (op->kind == GPURT_COLL_ALL_GATHER) r = b * nranks;
  if (op->kind == GPURT_COLL_REDUCE_SCATTER) s = b * nranks;
  *send_bytes = gp_coll_uses_send(op) ? s : 0;
  *recv_bytes = uses_recv(op) ? r : 0;
}

gpurt_error *gp_coll_op_read(const gpurt_comm_run_args *a, uint64_t i, const gp_comm_ranks *r,
                             gpurt_coll_op *op) {
  const unsigned char *p = (const unsigned char *)a->ops + i * a->op_size;
  gpurt_error *e;
  if ((e = gp_read_struct(op, sizeof *op, p, "op"))) return gp_err_wrap(e, "comm_run: op %llu", U(i));
  const char *k = gp_coll_kind_name(op->kind);
  if (op->kind < GPURT_COLL_ALL_REDUCE || op->kind > GPURT_COLL_RECV)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: kind %d is not a GPURT_COLL (1..6)", U(i),
                  op->kind);
  size_t es = gp_dtype_size(op->dtype);
  if (es == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: dtype %d is not an element type", U(i),
                  op->dtype);
  if (is_reduction(op->kind)) {
    if (op->dtype != GPURT_DTYPE_F32 && op->dtype != GPURT_DTYPE_F16 && op->dtype != GPURT_DTYPE_BF16)
      return gp_err(GPURT_ERR_UNSUPPORTED, "comm_run: op %llu: %s of dtype %s is not supported (f32, f16, bf16)",
                    U(i), k, gp_dtype_name(op->dtype));
    if (op->reduce != GPURT_REDUCE_SUM && op->reduce != GPURT_REDUCE_MAX)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: reduce %d is not a GPURT_REDUCE (sum 0, max 1)",
                    U(i), op->reduce);
  } else if (op->reduce != 0) {
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: reduce is %d for %s (must be 0)", U(i),
                  op->reduce, k);
  }
  if (op->rank < r->first_rank || op->rank - r->first_rank >= r->local)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: rank %u is not one of this handle's ranks "
                  "(%u..%u of %u)", U(i), op->rank, r->first_rank, r->first_rank + r->local - 1, r->nranks);
  int has_peer = op->kind == GPURT_COLL_BROADCAST || op->kind == GPURT_COLL_SEND || op->kind == GPURT_COLL_RECV;
  if (has_peer && op->peer >= r->nranks)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: %s peer %u is outside ranks 0..%u", U(i), k,
                  op->peer, r->nranks - 1);
  if (!has_peer && op->peer != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: peer is %u for %s (must be 0)", U(i), op->peer,
                  k);
  if (op->reserved != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: reserved is %u (must be 0)", U(i), op->reserved);
  if (op->stream == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: stream is NULL (every op needs its rank's stream)",
                  U(i));
  if (gp_coll_uses_send(op) && op->send == NULL && op->count > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: %s needs a send buffer (send is NULL)", U(i), k);
  if (uses_recv(op) && op->recv == NULL && op->count > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: %s needs a recv buffer (recv is NULL)", U(i), k);
  if (op->kind == GPURT_COLL_RECV && op->send != NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: recv has a send buffer (must be NULL)", U(i));
  if (op->kind == GPURT_COLL_SEND && op->recv != NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: send has a recv buffer (must be NULL)", U(i));
  uint64_t limit = (1ull << 62) / es / r->nranks;
  if (op->count > limit)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: count %llu of %s is too large (%llu at most "
                  "with %u ranks)", U(i), U(op->count), gp_dtype_name(op->dtype), U(limit), r->nranks);
  return NULL;
}

gpurt_error *gp_coll_range(uint64_t i, const char *side, uint64_t total, uint64_t off, uint64_t need) {
  if (gp_in_range(total, off, need)) return NULL;
  return gp_err(GPURT_ERR_OUT_OF_RANGE, "comm_run: op %llu: %s range [%llu, %llu + %llu) is outside the "
                "%llu-byte buffer", U(i), side, U(off), U(off), U(need), U(total));
}

gpurt_error *gp_coll_device(uint64_t i, const char *side, uint32_t rank, uint32_t rdev, uint32_t dev) {
  if (rdev == dev) return NULL;
  if (side == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: the stream is on device %u but rank %u is on "
                  "device %u", U(i), dev, rank, rdev);
  return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: the %s buffer is on device %u but rank %u is on "
                "device %u", U(i), side, dev, rank, rdev);
}

static int same_collective(const gpurt_coll_op *a, const gpurt_coll_op *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->reduce == b->reduce && a->count == b->count &&
         a->peer == b->peer;
}

/* The index of the j-th op of rank `rank` that `want` accepts, or n. */
static uint64_t nth_of(const gpurt_coll_op *ops, uint64_t n, uint32_t rank, uint64_t j,
                       int (*want)(const gpurt_coll_op *, uint32_t), uint32_t arg) {
  for (uint64_t i = 0; i < n; i++) {
    if (ops[i].rank != rank || !want(&ops[i], arg)) continue;
    if (j-- == 0) return i;
  }
  return n;
}

static int want_coll(const gpurt_coll_op *o, uint32_t arg) { (void)arg; return gp_coll_is_collective(o->kind); }

gpurt_error *gp_comm_group_check(const gpurt_coll_op *ops, uint64_t n, const gp_comm_ranks *r) {
  for (uint64_t i = 0; i < n; i++)
    for (uint64_t j = 0; j < i; j++)
      if (ops[j].rank == ops[i].rank && ops[j].stream != ops[i].stream)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: rank %u uses a second stream in this call "
                      "(op %llu uses another; one stream per rank and call)", U(i), ops[i].rank, U(j));
  /* Collectives: every local rank issues the reference rank's sequence. */
  uint32_t ref = r->first_rank;
  for (uint32_t k = 1; k < r->local; k++) {
    uint32_t rank = r->first_rank + k;
    for (uint64_t j = 0;; j++) {
      uint64_t a = nth_of(ops, n, ref, j, want_coll, 0), b = nth_of(ops, n, rank, j, want_coll, 0);
      if (a == n && b == n) break;
      if (a == n || b == n) {
        uint64_t extra = a == n ? b : a;
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: collective #%llu (%s) of rank %u has no "
                      "counterpart on rank %u in this call (a handle issues each collective for all its %u local "
                      "ranks in one call)", U(extra), U(j), gp_coll_kind_name(ops[extra].kind), ops[extra].rank,
                      a == n ? ref : rank, r->local);
      }
      if (!same_collective(&ops[a], &ops[b]))
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: collective #%llu of rank %u is %s of %llu %s "
                      "(reduce %d, root %u) but rank %u's (op %llu) is %s of %llu %s (reduce %d, root %u)", U(b),
                      U(j), rank, gp_coll_kind_name(ops[b].kind), U(ops[b].count), gp_dtype_name(ops[b].dtype),
                      ops[b].reduce, ops[b].peer, ref, U(a), gp_coll_kind_name(ops[a].kind), U(ops[a].count),
                      gp_dtype_name(ops[a].dtype), ops[a].reduce, ops[a].peer);
    }
  }
  /* Sends between local ranks: the k-th send a->b meets the k-th recv on b from a. */
  for (uint64_t i = 0; i < n; i++) {
    const gpurt_coll_op *s = &ops[i];
    if (s->kind != GPURT_COLL_SEND && s->kind != GPURT_COLL_RECV) continue;
    if (s->peer < r->first_rank || s->peer - r->first_rank >= r->local) continue;
    int send = s->kind == GPURT_COLL_SEND;
    uint64_t k = 0;
    for (uint64_t j = 0; j < i; j++)
      if (ops[j].rank == s->rank && ops[j].kind == s->kind && ops[j].peer == s->peer) k++;
    uint64_t m = n;
    uint64_t seen = 0;
    for (uint64_t j = 0; j < n; j++) {
      if (ops[j].rank != s->peer || ops[j].peer != s->rank) continue;
      if (ops[j].kind != (send ? GPURT_COLL_RECV : GPURT_COLL_SEND)) continue;
      if (seen++ == k) { m = j; break; }
    }
    if (m == n)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: rank %u's %s %s rank %u has no matching %s on "
                    "rank %u in this call (both ranks are this handle's)", U(i), s->rank, send ? "send" : "recv",
                    send ? "to" : "from", s->peer, send ? "recv" : "send", s->peer);
    uint64_t sb = s->count * gp_dtype_size(s->dtype), mb = ops[m].count * gp_dtype_size(ops[m].dtype);
    if (send && sb != mb)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_run: op %llu: rank %u sends %llu bytes to rank %u, whose recv "
                    "(op %llu) takes %llu bytes", U(i), s->rank, U(sb), s->peer, U(m), U(mb));
  }
  return NULL;
}
