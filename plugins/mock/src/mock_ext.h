/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_ext.h — what mock.c offers the files that add ops to the mock
 * (mock_quant.c, ...): resolve a runtime and a stream, resolve a buffer
 * operand, and enqueue a CPU function on a stream's worker. The worker
 * runs fn(arg) in stream order (not on a lost device) and then calls
 * release(arg); release runs exactly once, also when the op never runs.
 */
#ifndef GPURT_MOCK_EXT_H_
#define GPURT_MOCK_EXT_H_

#include "gp_common.h"

typedef struct mock_rt mock_rt;
typedef struct mock_stream mock_stream;

/* The runtime and the (non-NULL) stream of an op named `what`; a lost
 * device is DEVICE_LOST. */
gpurt_error *mock_ext_stream(gpurt_runtime *h, gpurt_stream *sh, const char *what, mock_rt **rt,
                             mock_stream **s);
/* A buffer on the stream's device with [off, off + bytes) inside it:
 * *out is its data at off. Errors say "<what>: operand <name>: ...". */
gpurt_error *mock_ext_operand(mock_rt *rt, mock_stream *s, const char *what, const char *name,
                              gpurt_buffer *bh, uint64_t off, uint64_t bytes, void **out);
/* Enqueues fn(arg) on s; on failure (no memory) calls release(arg). */
gpurt_error *mock_ext_submit(mock_stream *s, const char *what, void (*fn)(void *), void (*release)(void *),
                             void *arg);
/* The reference ops' worker threads (>= 1). */
int mock_ext_threads(const mock_rt *rt);

/* The op files' table slots. */
gpurt_error *mock_quant_matmul(gpurt_runtime *rt, gpurt_stream *s, const gpurt_quant_matmul_args *args);
gpurt_error *mock_grouped_gemm(gpurt_runtime *rt, gpurt_stream *s, const gpurt_grouped_gemm_args *args);

#endif /* GPURT_MOCK_EXT_H_ */
