/* SPDX-License-Identifier: Apache-2.0 */
/* fp8 KV caches (ABI 1.8) on the mock: the element math of kv_append's
 * quantisation and attention's dequantisation, the float reference of
 * what the GPU kernels do (e4m3(x / scale), RNE, saturated to +-448;
 * element * scale). Ops floor: no stream or runtime use. */
#include "gp_attention.h"
#include "mock_internal.h"

void mock_kv_store_row(const gpurt_kv_layout *l, unsigned char *page_base, uint64_t dst_elem,
                       const unsigned char *rows, uint64_t src_elem, float scale) {
  int32_t qdt = gp_kv_qo_dtype(l);
  if (l->dtype != GPURT_DTYPE_FP8_E4M3) { /* a 16-bit cache: the row's bytes */
    uint64_t es = gp_dtype_size(l->dtype);
    memcpy(page_base + dst_elem * es, rows + src_elem * es, (size_t)l->head_dim * es);
    return;
  }
  for (uint32_t d = 0; d < l->head_dim; d++)
    gp_store(GPURT_DTYPE_FP8_E4M3, page_base, dst_elem + d, gp_load(qdt, rows, src_elem + d) / scale);
}

float mock_kv_load(const gpurt_kv_layout *l, const unsigned char *page_base, uint64_t elem, float scale) {
  float v = gp_load(l->dtype, page_base, elem);
  return l->dtype == GPURT_DTYPE_FP8_E4M3 ? (float)((double)v * (double)scale) : v;
}
