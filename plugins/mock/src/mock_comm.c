/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_comm.c — collectives (1.6) across the mock's devices: the
 * reference the GPU backends are compared against.
 *
 * A communicator's shared state (comm_group) lives in a process-wide list,
 * so the ranks of one communicator may be held by several handles of
 * several runtimes of this process (each such runtime plays one process
 * of a multi-process job; they meet by the unique id). comm_run puts one
 * OP_FN per local rank on that rank's stream; when it runs it posts the
 * rank's contributions (collectives, sends) and then waits for what it
 * needs (the collective's completion, the matching send, its own sends
 * consumed), so the sends and receives of a group never deadlock. The
 * last rank to reach a collective computes every rank's result: sums and
 * maxima accumulate in double in rank order and round once.
 *
 * A rank that does not arrive within the communicator's timeout, a
 * mismatch between ranks, a lost device or comm_abort breaks the group:
 * every waiter leaves without writing, and comm_query (and comm_run)
 * report the first cause from then on.
 *
 * Locking: g_comm_mu guards the list of groups and their `refs` and is a
 * leaf (taken alone, or under g->mu); a group's `mu` guards everything
 * else of it and may be held while taking a stream's mu (comm_run
 * enqueues under g->mu so that the sequence numbers follow the streams'
 * order). rt->mu is never held with either.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

typedef struct coll_inst {
  struct coll_inst *next;
  uint64_t seq;
  uint32_t arrived, left;
  int done;
  gpurt_coll_op first; /* the first arrival's op (for the mismatch check) */
  uint32_t first_rank;
  const unsigned char **send; /* per rank */
  unsigned char **recv;       /* per rank */
} coll_inst;

typedef struct p2p_msg {
  struct p2p_msg *next;
  uint32_t src, dst;
  uint64_t seq;
  const unsigned char *data;
  uint64_t bytes;
  int consumed;
} p2p_msg;

typedef struct comm_group {
  struct comm_group *next; /* g_groups */
  int refs;                /* handles + queued works; g_comm_mu */
  int has_id;
  uint8_t id[GPURT_COMM_ID_BYTES];
  uint32_t nranks;
  uint64_t timeout_ms;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint8_t *joined; /* per rank */
  uint32_t njoined;
  uint64_t *coll_seq;  /* per rank: collectives enqueued */
  uint64_t *send_seq;  /* [src * nranks + dst]: sends enqueued */
  uint64_t *recv_seq;  /* [src * nranks + dst]: recvs enqueued */
  coll_inst *insts;
  p2p_msg *msgs;
  int broken;
  int32_t err_code;
  char err[384];
} comm_group;

typedef struct mock_comm {
  comm_group *g;
  uint32_t first_rank, local;
  uint32_t devs[GP_COMM_MAX_LOCAL];
  int aborted;
} mock_comm;

static pthread_mutex_t g_comm_mu = PTHREAD_MUTEX_INITIALIZER;
static comm_group *g_groups;
static uint64_t g_id_counter;

/* ------------------------------------------------------------------ */
/* Groups                                                              */
/* ------------------------------------------------------------------ */

static void group_free(comm_group *g) {
  while (g->insts) {
    coll_inst *c = g->insts;
    g->insts = c->next;
    free(c->send);
    free(c->recv);
    free(c);
  }
  while (g->msgs) {
    p2p_msg *m = g->msgs;
    g->msgs = m->next;
    free(m);
  }
  free(g->joined);
  free(g->coll_seq);
  free(g->send_seq);
  free(g->recv_seq);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g);
}

static comm_group *group_new(uint32_t nranks, uint64_t timeout_ms) {
  comm_group *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->nranks = nranks;
  g->timeout_ms = timeout_ms;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->joined = calloc(nranks, 1);
  g->coll_seq = calloc(nranks, sizeof *g->coll_seq);
  g->send_seq = calloc((size_t)nranks * nranks, sizeof *g->send_seq);
  g->recv_seq = calloc((size_t)nranks * nranks, sizeof *g->recv_seq);
  if (!g->joined || !g->coll_seq || !g->send_seq || !g->recv_seq) {
    group_free(g);
    return NULL;
  }
  g->refs = 1;
  return g;
}

static void group_ref(comm_group *g) {
  pthread_mutex_lock(&g_comm_mu);
  g->refs++;
  pthread_mutex_unlock(&g_comm_mu);
}

static void group_unref(comm_group *g) {
  pthread_mutex_lock(&g_comm_mu);
  int left = --g->refs;
  if (left == 0 && g->has_id) {
    for (comm_group **p = &g_groups; *p; p = &(*p)->next)
      if (*p == g) {
        *p = g->next;
        break;
      }
  }
  pthread_mutex_unlock(&g_comm_mu);
  if (left == 0) group_free(g);
}

/* Breaks the group (g->mu held): the first cause is kept. */
static void group_break(comm_group *g, int32_t code, const char *fmt, ...) GP_PRINTF(3, 4);
static void group_break(comm_group *g, int32_t code, const char *fmt, ...) {
  if (!g->broken) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    g->err_code = code;
    g->broken = 1;
  }
  pthread_cond_broadcast(&g->cv);
}

/* Waits on g->cv (g->mu held) until *flag, the group broke or the
 * deadline passed; returns 1 when *flag. */
static int group_wait(comm_group *g, const int *flag, const struct timespec *deadline) {
  while (!*flag && !g->broken) {
    if (pthread_cond_timedwait(&g->cv, &g->mu, deadline) == ETIMEDOUT) return *flag;
  }
  return *flag;
}

static struct timespec deadline_after(uint64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(ms / 1000);
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* ------------------------------------------------------------------ */
/* The reference arithmetic                                            */
/* ------------------------------------------------------------------ */

static double load_d(int32_t dt, const unsigned char *p, uint64_t i) {
  if (dt == GPURT_DTYPE_F32) {
    float f;
    memcpy(&f, p + 4 * i, 4);
    return (double)f;
  }
  return (double)gp_load(dt, p, i);
}

/* Rounds once: f16/bf16 from double through f32 is exact for the f32
 * value nearest the double; that f32 then rounds to nearest even. */
static void store_d(int32_t dt, unsigned char *p, uint64_t i, double v) { gp_store(dt, p, i, (float)v); }

/* Computes the collective of `c` (every rank arrived) into every recv. */
static int coll_compute(comm_group *g, coll_inst *c) {
  const gpurt_coll_op *op = &c->first;
  uint32_t n = g->nranks;
  size_t es = gp_dtype_size(op->dtype);
  uint64_t cnt = op->count, b = cnt * es;
  if (cnt == 0) return 0;
  switch (op->kind) {
    case GPURT_COLL_ALL_REDUCE:
    case GPURT_COLL_REDUCE_SCATTER: {
      int scatter = op->kind == GPURT_COLL_REDUCE_SCATTER;
      uint64_t total = scatter ? cnt * n : cnt;
      unsigned char *tmp = malloc((size_t)(total * es));
      if (!tmp) return -1;
      for (uint64_t i = 0; i < total; i++) {
        double acc = load_d(op->dtype, c->send[0], i);
        for (uint32_t r = 1; r < n; r++) {
          double x = load_d(op->dtype, c->send[r], i);
          if (op->reduce == GPURT_REDUCE_MAX) acc = (x > acc || acc != acc) ? x : acc;
          else acc += x;
        }
        store_d(op->dtype, tmp, i, acc);
      }
      for (uint32_t r = 0; r < n; r++) memcpy(c->recv[r], tmp + (scatter ? r * b : 0), (size_t)b);
      free(tmp);
      return 0;
    }
    case GPURT_COLL_ALL_GATHER: {
      unsigned char *tmp = malloc((size_t)(b * n));
      if (!tmp) return -1;
      for (uint32_t r = 0; r < n; r++) memcpy(tmp + r * b, c->send[r], (size_t)b);
      for (uint32_t r = 0; r < n; r++) memcpy(c->recv[r], tmp, (size_t)(b * n));
      free(tmp);
      return 0;
    }
    case GPURT_COLL_BROADCAST: {
      unsigned char *tmp = malloc((size_t)b);
      if (!tmp) return -1;
      memcpy(tmp, c->send[op->peer], (size_t)b);
      for (uint32_t r = 0; r < n; r++) memcpy(c->recv[r], tmp, (size_t)b);
      free(tmp);
      return 0;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* A rank's part of a group (an OP_FN on its stream)                   */
/* ------------------------------------------------------------------ */

typedef struct rank_op {
  gpurt_coll_op op;
  uint64_t seq; /* collective: the rank's collective number; p2p: per pair */
  const unsigned char *send;
  unsigned char *recv;
  void *state; /* coll_inst * or p2p_msg * once posted */
} rank_op;

typedef struct rank_work {
  mock_rt *rt;
  comm_group *g;
  uint32_t rank, dev;
  int ran;
  uint64_t n;
  rank_op ops[];
} rank_work;

static coll_inst *inst_get(comm_group *g, uint64_t seq) {
  for (coll_inst *c = g->insts; c; c = c->next)
    if (c->seq == seq) return c;
  coll_inst *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->send = calloc(g->nranks, sizeof *c->send);
  c->recv = calloc(g->nranks, sizeof *c->recv);
  if (!c->send || !c->recv) {
    free(c->send);
    free(c->recv);
    free(c);
    return NULL;
  }
  c->seq = seq;
  c->next = g->insts;
  g->insts = c;
  return c;
}

static void inst_leave(comm_group *g, coll_inst *c) {
  if (++c->left < g->nranks) return;
  for (coll_inst **p = &g->insts; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  free(c->send);
  free(c->recv);
  free(c);
}

static void msg_remove(comm_group *g, p2p_msg *m) {
  for (p2p_msg **p = &g->msgs; *p; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  free(m);
}

static void rank_run(void *arg) {
  rank_work *w = arg;
  comm_group *g = w->g;
  uint32_t n = g->nranks;
  w->ran = 1;
  pthread_mutex_lock(&g->mu);
  struct timespec dl = deadline_after(g->timeout_ms);
  /* Post: contributions to collectives, and sends. */
  for (uint64_t i = 0; i < w->n && !g->broken; i++) {
    rank_op *o = &w->ops[i];
    if (gp_coll_is_collective(o->op.kind)) {
      coll_inst *c = inst_get(g, o->seq);
      if (!c) {
        group_break(g, GPURT_ERR_OUT_OF_MEMORY, "rank %u: no memory for collective #%llu", w->rank, U(o->seq));
        break;
      }
      o->state = c;
      if (c->arrived == 0) {
        c->first = o->op;
        c->first_rank = w->rank;
      } else if (c->first.kind != o->op.kind || c->first.dtype != o->op.dtype || c->first.reduce != o->op.reduce ||
                 c->first.count != o->op.count || c->first.peer != o->op.peer) {
        group_break(g, GPURT_ERR_INVALID_ARGUMENT,
                    "collective #%llu: rank %u issued %s of %llu %s (reduce %d, root %u) but rank %u issued %s of "
                    "%llu %s (reduce %d, root %u)", U(o->seq), w->rank, gp_coll_kind_name(o->op.kind),
                    U(o->op.count), gp_dtype_name(o->op.dtype), o->op.reduce, o->op.peer, c->first_rank,
                    gp_coll_kind_name(c->first.kind), U(c->first.count), gp_dtype_name(c->first.dtype),
                    c->first.reduce, c->first.peer);
        break;
      }
      c->send[w->rank] = o->send;
      c->recv[w->rank] = o->recv;
      if (++c->arrived == n) {
        if (coll_compute(g, c) != 0)
          group_break(g, GPURT_ERR_OUT_OF_MEMORY, "collective #%llu: no memory for the reduction", U(o->seq));
        c->done = 1;
        pthread_cond_broadcast(&g->cv);
      }
    } else if (o->op.kind == GPURT_COLL_SEND) {
      p2p_msg *m = calloc(1, sizeof *m);
      if (!m) {
        group_break(g, GPURT_ERR_OUT_OF_MEMORY, "rank %u: no memory for a send", w->rank);
        break;
      }
      m->src = w->rank;
      m->dst = o->op.peer;
      m->seq = o->seq;
      m->data = o->send;
      m->bytes = o->op.count * gp_dtype_size(o->op.dtype);
      m->next = g->msgs;
      g->msgs = m;
      o->state = m;
      pthread_cond_broadcast(&g->cv);
    }
  }
  /* Wait: collectives' completion and receives, in order. */
  for (uint64_t i = 0; i < w->n; i++) {
    rank_op *o = &w->ops[i];
    if (gp_coll_is_collective(o->op.kind) && o->state) {
      coll_inst *c = o->state;
      if (!group_wait(g, &c->done, &dl) && !g->broken)
        group_break(g, GPURT_ERR_UNAVAILABLE, "collective #%llu (%s): rank %u waited %llu ms; %u of %u ranks "
                    "arrived", U(o->seq), gp_coll_kind_name(o->op.kind), w->rank, U(g->timeout_ms), c->arrived, n);
      inst_leave(g, c);
      o->state = NULL;
    } else if (o->op.kind == GPURT_COLL_RECV && !g->broken) {
      p2p_msg *m = NULL;
      for (;;) {
        for (p2p_msg *x = g->msgs; x; x = x->next)
          if (x->src == o->op.peer && x->dst == w->rank && x->seq == o->seq && !x->consumed) m = x;
        if (m || g->broken) break;
        if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT) {
          group_break(g, GPURT_ERR_UNAVAILABLE, "recv #%llu of rank %u from rank %u: waited %llu ms for the send",
                      U(o->seq), w->rank, o->op.peer, U(g->timeout_ms));
          break;
        }
      }
      if (!m) continue;
      uint64_t want = o->op.count * gp_dtype_size(o->op.dtype);
      if (m->bytes != want)
        group_break(g, GPURT_ERR_INVALID_ARGUMENT, "recv #%llu of rank %u from rank %u takes %llu bytes but the "
                    "send has %llu", U(o->seq), w->rank, o->op.peer, U(want), U(m->bytes));
      else if (want)
        memcpy(o->recv, m->data, (size_t)want);
      m->consumed = 1;
      pthread_cond_broadcast(&g->cv);
    }
  }
  /* Own sends: their data must stay until read. */
  for (uint64_t i = 0; i < w->n; i++) {
    rank_op *o = &w->ops[i];
    if (o->op.kind != GPURT_COLL_SEND || !o->state) continue;
    p2p_msg *m = o->state;
    if (!group_wait(g, &m->consumed, &dl) && !g->broken)
      group_break(g, GPURT_ERR_UNAVAILABLE, "send #%llu of rank %u to rank %u: waited %llu ms for the recv",
                  U(o->seq), w->rank, m->dst, U(g->timeout_ms));
    msg_remove(g, m); /* a late recv finds nothing and cannot read freed data */
    o->state = NULL;
  }
  /* Leave collectives never waited for (the group broke while posting). */
  for (uint64_t i = 0; i < w->n; i++)
    if (gp_coll_is_collective(w->ops[i].op.kind) && w->ops[i].state) inst_leave(g, w->ops[i].state);
  pthread_mutex_unlock(&g->mu);
}

static void rank_release(void *arg) {
  rank_work *w = arg;
  if (!w->ran) {
    pthread_mutex_lock(&w->g->mu);
    group_break(w->g, GPURT_ERR_DEVICE_LOST, "rank %u: device %u was lost", w->rank, w->dev);
    pthread_mutex_unlock(&w->g->mu);
  }
  group_unref(w->g);
  free(w);
}

/* ------------------------------------------------------------------ */
/* Entry points                                                        */
/* ------------------------------------------------------------------ */

static gpurt_error *group_error(comm_group *g, const char *what) {
  gpurt_error *e = NULL;
  pthread_mutex_lock(&g->mu);
  if (g->broken)
    e = gp_err(g->err_code, "%s: the communicator is broken: %s (abort and destroy it)", what, g->err);
  pthread_mutex_unlock(&g->mu);
  return e;
}

void mock_comm_destroy(void *ctx, void *obj) {
  (void)ctx;
  mock_comm *c = obj;
  if (!c) return;
  group_unref(c->g);
  free(c);
}

gpurt_error *mock_comm_unique_id(void *ctx, uint8_t id[GPURT_COMM_ID_BYTES]) {
  (void)ctx;
  pthread_mutex_lock(&g_comm_mu);
  uint64_t k = ++g_id_counter;
  pthread_mutex_unlock(&g_comm_mu);
  uint64_t pid = (uint64_t)getpid(), ns = mock_now_ns();
  memcpy(id, "gpurt-mock-comm", 16);
  memcpy(id + 16, &k, 8);
  memcpy(id + 24, &pid, 8);
  memcpy(id + 32, &ns, 8);
  return NULL;
}

gpurt_error *mock_comm_create(void *ctx, const gpurt_comm_create_args *ap, uint32_t nranks, void **out) {
  (void)ctx;
  (void)nranks;
  const gpurt_comm_create_args a = *ap;
  /* A group keeps a send and a receive count per pair of ranks. */
  if (a.nranks > MOCK_MAX_RANKS)
    return gp_err(GPURT_ERR_UNSUPPORTED, "comm_create: nranks %u is above the mock's %u", a.nranks,
                  MOCK_MAX_RANKS);
  mock_comm *c = calloc(1, sizeof *c);
  if (!c) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_create: no memory");
  c->first_rank = a.first_rank;
  c->local = a.device_count;
  memcpy(c->devs, a.devices, a.device_count * sizeof *a.devices);
  comm_group *g;
  if (a.nranks == 0) {
    if (!(g = group_new(a.device_count, a.timeout_ms))) {
      free(c);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_create: no memory");
    }
    memset(g->joined, 1, g->nranks);
    g->njoined = g->nranks;
  } else {
    if (memcmp(a.unique_id, "gpurt-mock-comm", 16) != 0) {
      free(c);
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_create: the unique id was not made by the mock's "
                    "comm_unique_id");
    }
    pthread_mutex_lock(&g_comm_mu);
    for (g = g_groups; g; g = g->next)
      if (memcmp(g->id, a.unique_id, GPURT_COMM_ID_BYTES) == 0) break;
    if (g && g->nranks != a.nranks) {
      uint32_t have = g->nranks;
      pthread_mutex_unlock(&g_comm_mu);
      free(c);
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_create: nranks is %u but the communicator of this unique id "
                    "has %u", a.nranks, have);
    }
    if (g) {
      g->refs++;
    } else {
      if (!(g = group_new(a.nranks, a.timeout_ms))) {
        pthread_mutex_unlock(&g_comm_mu);
        free(c);
        return gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_create: no memory");
      }
      g->has_id = 1;
      memcpy(g->id, a.unique_id, GPURT_COMM_ID_BYTES);
      g->next = g_groups;
      g_groups = g;
    }
    pthread_mutex_unlock(&g_comm_mu);
    pthread_mutex_lock(&g->mu);
    for (uint32_t i = 0; i < a.device_count; i++)
      if (g->joined[a.first_rank + i]) {
        pthread_mutex_unlock(&g->mu);
        group_unref(g);
        free(c);
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "comm_create: rank %u already joined the communicator of this "
                      "unique id (make a new id per communicator)", a.first_rank + i);
      }
    for (uint32_t i = 0; i < a.device_count; i++) g->joined[a.first_rank + i] = 1;
    g->njoined += a.device_count;
    pthread_cond_broadcast(&g->cv);
    struct timespec dl = deadline_after(a.timeout_ms);
    int timed_out = 0;
    while (g->njoined < g->nranks && !timed_out)
      timed_out = pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT;
    if (g->njoined < g->nranks) {
      uint32_t joined = g->njoined, missing = 0;
      for (uint32_t r = 0; r < g->nranks; r++)
        if (!g->joined[r]) { missing = r; break; }
      for (uint32_t i = 0; i < a.device_count; i++) g->joined[a.first_rank + i] = 0;
      g->njoined -= a.device_count;
      pthread_mutex_unlock(&g->mu);
      group_unref(g);
      free(c);
      return gp_err(GPURT_ERR_UNAVAILABLE, "comm_create: %u of %u ranks joined within %llu ms (rank %u is "
                    "missing)", joined, a.nranks, U(a.timeout_ms), missing);
    }
    pthread_mutex_unlock(&g->mu);
  }
  c->g = g;
  *out = c;
  return NULL;
}

void mock_comm_abort(void *ctx, void *obj) {
  (void)ctx;
  mock_comm *c = obj;
  pthread_mutex_lock(&c->g->mu);
  c->aborted = 1;
  group_break(c->g, GPURT_ERR_FAILED_PRECONDITION, "ranks %u..%u aborted the communicator", c->first_rank,
              c->first_rank + c->local - 1);
  pthread_mutex_unlock(&c->g->mu);
}

gpurt_error *mock_comm_query(void *ctx, void *obj, const char *what) {
  (void)ctx;
  mock_comm *c = obj;
  return group_error(c->g, what);
}

/* One work per local rank with ops, each op in call order; sequence
 * numbers and enqueueing under g->mu, so the streams' order is the
 * numbers' order whatever other threads call. */
gpurt_error *mock_comm_run(void *ctx, void *obj, const gp_coll_item *items, uint64_t count) {
  mock_rt *rt = ctx;
  mock_comm *c = obj;
  comm_group *g = c->g;
  gpurt_error *e = NULL;
  rank_work **works = calloc(c->local, sizeof *works);
  gp_queue **queues = calloc(c->local, sizeof *queues);
  mock_op **qops = calloc(c->local, sizeof *qops);
  if (!works || !queues || !qops) {
    e = gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_run: no memory for %llu ops", U(count));
    goto out;
  }
  for (uint32_t l = 0; l < c->local; l++) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < count; i++) n += items[i].op.rank == c->first_rank + l;
    if (n == 0) continue;
    rank_work *w = calloc(1, sizeof *w + n * sizeof(rank_op));
    if (!w || !(qops[l] = calloc(1, sizeof(mock_op)))) {
      free(w);
      e = gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_run: no memory");
      goto out;
    }
    w->rt = rt;
    w->g = g;
    w->rank = c->first_rank + l;
    w->dev = c->devs[l];
    for (uint64_t i = 0; i < count; i++) {
      if (items[i].op.rank != w->rank) continue;
      rank_op *ro = &w->ops[w->n++];
      ro->op = items[i].op;
      ro->send = mock_ptr(&items[i].send);
      ro->recv = mock_ptr(&items[i].recv);
      queues[l] = items[i].q;
    }
    works[l] = w;
  }
  pthread_mutex_lock(&g->mu);
  for (uint32_t l = 0; l < c->local; l++) {
    rank_work *w = works[l];
    if (!w) continue;
    for (uint64_t i = 0; i < w->n; i++) {
      rank_op *o = &w->ops[i];
      uint32_t peer = o->op.peer;
      if (gp_coll_is_collective(o->op.kind)) o->seq = g->coll_seq[w->rank]++;
      else if (o->op.kind == GPURT_COLL_SEND) o->seq = g->send_seq[(size_t)w->rank * g->nranks + peer]++;
      else o->seq = g->recv_seq[(size_t)peer * g->nranks + w->rank]++;
    }
    group_ref(g);
    mock_op *q = qops[l];
    q->kind = OP_FN;
    q->u.fn.fn = rank_run;
    q->u.fn.release = rank_release;
    q->u.fn.arg = w;
    works[l] = NULL; /* the op owns it now */
    qops[l] = NULL;
    mock_submit(queues[l], q);
  }
  pthread_mutex_unlock(&g->mu);
out:
  if (works)
    for (uint32_t l = 0; l < c->local; l++) free(works[l]);
  if (qops)
    for (uint32_t l = 0; l < c->local; l++) free(qops[l]);
  free(works);
  free(queues);
  free(qops);
  return e;
}
