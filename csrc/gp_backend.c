/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_backend.c — which gp_backend entries each ABI minor promises, and the
 * check that a backend's table sets them (see gp_backend.h). No libm, no
 * allocation: every plugin links it.
 */
#include "gp_backend.h"

#include <string.h>

#define NEED(field, minor) {offsetof(gp_backend, field), minor, #field}

/* Every entry not listed here is "(optional)" in gp_backend.h. The runs of
 * the recordable ops (GP_ZCALLS) are promised from their slot's minor. */
#define NEED_RUN(name, NAME, minor, idx, atype, obj) NEED(name, minor),
const gp_backend_need gp_backend_needs[] = {
    NEED(probe, 0),        NEED(open, 0),          NEED(close, 0),        NEED(device_info, 0),
    NEED(mem_alloc, 0),    NEED(mem_free, 0),      NEED(host_alloc, 0),   NEED(host_free, 0),
    NEED(copy, 0),         NEED(memset, 0),        NEED(queue_create, 0), NEED(queue_destroy, 0),
    NEED(queue_sync, 0),   NEED(queue_query, 0),   NEED(event_create, 0), NEED(event_destroy, 0),
    NEED(event_record, 0), NEED(event_wait, 0),    NEED(event_query, 0),  NEED(event_sync, 0),
    NEED(event_elapsed, 0), NEED(module_load, 0),  NEED(module_unload, 0), NEED(kernel_get, 0),
    NEED(launch, 0),       NEED(gemm_run, 1),      NEED(graph_begin, 3),  NEED(graph_end, 3),
    NEED(graph_launch, 3), NEED(graph_destroy, 3), NEED(attention_create, 5), NEED(attention_destroy, 5),
    NEED(attention_plan, 5), GP_ZCALLS(NEED_RUN)
};
const size_t gp_backend_need_count = sizeof gp_backend_needs / sizeof gp_backend_needs[0];

gpurt_error *gp_backend_check(const gp_backend *b) {
  if (b == NULL) return gp_err(GPURT_ERR_INTERNAL, "backend table is NULL");
  if (b->abi_minor > GPURT_ABI_MINOR)
    return gp_err(GPURT_ERR_INTERNAL, "backend %s declares ABI minor %u, newer than the header's %u",
                  b->name ? b->name : "(unnamed)", b->abi_minor, (unsigned)GPURT_ABI_MINOR);
  for (size_t i = 0; i < gp_backend_need_count; i++) {
    const gp_backend_need *n = &gp_backend_needs[i];
    if (n->since_minor > b->abi_minor) continue;
    void *fn;
    memcpy(&fn, (const unsigned char *)b + n->offset, sizeof fn);
    if (fn == NULL)
      return gp_err(GPURT_ERR_INTERNAL, "backend %s: entry %s is unset but ABI 1.%u promises it (since 1.%u)",
                    b->name ? b->name : "(unnamed)", n->name, b->abi_minor, n->since_minor);
  }
  return NULL;
}
