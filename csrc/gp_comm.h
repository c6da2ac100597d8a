/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_comm.h — the checks of ABI 1.6 (collectives) that every plugin
 * shares, so that an invalid request gets the same code and message
 * everywhere. No allocation, no libm: the CUDA plugin links it too.
 */
#ifndef GPURT_CSRC_COMM_H_
#define GPURT_CSRC_COMM_H_

#include "gp_common.h"

/* The handle kind of communicators (gp_handle_table). */
#define GP_KIND_COMM 0x1Du

/* The default of gpurt_comm_create_args.timeout_ms. */
#define GP_COMM_DEFAULT_TIMEOUT_MS 60000u

/* The most local ranks of one handle. */
#define GP_COMM_MAX_LOCAL 64u

/* Reads and checks create arguments against a runtime of ndev devices:
 * device_count, devices (in range, distinct), nranks, first_rank, the
 * unique id. *a gets the checked copy (timeout_ms defaulted). */
gpurt_error *gp_comm_create_check(const gpurt_comm_create_args *in, gpurt_comm_create_args *a,
                                  uint32_t ndev);

/* The ranks one handle holds, for the op checks. */
typedef struct gp_comm_ranks {
  uint32_t nranks;     /* the communicator's size */
  uint32_t first_rank; /* the handle's ranks: first_rank .. first_rank + local - 1 */
  uint32_t local;
} gp_comm_ranks;

/* Reads run arguments: count >= 1, ops non-NULL, op_size >= 8. */
gpurt_error *gp_comm_run_read(const gpurt_comm_run_args *in, gpurt_comm_run_args *a);

/* Reads op i of a checked run (the stride is a->op_size; the op's own
 * struct_size says which fields it has) and checks it alone: kind, dtype,
 * reduce, rank (one of the handle's), peer, stream, which buffers are set,
 * count * nranks within 2^62 bytes. */
gpurt_error *gp_coll_op_read(const gpurt_comm_run_args *a, uint64_t i, const gp_comm_ranks *r,
                             gpurt_coll_op *op);

/* Bytes op reads from send and writes to recv (0 when the buffer is
 * unused: the send of a non-root broadcast, the recv of a send). */
void gp_coll_bytes(const gpurt_coll_op *op, uint32_t nranks, uint64_t *send_bytes,
                   uint64_t *recv_bytes);

/* Whether op uses its send buffer (a non-root broadcast does not). */
int gp_coll_uses_send(const gpurt_coll_op *op);

/* OUT_OF_RANGE when [off, off + need) is outside a buffer of total bytes
 * (side: "send" or "recv"). */
gpurt_error *gp_coll_range(uint64_t i, const char *side, uint64_t total, uint64_t off, uint64_t need);

/* INVALID_ARGUMENT when op i's buffer (side) is on device bdev but its
 * rank's device is rdev, or its stream is on sdev != rdev (side NULL). */
gpurt_error *gp_coll_device(uint64_t i, const char *side, uint32_t rank, uint32_t rdev, uint32_t dev);

/* Is kind a collective (matched by order across ranks)? */
static inline int gp_coll_is_collective(int32_t kind) {
  return kind >= GPURT_COLL_ALL_REDUCE && kind <= GPURT_COLL_BROADCAST;
}

/* The checks of one call as a group, on ops already read one by one
 * (n entries): one stream per rank; the handle's local ranks issue the
 * same collectives in the same order (kind, dtype, reduce, count, root);
 * every send between two local ranks has its recv (same bytes), in order.
 * Allocates nothing (quadratic in n). */
gpurt_error *gp_comm_group_check(const gpurt_coll_op *ops, uint64_t n, const gp_comm_ranks *r);

const char *gp_coll_kind_name(int32_t kind);

#endif /* GPURT_CSRC_COMM_H_ */
