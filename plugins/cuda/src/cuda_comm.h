/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_comm.h — the CUDA plugin's collectives (1.6, NCCL opened with dlopen
 * on first use), peer access between devices and device UUIDs
 * (cuda_comm.c). Everything here is hidden.
 */
#ifndef GPURT_CUDA_COMM_H_
#define GPURT_CUDA_COMM_H_

#include "cuda_internal.h"

/* The gp_backend entries comm_* (the engine checks and resolves). */
CU_HIDDEN gpurt_error *cu_comm_unique_id(void *ctx, uint8_t id[GPURT_COMM_ID_BYTES]);
CU_HIDDEN gpurt_error *cu_comm_create(void *ctx, const gpurt_comm_create_args *a, uint32_t nranks, void **comm);
CU_HIDDEN void cu_comm_destroy(void *ctx, void *comm);
CU_HIDDEN void cu_comm_abort(void *ctx, void *comm);
CU_HIDDEN gpurt_error *cu_comm_query(void *ctx, void *comm, const char *what);
CU_HIDDEN gpurt_error *cu_comm_run(void *ctx, void *comm, const gp_coll_item *items, uint64_t n);

/* Enables peer access between devices a and b of rt (both directions)
 * once per process where cuDeviceCanAccessPeer allows it; elsewhere does
 * nothing (cuMemcpyPeerAsync then stages through host memory in the
 * driver). Never fails: a refusal only leaves the staged path. Called
 * with any context current; restores nothing (callers make theirs
 * current after). */
CU_HIDDEN void cu_peer_enable(cu_runtime *rt, uint32_t a, uint32_t b);

/* Writes dev's UUID as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into
 * out[cap], or "" when the driver cannot say. */
CU_HIDDEN void cu_device_uuid(CUdevice dev, char *out, size_t cap);

#endif /* GPURT_CUDA_COMM_H_ */
