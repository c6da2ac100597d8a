/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_contract.c — the checks abi/gpurt.h asks of every plugin, written once:
 * negotiation, copy, memset, launch and launch_batch arguments, the built-in
 * kernels' buffer views, stats. Every plugin calls these, so the same input
 * is refused with the same code and the same message by every backend (only
 * the "<prefix>: " differs). Needs gp_error.c and gp_dtype_info.c, no libm.
 */
#include <stdio.h>
#include <string.h>

#include "gp_common.h"

#define U(x) ((unsigned long long)(x))

/* ---- negotiation ---------------------------------------------------------- */

/* No side effects: writes versions, the table or a message; nothing else. */
int32_t gp_negotiate(gpurt_negotiate_args *args, const gpurt_api *api) {
  if (args == NULL || args->struct_size < offsetof(gpurt_negotiate_args, api))
    return GPURT_ERR_INVALID_ARGUMENT;
  uint64_t sz = args->struct_size;
  int has_api = sz >= offsetof(gpurt_negotiate_args, api) + sizeof args->api;
  int has_msg = sz >= offsetof(gpurt_negotiate_args, message) + sizeof args->message;
  args->plugin_abi_major = GPURT_ABI_MAJOR;
  args->plugin_abi_minor = api != NULL ? api->abi_minor : GPURT_ABI_MINOR;
  if (has_api) args->api = NULL;
  if (has_msg) args->message[0] = 0;
  if (args->host_abi_major != GPURT_ABI_MAJOR) {
    if (has_msg)
      snprintf(args->message, sizeof args->message,
               "%s: abi mismatch: the core speaks %u.%u, the plugin speaks %u.%u "
               "(majors must match)",
               gp_plugin_prefix, args->host_abi_major, args->host_abi_minor,
               (unsigned)GPURT_ABI_MAJOR, (unsigned)GPURT_ABI_MINOR);
    return GPURT_ERR_ABI_MISMATCH;
  }
  if (!has_api) {
    if (has_msg)
      snprintf(args->message, sizeof args->message,
               "%s: negotiate args struct_size %llu has no room for api",
               gp_plugin_prefix, U(sz));
    return GPURT_ERR_INVALID_ARGUMENT;
  }
  args->api = api;
  return GPURT_OK;
}

/* ---- copy ------------------------------------------------------------------- */

static gpurt_error *gp_copy_end(const char *side, const void *buf, const void *host,
                                const void *ptr, uint64_t off, int *kind) {
  int n = (buf != NULL) + (host != NULL) + (ptr != NULL);
  if (n != 1)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: exactly one of %s_buffer, %s_host, %s_ptr must be set (%d are)",
                  side, side, side, n);
  if (ptr != NULL && off != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: %s_offset is %llu with %s_ptr; offsets apply to buffers and host "
                  "buffers only (advance the pointer instead)",
                  side, U(off), side);
  *kind = buf != NULL ? GP_END_BUFFER : host != NULL ? GP_END_HOST : GP_END_PTR;
  return NULL;
}

gpurt_error *gp_copy_check(const gpurt_copy_args *in, gpurt_copy_args *a,
                           int *dst_kind, int *src_kind) {
  gpurt_error *e;
  if ((e = gp_read_struct(a, sizeof *a, in, "copy: args"))) return e;
  if (a->flags & ~GPURT_COPY_SYNC)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: unknown flags %#x",
                  a->flags & ~GPURT_COPY_SYNC);
  int sync = (a->flags & GPURT_COPY_SYNC) != 0;
  if (!sync && a->stream == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: an asynchronous copy needs a stream (stream is NULL without "
                  "GPURT_COPY_SYNC)");
  if ((e = gp_copy_end("dst", a->dst_buffer, a->dst_host, a->dst_ptr, a->dst_offset,
                       dst_kind)) ||
      (e = gp_copy_end("src", a->src_buffer, a->src_host, a->src_ptr, a->src_offset,
                       src_kind)))
    return e;
  if (!sync && (*dst_kind == GP_END_PTR || *src_kind == GP_END_PTR))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: %s_ptr is pageable memory; an asynchronous copy takes pinned host "
                  "memory (a host buffer) or needs GPURT_COPY_SYNC",
                  *dst_kind == GP_END_PTR ? "dst" : "src");
  return NULL;
}

gpurt_error *gp_copy_range(const char *side, int kind, uint64_t total, uint64_t off,
                           uint64_t size) {
  if (gp_in_range(total, off, size)) return NULL;
  return gp_err(GPURT_ERR_OUT_OF_RANGE,
                "copy: %s range (offset %llu, size %llu) is outside the %s of %llu bytes",
                side, U(off), U(size), kind == GP_END_HOST ? "host buffer" : "buffer",
                U(total));
}

/* ---- memset ------------------------------------------------------------------- */

gpurt_error *gp_memset_check(const gpurt_memset_args *in, gpurt_memset_args *a) {
  gpurt_error *e;
  if ((e = gp_read_struct(a, sizeof *a, in, "memset: args"))) return e;
  uint32_t es = a->element_size;
  if (es != 1 && es != 2 && es != 4)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "memset: element_size is %u (must be 1, 2 or 4)", es);
  if (a->offset % es || a->size % es)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "memset: offset %llu and size %llu must be multiples of element_size %u",
                  U(a->offset), U(a->size), es);
  if (es < 4 && (a->value >> (8 * es)) != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "memset: value %#x does not fit in element_size %u", a->value, es);
  return NULL;
}

gpurt_error *gp_memset_range(uint64_t total, uint64_t off, uint64_t size) {
  if (gp_in_range(total, off, size)) return NULL;
  return gp_err(GPURT_ERR_OUT_OF_RANGE,
                "memset: range (offset %llu, size %llu) is outside the buffer of %llu bytes",
                U(off), U(size), U(total));
}

/* ---- launch ------------------------------------------------------------------- */

uint32_t gp_arg_width(int32_t kind) {
  switch (kind) {
    case GPURT_ARG_I8: case GPURT_ARG_U8: return 1;
    case GPURT_ARG_I16: case GPURT_ARG_U16: case GPURT_ARG_F16:
    case GPURT_ARG_BF16: return 2;
    case GPURT_ARG_I32: case GPURT_ARG_U32: case GPURT_ARG_F32: return 4;
    case GPURT_ARG_BUFFER:
    case GPURT_ARG_I64: case GPURT_ARG_U64: case GPURT_ARG_F64: return 8;
    default: return 0;
  }
}

const char *gp_arg_kind_name(int32_t kind) {
  static const char *names[] = {"?", "buffer", "i8", "i16", "i32", "i64", "u8",
                                "u16", "u32", "u64", "f16", "bf16", "f32",
                                "f64", "any"};
  return kind >= 1 && kind <= GPURT_ARG_ANY ? names[kind] : "unknown";
}

gpurt_error *gp_launch_read(const gpurt_launch_args *in, gpurt_launch_args *a) {
  return gp_read_struct(a, sizeof *a, in, "launch: args");
}

gpurt_error *gp_launch_check(const char *name, const gpurt_launch_args *a,
                             uint32_t num_params, const int32_t *kinds,
                             const uint32_t *sizes, uint32_t flags) {
  if (__builtin_expect(a->grid[0] == 0 || a->grid[1] == 0 || a->grid[2] == 0 ||
                           a->block[0] == 0 || a->block[1] == 0 || a->block[2] == 0,
                       0))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "launch \"%s\": grid (%u,%u,%u) and block (%u,%u,%u) must be non-zero in "
                  "every dimension",
                  name, a->grid[0], a->grid[1], a->grid[2], a->block[0], a->block[1],
                  a->block[2]);
  if (a->num_args > GPURT_MAX_KERNEL_PARAMS)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": %u arguments, at most %d", name,
                  a->num_args, GPURT_MAX_KERNEL_PARAMS);
  if (a->num_args > 0 && a->args == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": args is NULL with num_args %u",
                  name, a->num_args);
  if (num_params != GP_PARAMS_UNKNOWN && a->num_args != num_params)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": the kernel takes %u arguments, got %u",
                  name, num_params, a->num_args);
  for (uint32_t i = 0; i < a->num_args; i++) {
    const gpurt_kernel_arg *g = &a->args[i];
    uint32_t w = gp_arg_width(g->kind);
    if (w == 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": argument %u has unknown kind %d",
                    name, i, g->kind);
    if (g->size != w)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "launch \"%s\": argument %u is %s of %u bytes, size says %u", name, i,
                    gp_arg_kind_name(g->kind), w, g->size);
    if (kinds != NULL && kinds[i] != GPURT_ARG_ANY && g->kind != kinds[i])
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": argument %u is %s, the kernel wants %s",
                    name, i, gp_arg_kind_name(g->kind), gp_arg_kind_name(kinds[i]));
    if (sizes != NULL && sizes[i] != 0 && w != sizes[i] &&
        !((flags & GP_LAUNCH_ANY_TAKES_BUFFER) && g->kind == GPURT_ARG_BUFFER &&
          kinds != NULL && kinds[i] == GPURT_ARG_ANY))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "launch \"%s\": argument %u (%s) has %u bytes, the kernel's parameter %u",
                    name, i, gp_arg_kind_name(g->kind), w, sizes[i]);
  }
  return NULL;
}

gpurt_error *gp_launch_device_error(const char *name, uint32_t kernel_dev, uint32_t stream_dev) {
  return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                "launch \"%s\": the kernel is on device %u, the stream on device %u", name,
                kernel_dev, stream_dev);
}

gpurt_error *gp_launch_arg_device_error(const char *name, uint32_t i, uint32_t buffer_dev,
                                        uint32_t stream_dev) {
  return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                "launch \"%s\": argument %u: the buffer is on device %u, the stream on device %u",
                name, i, buffer_dev, stream_dev);
}

gpurt_error *gp_launch_view(const char *name, uint32_t i, uint64_t total, uint64_t off,
                            uint64_t len, uint64_t *view) {
  if (__builtin_expect(off <= total && (len == 0 || len <= total - off), 1)) {
    *view = len != 0 ? len : total - off;
    return NULL;
  }
  return gp_err(GPURT_ERR_OUT_OF_RANGE,
                "launch \"%s\": argument %u: view (offset %llu, length %llu) is outside the "
                "buffer of %llu bytes",
                name, i, U(off), U(len), U(total));
}

/* The row kernels (gpurt.h: rmsnorm_T and after): one-dimensional
 * geometry, their shape rules, then the bytes each buffer's view must hold
 * (gp_builtin_need). */
static gpurt_error *gp_builtin_check_rows(const gp_builtin_kernel *k, const gpurt_launch_args *a,
                                          const uint64_t *view) {
  if (a->grid[1] != 1 || a->grid[2] != 1 || a->block[1] != 1 || a->block[2] != 1)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "launch \"%s\": grid (%u,%u,%u) and block (%u,%u,%u) must be one-dimensional "
                  "(y and z 1)", k->name, a->grid[0], a->grid[1], a->grid[2], a->block[0],
                  a->block[1], a->block[2]);
  uint64_t sc[GP_BK_MAX_PARAMS] = {0};
  for (uint32_t p = 0; p < k->num_params && p < a->num_args; p++) {
    uint64_t v = a->args[p].value;
    if (k->sizes[p] < 8) v &= (1ull << (8 * k->sizes[p])) - 1;
    sc[p] = v;
  }
  switch (k->op) {
    case GP_BK_RMSNORM:
    case GP_BK_ADD_RMSNORM:
      if (sc[5] == 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": cols is 0 (a row needs an element)",
                      k->name);
      break;
    case GP_BK_ROPE_LLAMA:
    case GP_BK_ROPE_NEOX:
    case GP_BK_ROPE_FREQS:
      if (sc[5] == 0 || sc[5] % 2 != 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": head_dim %llu must be even and positive (rotation pairs)",
                      k->name, U(sc[5]));
      break;
    case GP_BK_ARGMAX:
    case GP_BK_SAMPLE:
      if (sc[3] == 0 || sc[3] > 0x7fffffffu)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": cols %llu must be in 1 .. 2^31-1 (an int32 index)", k->name,
                      U(sc[3]));
      break;
    case GP_BK_SAMPLE_ROWS:
      if (sc[4] == 0 || sc[4] > 0x7fffffffu)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": cols %llu must be in 1 .. 2^31-1 (an int32 index)", k->name,
                      U(sc[4]));
      if (sc[5] > GP_SR_MAX_HIST)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": hist %llu exceeds %u history slots per row", k->name, U(sc[5]),
                      GP_SR_MAX_HIST);
      if (sc[3] > 0x7fffffffu)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": rows %llu exceeds 2^31-1", k->name,
                      U(sc[3]));
      break;
    case GP_BK_EMBED:
      if (sc[5] > 0x80000000u)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": vocab %llu exceeds 2^31 (ids are int32)", k->name, U(sc[5]));
      break;
    default:
      break;
  }
  uint64_t need[3];
  gp_builtin_need(k, sc, a->grid, a->block, need);
  for (uint32_t p = 0; p < k->num_buffers; p++)
    if (need[p] > view[p])
      return gp_err(GPURT_ERR_OUT_OF_RANGE,
                    "launch \"%s\": argument %u: the kernel touches %llu bytes but the view holds "
                    "%llu bytes", k->name, p, U(need[p]), U(view[p]));
  return NULL;
}

gpurt_error *gp_builtin_check_views(const gp_builtin_kernel *k, const gpurt_launch_args *a,
                                    const uint64_t *view) {
  if (k->op == GP_BK_SLEEP || k->num_buffers == 0) return NULL;
  if (k->op >= GP_BK_RMSNORM) return gp_builtin_check_rows(k, a, view);
  uint64_t n = a->args[k->n_param].value;
  uint64_t threads = (uint64_t)a->grid[0] * (uint64_t)a->block[0];
  uint64_t touched = n < threads ? n : threads;
  size_t es = gp_dtype_size(k->dtype);
  for (uint32_t p = 0; es > 0 && p < k->num_buffers; p++)
    if (touched > view[p] / es)
      return gp_err(GPURT_ERR_OUT_OF_RANGE,
                    "launch \"%s\": argument %u: the kernel touches %llu elements (%llu bytes) "
                    "but the view holds %llu bytes",
                    k->name, p, U(touched), U(touched * es), U(view[p]));
  return NULL;
}

gpurt_error *gp_need_stream(const char *op, const void *stream) {
  if (__builtin_expect(stream != NULL, 1)) return NULL;
  return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: stream is NULL (%s needs a stream)", op, op);
}

gpurt_error *gp_launch_batch_check(const gpurt_stream *s, uint64_t count,
                                   const gpurt_launch_item *items) {
  gpurt_error *e;
  if ((e = gp_need_stream("launch_batch", s))) return e;
  if (items == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch_batch: items is NULL with count %llu",
                  U(count));
  return NULL;
}

gpurt_error *gp_batch_item_error(gpurt_error *e, uint64_t i) {
  return gp_err_wrap(e, "launch_batch: item %llu", U(i));
}

gpurt_error *gp_batch_midway_error(gpurt_error *e, uint64_t i) {
  e = gp_batch_item_error(e, i);
  if (i > 0) return gp_err_append(e, "; items 0..%llu before it stay enqueued", U(i - 1));
  return gp_err_append(e, "; nothing was enqueued");
}

/* ---- stats ---------------------------------------------------------------------- */

gpurt_error *gp_stats_write(gpurt_runtime_stats *out, const gpurt_runtime_stats *s) {
  gpurt_error *e = gp_check_out(out, "runtime_stats: out");
  if (e) return e;
  gp_write_struct(out, s, sizeof *s);
  return NULL;
}
