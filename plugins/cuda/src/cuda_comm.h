/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_comm.h — the CUDA plugin's collectives (1.6, NCCL opened with dlopen
 * on first use), peer access between devices and device UUIDs
 * (cuda_comm.c). Everything here is hidden.
 */
#ifndef GPURT_CUDA_COMM_H_
#define GPURT_CUDA_COMM_H_

#include "cuda_internal.h"

CU_HIDDEN gpurt_error *cu_comm_unique_id(gpurt_runtime *h, gpurt_comm_id *out);
CU_HIDDEN gpurt_error *cu_comm_create(gpurt_runtime *h, const gpurt_comm_create_args *args,
                                      gpurt_comm **out);
CU_HIDDEN gpurt_error *cu_comm_destroy(gpurt_runtime *h, gpurt_comm *c);
CU_HIDDEN gpurt_error *cu_comm_abort(gpurt_runtime *h, gpurt_comm *c);
CU_HIDDEN gpurt_error *cu_comm_query(gpurt_runtime *h, gpurt_comm *c);
CU_HIDDEN gpurt_error *cu_comm_run(gpurt_runtime *h, gpurt_comm *c, const gpurt_comm_run_args *args);

/* Runtime teardown (cu_runtime_free): aborts and frees the communicators
 * rt still has, before its contexts are synchronised. */
CU_HIDDEN void cu_comm_release_runtime(cu_runtime *rt);

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
