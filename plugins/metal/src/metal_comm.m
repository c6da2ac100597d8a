/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Collectives (ABI 1.6) on Metal: an Apple GPU is one device per host and
 * has no collective library, so every slot answers GPURT_ERR_UNSUPPORTED
 * naming why (after the runtime check, like every other call). Written on
 * Linux: not compiled yet.
 */
#import <Foundation/Foundation.h>

#include "metal_internal.h"

static gpurt_error *gm_comm_unsupported(gpurt_runtime *h, const char *what) {
  GMRuntime *rt;
  gpurt_error *e = gm_get_rt(h, &rt);
  if (e) return e;
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: collectives are not supported on Metal (one GPU per host, no "
                "collective library)", what);
}

gpurt_error *gm_comm_unique_id(gpurt_runtime *h, gpurt_comm_id *out) {
  (void)out;
  return gm_comm_unsupported(h, "comm_unique_id");
}

gpurt_error *gm_comm_create(gpurt_runtime *h, const gpurt_comm_create_args *args, gpurt_comm **out) {
  (void)args;
  if (out) *out = NULL;
  return gm_comm_unsupported(h, "comm_create");
}

gpurt_error *gm_comm_destroy(gpurt_runtime *h, gpurt_comm *c) {
  if (c == NULL) {
    GMRuntime *rt;
    return gm_get_rt(h, &rt);
  }
  return gm_comm_unsupported(h, "comm_destroy");
}

gpurt_error *gm_comm_abort(gpurt_runtime *h, gpurt_comm *c) {
  (void)c;
  return gm_comm_unsupported(h, "comm_abort");
}

gpurt_error *gm_comm_query(gpurt_runtime *h, gpurt_comm *c) {
  (void)c;
  return gm_comm_unsupported(h, "comm_query");
}

gpurt_error *gm_comm_run(gpurt_runtime *h, gpurt_comm *c, const gpurt_comm_run_args *args) {
  (void)c;
  (void)args;
  return gm_comm_unsupported(h, "comm_run");
}
