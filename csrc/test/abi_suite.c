/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_suite PLUGIN — the plugin-agnostic C ABI suite: dlopens any gpurt
 * plugin by path, negotiates, and runs the rules of abi/gpurt.h against it
 * on device 0: negotiation, the table, error objects, short struct_size on
 * argument and out structs, NULL accepted by every destroy, foreign, stale,
 * wrong-kind and made-up handles, the copy / memset / launch / launch_batch
 * checks (with the two settled rules: a plain pointer with a non-zero offset
 * and a memset value wider than its element are refused), stats.
 *
 * The checks csrc/gp_contract.c implements for every plugin are compared
 * byte for byte: the message must be "<backend>: " + the expected text, so
 * a plugin that words a contract check its own way fails here. Checks that
 * depend on a backend's handle tables compare the code and the prefix only.
 *
 * Each check prints one line ("ok   ..." or "FAIL ..."; "skip ..." for a
 * later minor's slot the plugin does not have); the last line is
 * "N passed, M failed"; the exit status is 0 only when M is 0 (2 when the
 * plugin cannot be loaded or has no device). Backend-specific fault tests
 * live elsewhere (plugins/mock/test/mock_selftest.c,
 * plugins/cuda/test/fault_test.c).
 *
 * Build: cc -std=c11 -I abi -o abi_suite csrc/test/abi_suite.c -ldl
 * (scripts/abi_suite.sh builds it and runs it against a plugin).
 */
#include "testlib.h"

static char prefix[40]; /* "<backend>: " */

/* The call succeeds. */
static void ok(const char *name, gpurt_error *e) {
  char m[600];
  int c = take(e, m, sizeof m);
  result(c == GPURT_OK, "%s%s%s", name, c ? ": " : "", m);
}

/* The call fails with code and a message of this plugin. */
static void code_is(const char *name, gpurt_error *e, int code) {
  char m[600];
  int c = take(e, m, sizeof m);
  int good = c == code && strncmp(m, prefix, strlen(prefix)) == 0;
  result(good, "%s: want code %d, got %d: %s", name, code, c, m);
}

/* The call fails with code and exactly "<backend>: " + want (a contract
 * check of csrc, worded once for every plugin). */
static void msg_is(const char *name, gpurt_error *e, int code, const char *fmt, ...) {
  char want[600], full[700], m[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  snprintf(full, sizeof full, "%s%s", prefix, want);
  int c = take(e, m, sizeof m);
  int good = c == code && strcmp(m, full) == 0;
  if (good) result(1, "%s", name);
  else result(0, "%s: want [%d] \"%s\", got [%d] \"%s\"", name, code, full, c, m);
}

/* ---- small helpers -------------------------------------------------------- */

static gpurt_runtime *new_runtime(void) {
  gpurt_runtime_create_args a;
  ARGS_INIT(a);
  gpurt_runtime *rt = NULL;
  char m[600];
  if (take(api->runtime_create(&a, &rt), m, sizeof m) != GPURT_OK) {
    fprintf(stderr, "abi_suite: runtime_create: %s\n", m);
    return NULL;
  }
  return rt;
}

static gpurt_buffer *alloc(gpurt_runtime *rt, uint64_t size) {
  gpurt_buffer *b = NULL;
  char m[600];
  if (take(api->buffer_alloc(rt, 0, size, &b), m, sizeof m) != GPURT_OK)
    fprintf(stderr, "abi_suite: buffer_alloc(%llu): %s\n", (unsigned long long)size, m);
  return b;
}

/* ---- negotiation and the table --------------------------------------------- */

/* The slots of gpurt_api as X-macro lists, generated from the header. */
#include "../gp_zslots.h"

static int negotiate(void *lib) {
  gpurt_negotiate_fn fn;
  *(void **)&fn = dlsym(lib, GPURT_ENTRY_SYMBOL);
  if (fn == NULL) {
    fprintf(stderr, "abi_suite: no %s in the plugin\n", GPURT_ENTRY_SYMBOL);
    return -1;
  }
  result(fn(NULL) == GPURT_ERR_INVALID_ARGUMENT, "negotiate: NULL args is INVALID_ARGUMENT");

  gpurt_negotiate_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = offsetof(gpurt_negotiate_args, api) - 1;
  a.host_abi_major = GPURT_ABI_MAJOR;
  result(fn(&a) == GPURT_ERR_INVALID_ARGUMENT,
         "negotiate: struct_size below the api field is INVALID_ARGUMENT");

  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.host_abi_major = GPURT_ABI_MAJOR + 1;
  a.host_abi_minor = 0;
  a.api = (const gpurt_api *)&a; /* must be overwritten with NULL */
  int32_t r = fn(&a);
  result(r == GPURT_ERR_ABI_MISMATCH && a.api == NULL && a.plugin_abi_major == GPURT_ABI_MAJOR &&
             strstr(a.message, "abi mismatch") != NULL,
         "negotiate: another major is ABI_MISMATCH, versions written, api NULL: [%d] %s", r,
         a.message);

  /* A core that knows no message field still gets the table. */
  memset(&a, 0, sizeof a);
  a.struct_size = offsetof(gpurt_negotiate_args, message);
  a.host_abi_major = GPURT_ABI_MAJOR;
  a.host_abi_minor = GPURT_ABI_MINOR;
  r = fn(&a);
  result(r == GPURT_OK && a.api != NULL, "negotiate: struct_size without message still negotiates");

  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.host_abi_major = GPURT_ABI_MAJOR;
  a.host_abi_minor = GPURT_ABI_MINOR;
  r = fn(&a);
  result(r == GPURT_OK && a.api != NULL && a.plugin_abi_major == GPURT_ABI_MAJOR,
         "negotiate: OK, plugin ABI %u.%u", a.plugin_abi_major, a.plugin_abi_minor);
  if (r != GPURT_OK || a.api == NULL) return -1;
  api = a.api;

  result(api->abi_major == GPURT_ABI_MAJOR && api->abi_minor == a.plugin_abi_minor,
         "table: abi_major/minor match the negotiated versions");
  /* The table covers every slot of the minors it claims (1.2 here: the
   * slots this suite calls). */
  result(api->struct_size >= offsetof(gpurt_api, launch_batch) + sizeof(void *) ||
             a.plugin_abi_minor < 2,
         "table: struct_size %llu covers the 1.2 slots", (unsigned long long)api->struct_size);
  /* Every slot of the minors the plugin claims is set (the lists are
   * gp_zslots.h's, from the header: a slot added to the header and
   * forgotten in a plugin's table fails here); shutdown is optional. */
  uint32_t pm = a.plugin_abi_minor;
  int pmi = (int)pm, missing = 0, missing_old = 0;
#define REQ_(name, minor, ret, params)                                                   \
  if (pmi >= (minor) && strcmp(#name, "shutdown") != 0 && !GPURT_API_HAS(api, name)) {    \
    *((minor) <= 2 ? &missing_old : &missing) += 1;                                        \
    printf("     missing 1.%d slot %s\n", minor, #name);                                   \
  }
  GP_ZSLOTS(REQ_)
#undef REQ_
  result(missing_old == 0, "table: every required 1.0-1.2 slot is set (shutdown is optional)");
  result(missing == 0, "table: every slot of the minors 1.3-1.%u the plugin claims is set", pm);
  return 0;
}

/* ---- info, probe, error objects ------------------------------------------------- */

static void info_checks(void) {
  gpurt_plugin_info pi;
  ARGS_INIT(pi);
  ok("plugin_info", api->plugin_info(&pi));
  snprintf(prefix, sizeof prefix, "%s: ", pi.backend);
  result(pi.backend[0] != 0, "plugin_info: backend \"%s\", version \"%s\"", pi.backend, pi.version);

  gpurt_error *e = api->plugin_info(NULL);
  code_is("plugin_info: NULL out", e, GPURT_ERR_INVALID_ARGUMENT);
  memset(&pi, 0xAB, sizeof pi);
  pi.struct_size = 0;
  code_is("plugin_info: out struct_size 0", api->plugin_info(&pi), GPURT_ERR_INVALID_ARGUMENT);
  /* An older caller's 8-byte struct: nothing written past struct_size. */
  memset(&pi, 0xAB, sizeof pi);
  pi.struct_size = sizeof(uint64_t);
  ok("plugin_info: out struct_size 8", api->plugin_info(&pi));
  result((unsigned char)pi.backend[0] == 0xAB, "plugin_info: writes nothing past a short struct_size");

  gpurt_probe_args pa;
  ARGS_INIT(pa);
  ok("probe: device_capacity 0", api->probe(&pa));
  result(pa.device_count >= 1 && pa.available == 1, "probe: available with %u device(s): %s",
         pa.device_count, pa.reason);
  code_is("probe: NULL args", api->probe(NULL), GPURT_ERR_INVALID_ARGUMENT);
  pa.device_capacity = 1;
  pa.devices = NULL;
  code_is("probe: devices NULL with device_capacity 1", api->probe(&pa), GPURT_ERR_INVALID_ARGUMENT);

  /* Error objects: code, message (prefixed, length without NUL), free. */
  e = api->probe(NULL);
  gpurt_error_info ei;
  ARGS_INIT(ei);
  api->error_get(e, &ei);
  result(ei.code == GPURT_ERR_INVALID_ARGUMENT && ei.message != NULL &&
             ei.message_len == strlen(ei.message) &&
             strncmp(ei.message, prefix, strlen(prefix)) == 0,
         "error_get: code, \"%s\" message, message_len without the NUL", prefix);
  gpurt_error_info shorty;
  memset(&shorty, 0xAB, sizeof shorty);
  shorty.struct_size = offsetof(gpurt_error_info, vendor_code);
  api->error_get(e, &shorty);
  unsigned char guard[sizeof shorty.vendor_code];
  memset(guard, 0xAB, sizeof guard);
  result(shorty.code == GPURT_ERR_INVALID_ARGUMENT &&
             memcmp(&shorty.vendor_code, guard, sizeof guard) == 0,
         "error_get: a short struct_size gets the code and nothing past it");
  api->error_destroy(e);
  api->error_destroy(NULL);
  result(1, "error_destroy: NULL is a no-op");
}

/* ---- runtimes, NULL destroys, handles ------------------------------------------- */

static void runtime_checks(gpurt_runtime *rt) {
  gpurt_runtime *none = NULL;
  code_is("runtime_create: NULL out", api->runtime_create(NULL, NULL), GPURT_ERR_INVALID_ARGUMENT);
  gpurt_runtime_create_args ca;
  memset(&ca, 0, sizeof ca);
  code_is("runtime_create: args struct_size 0", api->runtime_create(&ca, &none),
          GPURT_ERR_INVALID_ARGUMENT);
  result(none == NULL, "runtime_create: *out is NULL after a failure");

  uint32_t n = 0;
  ok("device_count", api->device_count(rt, &n));
  result(n >= 1, "device_count: %u", n);
  code_is("device_count: NULL runtime", api->device_count(NULL, &n), GPURT_ERR_INVALID_HANDLE);
  code_is("device_count: made-up runtime", api->device_count((gpurt_runtime *)(uintptr_t)0x1234, &n),
          GPURT_ERR_INVALID_HANDLE);
  gpurt_runtime *dead = new_runtime();
  if (dead) {
    ok("runtime_destroy", api->runtime_destroy(dead));
    code_is("device_count: destroyed runtime", api->device_count(dead, &n), GPURT_ERR_INVALID_HANDLE);
    code_is("runtime_destroy: destroyed runtime", api->runtime_destroy(dead),
            GPURT_ERR_INVALID_HANDLE);
  }

  gpurt_device_info di;
  memset(&di, 0xAB, sizeof di);
  di.struct_size = sizeof(uint64_t);
  ok("device_info: out struct_size 8", api->device_info(rt, 0, &di));
  result((unsigned char)di.name[0] == 0xAB, "device_info: writes nothing past a short struct_size");
  ARGS_INIT(di);
  code_is("device_info: device 4096", api->device_info(rt, 4096, &di), GPURT_ERR_INVALID_ARGUMENT);

  /* Every destroy accepts NULL. */
  ok("runtime_destroy(NULL)", api->runtime_destroy(NULL));
  ok("buffer_free(rt, NULL)", api->buffer_free(rt, NULL));
  ok("host_free(rt, NULL)", api->host_free(rt, NULL));
  ok("stream_destroy(rt, NULL)", api->stream_destroy(rt, NULL));
  ok("event_destroy(rt, NULL)", api->event_destroy(rt, NULL));
  ok("module_unload(rt, NULL)", api->module_unload(rt, NULL));
  ok("gemm_plan_destroy(rt, NULL)", api->gemm_plan_destroy(rt, NULL));

  /* stats: out checks, short struct_size, live counts */
  msg_is("runtime_stats: NULL out", api->runtime_stats(rt, NULL), GPURT_ERR_INVALID_ARGUMENT,
         "runtime_stats: out is NULL");
  gpurt_runtime_stats st;
  memset(&st, 0, sizeof st);
  msg_is("runtime_stats: out struct_size 0", api->runtime_stats(rt, &st), GPURT_ERR_INVALID_ARGUMENT,
         "runtime_stats: out has struct_size 0, below 8");
  memset(&st, 0xAB, sizeof st);
  st.struct_size = offsetof(gpurt_runtime_stats, live_host_buffers);
  ok("runtime_stats: out struct_size 16", api->runtime_stats(rt, &st));
  result(st.live_host_buffers == 0xABABABABABABABABull,
         "runtime_stats: writes nothing past a short struct_size");
  ARGS_INIT(st);
  ok("runtime_stats", api->runtime_stats(rt, &st));
  uint64_t bufs0 = st.live_buffers, bytes0 = st.device_bytes;
  gpurt_buffer *b = alloc(rt, 4096);
  ok("runtime_stats after buffer_alloc", api->runtime_stats(rt, &st));
  result(st.live_buffers == bufs0 + 1 && st.device_bytes >= bytes0 + 4096,
         "runtime_stats: live_buffers %llu -> %llu, device_bytes +%llu",
         (unsigned long long)bufs0, (unsigned long long)st.live_buffers,
         (unsigned long long)(st.device_bytes - bytes0));
  ok("buffer_free", api->buffer_free(rt, b));
  ok("runtime_stats after buffer_free", api->runtime_stats(rt, &st));
  result(st.live_buffers == bufs0, "runtime_stats: live_buffers back to %llu",
         (unsigned long long)bufs0);
}

static void handle_checks(gpurt_runtime *rt) {
  gpurt_runtime *rt2 = new_runtime();
  gpurt_buffer *b = alloc(rt, 256), *gone = alloc(rt, 256);
  gpurt_buffer *foreign = rt2 ? alloc(rt2, 256) : NULL;
  gpurt_stream *s = NULL, *s_gone = NULL;
  ok("stream_create", api->stream_create(rt, 0, &s));
  ok("stream_create (to destroy)", api->stream_create(rt, 0, &s_gone));
  ok("stream_destroy", api->stream_destroy(rt, s_gone));
  ok("buffer_free", api->buffer_free(rt, gone));
  gpurt_memset_args m;

  code_is("buffer_free: freed buffer", api->buffer_free(rt, gone), GPURT_ERR_INVALID_HANDLE);
  m = memset_args(gone, 0, 4, 0, 1);
  code_is("memset: freed buffer", api->memset(rt, &m), GPURT_ERR_INVALID_HANDLE);
  m = memset_args((gpurt_buffer *)(uintptr_t)0xdeadbeef, 0, 4, 0, 1);
  code_is("memset: made-up buffer handle", api->memset(rt, &m), GPURT_ERR_INVALID_HANDLE);
  m = memset_args((gpurt_buffer *)s, 0, 4, 0, 1);
  code_is("memset: a stream handle as a buffer", api->memset(rt, &m), GPURT_ERR_INVALID_HANDLE);
  m = memset_args(NULL, 0, 4, 0, 1);
  code_is("memset: NULL buffer", api->memset(rt, &m), GPURT_ERR_INVALID_HANDLE);
  if (foreign) {
    m = memset_args(foreign, 0, 4, 0, 1);
    code_is("memset: another runtime's buffer", api->memset(rt, &m), GPURT_ERR_INVALID_HANDLE);
    code_is("buffer_free: another runtime's buffer", api->buffer_free(rt, foreign),
            GPURT_ERR_INVALID_HANDLE);
    ok("buffer_free: the foreign buffer still frees in its own runtime",
       api->buffer_free(rt2, foreign));
  }
  m = memset_args(b, 0, 4, 0, 1);
  m.stream = s_gone;
  code_is("memset: destroyed stream", api->memset(rt, &m), GPURT_ERR_INVALID_HANDLE);
  code_is("stream_destroy: destroyed stream", api->stream_destroy(rt, s_gone),
          GPURT_ERR_INVALID_HANDLE);
  code_is("stream_synchronize: made-up stream",
          api->stream_synchronize(rt, (gpurt_stream *)(uintptr_t)0xdeadbeef),
          GPURT_ERR_INVALID_HANDLE);

  gpurt_event *ev = NULL;
  ok("event_create", api->event_create(rt, 0, 0, &ev));
  ok("event_destroy", api->event_destroy(rt, ev));
  code_is("event_query: destroyed event", api->event_query(rt, ev), GPURT_ERR_INVALID_HANDLE);
  code_is("event_destroy: destroyed event", api->event_destroy(rt, ev), GPURT_ERR_INVALID_HANDLE);

  gpurt_host_buffer *hb = NULL;
  void *hp = NULL;
  ok("host_alloc", api->host_alloc(rt, 256, &hb, &hp));
  ok("host_free", api->host_free(rt, hb));
  code_is("host_free: freed host buffer", api->host_free(rt, hb), GPURT_ERR_INVALID_HANDLE);

  /* A kernel dies with its module. */
  gpurt_module *mod = NULL;
  gpurt_kernel *k = NULL;
  ok("module_load BUILTIN", load_builtin(rt, &mod));
  ok("kernel_get fill_f32", api->kernel_get(rt, mod, "fill_f32", 8, &k));
  ok("module_unload", api->module_unload(rt, mod));
  gpurt_kernel_info ki;
  ARGS_INIT(ki);
  code_is("kernel_info: kernel of an unloaded module", api->kernel_info(rt, k, &ki),
          GPURT_ERR_INVALID_HANDLE);
  code_is("module_unload: unloaded module", api->module_unload(rt, mod), GPURT_ERR_INVALID_HANDLE);
  code_is("kernel_get: unloaded module", api->kernel_get(rt, mod, "fill_f32", 8, &k),
          GPURT_ERR_INVALID_HANDLE);

  ok("stream_destroy", api->stream_destroy(rt, s));
  ok("buffer_free", api->buffer_free(rt, b));
  if (rt2) ok("runtime_destroy (second runtime)", api->runtime_destroy(rt2));
}

/* ---- copy ------------------------------------------------------------------------ */

static void copy_checks(gpurt_runtime *rt) {
  gpurt_buffer *b = alloc(rt, 100);
  gpurt_stream *s = NULL;
  ok("stream_create", api->stream_create(rt, 0, &s));
  gpurt_host_buffer *hb = NULL;
  void *hp = NULL;
  ok("host_alloc 100", api->host_alloc(rt, 100, &hb, &hp));
  result(((uintptr_t)hp % 256) == 0, "host_alloc: *out_ptr %p is 256-byte aligned", hp);
  unsigned char tmp[256], back[256];
  for (int i = 0; i < 256; i++) tmp[i] = (unsigned char)(i * 7 + 3);
  gpurt_copy_args c;

  msg_is("copy: NULL args", api->copy(rt, NULL), GPURT_ERR_INVALID_ARGUMENT, "copy: args is NULL");
  c = copy_args();
  c.struct_size = 0;
  msg_is("copy: args struct_size 0", api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT,
         "copy: args has struct_size 0, below 8");
  /* A size that ends inside a field (here halfway through dst_buffer) is
   * the size of no version of the struct: refused, never half read. */
  c = copy_args();
  c.struct_size = offsetof(gpurt_copy_args, dst_buffer) + 4;
  msg_is("copy: args struct_size inside a field", api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT,
         "copy: args has struct_size %llu, not a multiple of 8 (the size of no version of the struct)",
         (unsigned long long)c.struct_size);
  /* An older caller's struct ends after `size`: the fields past it read as
   * zero, whatever the memory holds. */
  c = copy_args();
  c.size = 4;
  c.dst_buffer = b;
  c.src_ptr = tmp;
  c.struct_size = offsetof(gpurt_copy_args, dst_buffer);
  msg_is("copy: fields past struct_size are zero", api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT,
         "copy: exactly one of dst_buffer, dst_host, dst_ptr must be set (0 are)");

  c = copy_args();
  c.flags = 2 | GPURT_COPY_SYNC;
  c.size = 4;
  c.dst_buffer = b;
  c.src_ptr = tmp;
  msg_is("copy: unknown flags", api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT,
         "copy: unknown flags 0x2");
  c.flags = 0;
  msg_is("copy: asynchronous without a stream", api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT,
         "copy: an asynchronous copy needs a stream (stream is NULL without GPURT_COPY_SYNC)");
  c.stream = s;
  msg_is("copy: asynchronous from pageable memory", api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT,
         "copy: src_ptr is pageable memory; an asynchronous copy takes pinned host memory (a host "
         "buffer) or needs GPURT_COPY_SYNC");
  /* Refusals of where a copy goes: the ends set (a bit each), their
   * offsets and the size. */
  enum { DB = 1, DP = 2, DH = 4, SB = 8, SP = 16 };
  static const struct {
    const char *name;
    int ends;
    uint64_t size, dst_offset, src_offset;
    int32_t code;
    const char *want;
  } refused[] = {
      {"copy: two destinations", DB | DP | SP, 4, 0, 0, GPURT_ERR_INVALID_ARGUMENT,
       "copy: exactly one of dst_buffer, dst_host, dst_ptr must be set (2 are)"},
      {"copy: no source", DB, 4, 0, 0, GPURT_ERR_INVALID_ARGUMENT,
       "copy: exactly one of src_buffer, src_host, src_ptr must be set (0 are)"},
      /* Settled rule 1: a plain pointer with a non-zero offset is refused. */
      {"copy: src_ptr with src_offset 8 is refused", DB | SP, 4, 0, 8, GPURT_ERR_INVALID_ARGUMENT,
       "copy: src_offset is 8 with src_ptr; offsets apply to buffers and host buffers only "
       "(advance the pointer instead)"},
      {"copy: dst_ptr with dst_offset 1 is refused", DP | SB, 4, 1, 0, GPURT_ERR_INVALID_ARGUMENT,
       "copy: dst_offset is 1 with dst_ptr; offsets apply to buffers and host buffers only "
       "(advance the pointer instead)"},
      /* Ranges, also for size 0. */
      {"copy: dst range past the buffer", DB | SP, 51, 50, 0, GPURT_ERR_OUT_OF_RANGE,
       "copy: dst range (offset 50, size 51) is outside the buffer of 100 bytes"},
      {"copy: size 0 at an offset past the buffer", DB | SP, 0, 101, 0, GPURT_ERR_OUT_OF_RANGE,
       "copy: dst range (offset 101, size 0) is outside the buffer of 100 bytes"},
      {"copy: src offset that wraps", DP | SB, 2, 0, UINT64_MAX, GPURT_ERR_OUT_OF_RANGE,
       "copy: src range (offset 18446744073709551615, size 2) is outside the buffer of 100 bytes"},
      {"copy: host buffer range", DH | SB, 100, 1, 0, GPURT_ERR_OUT_OF_RANGE,
       "copy: dst range (offset 1, size 100) is outside the host buffer of 100 bytes"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    int ends = refused[i].ends;
    c = copy_args();
    c.size = refused[i].size;
    c.dst_buffer = ends & DB ? b : NULL;
    c.dst_ptr = ends & DP ? back : NULL;
    c.dst_host = ends & DH ? hb : NULL;
    c.dst_offset = refused[i].dst_offset;
    c.src_buffer = ends & SB ? b : NULL;
    c.src_ptr = ends & SP ? tmp : NULL;
    c.src_offset = refused[i].src_offset;
    msg_is(refused[i].name, api->copy(rt, &c), refused[i].code, "%s", refused[i].want);
  }

  /* What works. */
  c = copy_args();
  c.size = 0;
  c.dst_buffer = b;
  c.src_ptr = tmp;
  ok("copy: size 0 is a no-op", api->copy(rt, &c));
  ok("copy: upload 100 bytes", upload_on(rt, NULL, b, tmp, 100));
  memset(back, 0, sizeof back);
  ok("copy: download 100 bytes", download_on(rt, NULL, back, b, 100));
  result(memcmp(tmp, back, 100) == 0, "copy: round trip");
  c = copy_args();
  c.flags = 0;
  c.stream = s;
  c.size = 60;
  c.dst_host = hb;
  c.dst_offset = 40;
  c.src_buffer = b;
  c.src_offset = 10;
  ok("copy: asynchronous into a host buffer at an offset", api->copy(rt, &c));
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  result(memcmp((unsigned char *)hp + 40, tmp + 10, 60) == 0, "copy: offsets apply to both ends");

  ok("host_free", api->host_free(rt, hb));
  ok("stream_destroy", api->stream_destroy(rt, s));
  ok("buffer_free", api->buffer_free(rt, b));
}

/* ---- memset ----------------------------------------------------------------------- */

static void memset_checks(gpurt_runtime *rt) {
  gpurt_buffer *b = alloc(rt, 100);
  gpurt_memset_args m;
  unsigned char back[100];

  msg_is("memset: NULL args", api->memset(rt, NULL), GPURT_ERR_INVALID_ARGUMENT,
         "memset: args is NULL");
  m = memset_args(b, 0, 4, 0, 1);
  m.struct_size = 0;
  msg_is("memset: args struct_size 0", api->memset(rt, &m), GPURT_ERR_INVALID_ARGUMENT,
         "memset: args has struct_size 0, below 8");

  /* What a memset is refused for, in csrc's words (settled rule 2: a
   * value wider than its element is refused), then what works (code 0),
   * each pattern read back below. */
  static const struct {
    const char *name;
    uint64_t offset, size;
    uint32_t value, element_size;
    int32_t code;
    const char *want;
  } cases[] = {
      {"memset: element_size 3", 0, 6, 0, 3, GPURT_ERR_INVALID_ARGUMENT,
       "memset: element_size is 3 (must be 1, 2 or 4)"},
      {"memset: offset not a multiple", 2, 8, 0, 4, GPURT_ERR_INVALID_ARGUMENT,
       "memset: offset 2 and size 8 must be multiples of element_size 4"},
      {"memset: value 0x1ff in 1 byte is refused", 0, 4, 0x1ff, 1, GPURT_ERR_INVALID_ARGUMENT,
       "memset: value 0x1ff does not fit in element_size 1"},
      {"memset: value 0x10000 in 2 bytes is refused", 0, 4, 0x10000, 2, GPURT_ERR_INVALID_ARGUMENT,
       "memset: value 0x10000 does not fit in element_size 2"},
      {"memset: range past the buffer", 96, 8, 0, 4, GPURT_ERR_OUT_OF_RANGE,
       "memset: range (offset 96, size 8) is outside the buffer of 100 bytes"},
      {"memset: size 0 at an offset past the buffer", 104, 0, 0, 4, GPURT_ERR_OUT_OF_RANGE,
       "memset: range (offset 104, size 0) is outside the buffer of 100 bytes"},
      {"memset: 0xff in 1 byte", 0, 100, 0xff, 1, GPURT_OK, NULL},
      {"memset: 0xbeef in 2 bytes at offset 4", 4, 8, 0xBEEF, 2, GPURT_OK, NULL},
      {"memset: 4 bytes at the end", 96, 4, 0x11223344, 4, GPURT_OK, NULL},
      {"memset: size 0 at the end is a no-op", 100, 0, 0, 1, GPURT_OK, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    m = memset_args(b, cases[i].offset, cases[i].size, cases[i].value, cases[i].element_size);
    if (cases[i].code == GPURT_OK) ok(cases[i].name, api->memset(rt, &m));
    else msg_is(cases[i].name, api->memset(rt, &m), cases[i].code, "%s", cases[i].want);
  }
  ok("copy: download", download_on(rt, NULL, back, b, 100));
  result(back[0] == 0xff && back[3] == 0xff && back[4] == 0xEF && back[5] == 0xBE &&
             back[10] == 0xEF && back[11] == 0xBE && back[12] == 0xff && back[96] == 0x44 &&
             back[99] == 0x11,
         "memset: the patterns landed (little-endian, low element_size bytes)");
  ok("buffer_free", api->buffer_free(rt, b));
}

/* ---- launch and launch_batch -------------------------------------------------------- */

static int count_not(gpurt_runtime *rt, gpurt_buffer *b, uint32_t n, float want) {
  float *h = calloc(n, sizeof *h);
  if (h == NULL) return -1;
  char m[600];
  int bad = 0;
  if (take(download_on(rt, NULL, h, b, (uint64_t)n * 4), m, sizeof m) != GPURT_OK) bad = -1;
  for (uint32_t i = 0; bad >= 0 && i < n; i++)
    if (h[i] != want) bad++;
  free(h);
  return bad;
}

static void launch_checks(gpurt_runtime *rt) {
  const uint32_t N = 256;
  gpurt_buffer *y = alloc(rt, N * 4), *small = alloc(rt, 100), *gone = alloc(rt, 64);
  ok("buffer_free", api->buffer_free(rt, gone));
  gpurt_stream *s = NULL;
  ok("stream_create", api->stream_create(rt, 0, &s));
  gpurt_module *mod = NULL;
  gpurt_kernel *fill = NULL, *axpy = NULL;
  ok("module_load BUILTIN", load_builtin(rt, &mod));
  ok("kernel_get fill_f32", api->kernel_get(rt, mod, "fill_f32", 8, &fill));
  ok("kernel_get axpy_f32", api->kernel_get(rt, mod, "axpy_f32", 8, &axpy));
  gpurt_kernel *nope = NULL;
  code_is("kernel_get: unknown name", api->kernel_get(rt, mod, "nope_f32", 8, &nope),
          GPURT_ERR_NOT_FOUND);

  gpurt_kernel_info ki;
  ARGS_INIT(ki);
  ok("kernel_info fill_f32", api->kernel_info(rt, fill, &ki));
  result(ki.num_params == 3 && ki.param_kind[0] == GPURT_ARG_BUFFER &&
             ki.param_kind[1] == GPURT_ARG_F32 && ki.param_kind[2] == GPURT_ARG_U64 &&
             ki.param_size[0] == 8 && ki.param_size[1] == 4 && ki.param_size[2] == 8,
         "kernel_info: fill_f32 is (buffer, f32, u64) as gpurt.h says");

  gpurt_kernel_arg f[3] = {arg_buf(y, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(7.0f)),
                           arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_launch_args l = launch_args(N / 64, 64, f, 3);
  ok("launch fill_f32", api->launch(rt, s, fill, &l));
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  result(count_not(rt, y, N, 7.0f) == 0, "launch: fill_f32 wrote 7.0 everywhere");

  msg_is("launch: NULL stream", api->launch(rt, NULL, fill, &l), GPURT_ERR_INVALID_ARGUMENT,
         "launch: stream is NULL (launch needs a stream)");
  code_is("launch: made-up kernel", api->launch(rt, s, (gpurt_kernel *)(uintptr_t)0xdeadbeef, &l),
          GPURT_ERR_INVALID_HANDLE);
  msg_is("launch: NULL args", api->launch(rt, s, fill, NULL), GPURT_ERR_INVALID_ARGUMENT,
         "launch: args is NULL");
  gpurt_launch_args bad = l;
  bad.struct_size = 4;
  msg_is("launch: args struct_size 4", api->launch(rt, s, fill, &bad), GPURT_ERR_INVALID_ARGUMENT,
         "launch: args has struct_size 4, below 8");
  bad = l;
  bad.grid[1] = 0;
  msg_is("launch: grid y 0", api->launch(rt, s, fill, &bad), GPURT_ERR_INVALID_ARGUMENT,
         "launch \"fill_f32\": grid (4,0,1) and block (64,1,1) must be non-zero in every dimension");
  bad = l;
  bad.num_args = GPURT_MAX_KERNEL_PARAMS + 1;
  msg_is("launch: 33 arguments", api->launch(rt, s, fill, &bad), GPURT_ERR_INVALID_ARGUMENT,
         "launch \"fill_f32\": 33 arguments, at most 32");
  bad = l;
  bad.args = NULL;
  msg_is("launch: args NULL with num_args 3", api->launch(rt, s, fill, &bad),
         GPURT_ERR_INVALID_ARGUMENT, "launch \"fill_f32\": args is NULL with num_args 3");
  bad = l;
  bad.num_args = 2;
  msg_is("launch: 2 arguments to fill_f32", api->launch(rt, s, fill, &bad),
         GPURT_ERR_INVALID_ARGUMENT, "launch \"fill_f32\": the kernel takes 3 arguments, got 2");
  gpurt_kernel_arg fa[3];
  memcpy(fa, f, sizeof fa);
  bad = l;
  bad.args = fa;
  fa[1].kind = 99;
  msg_is("launch: unknown argument kind", api->launch(rt, s, fill, &bad), GPURT_ERR_INVALID_ARGUMENT,
         "launch \"fill_f32\": argument 1 has unknown kind 99");
  fa[1] = arg_val(GPURT_ARG_F32, 8, f32_bits(1.0f));
  msg_is("launch: f32 of size 8", api->launch(rt, s, fill, &bad), GPURT_ERR_INVALID_ARGUMENT,
         "launch \"fill_f32\": argument 1 is f32 of 4 bytes, size says 8");
  fa[1] = arg_val(GPURT_ARG_U32, 4, 1);
  msg_is("launch: u32 where the kernel wants f32", api->launch(rt, s, fill, &bad),
         GPURT_ERR_INVALID_ARGUMENT, "launch \"fill_f32\": argument 1 is u32, the kernel wants f32");
  fa[1] = f[1];
  fa[0] = arg_buf(y, 0, 0);
  fa[0].size = 4;
  msg_is("launch: buffer of size 4", api->launch(rt, s, fill, &bad), GPURT_ERR_INVALID_ARGUMENT,
         "launch \"fill_f32\": argument 0 is buffer of 8 bytes, size says 4");
  fa[0] = arg_buf(y, N * 4 - 8, 16);
  msg_is("launch: view past the buffer", api->launch(rt, s, fill, &bad), GPURT_ERR_OUT_OF_RANGE,
         "launch \"fill_f32\": argument 0: view (offset 1016, length 16) is outside the buffer "
         "of 1024 bytes");
  fa[0] = arg_buf(small, 0, 0);
  msg_is("launch: a built-in touching more than its view", api->launch(rt, s, fill, &bad),
         GPURT_ERR_OUT_OF_RANGE,
         "launch \"fill_f32\": argument 0: the kernel touches 256 elements (1024 bytes) but the view "
         "holds 100 bytes");
  fa[0] = arg_buf(gone, 0, 0);
  code_is("launch: freed buffer argument", api->launch(rt, s, fill, &bad), GPURT_ERR_INVALID_HANDLE);
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  result(count_not(rt, y, N, 7.0f) == 0, "launch: no refused launch wrote anything");

  /* launch_batch */
  uint64_t n = 99;
  ok("launch_batch: count 0 with NULL stream and items", api->launch_batch(rt, NULL, 0, NULL, &n));
  result(n == 0, "launch_batch: count 0 sets out_enqueued 0");
  gpurt_kernel_arg f9[3] = {f[0], arg_val(GPURT_ARG_F32, 4, f32_bits(9.0f)), f[2]};
  gpurt_launch_args l9 = launch_args(N / 64, 64, f9, 3), l2 = l9;
  l2.num_args = 2;
  gpurt_launch_item items[3] = {{fill, &l9}, {fill, &l2}, {fill, &l9}};
  n = 99;
  msg_is("launch_batch: NULL stream", api->launch_batch(rt, NULL, 3, items, &n),
         GPURT_ERR_INVALID_ARGUMENT, "launch_batch: stream is NULL (launch_batch needs a stream)");
  result(n == 0, "launch_batch: a refused batch sets out_enqueued 0");
  msg_is("launch_batch: NULL items", api->launch_batch(rt, s, 3, NULL, &n), GPURT_ERR_INVALID_ARGUMENT,
         "launch_batch: items is NULL with count 3");
  n = 99;
  msg_is("launch_batch: invalid item 1", api->launch_batch(rt, s, 3, items, &n),
         GPURT_ERR_INVALID_ARGUMENT,
         "launch_batch: item 1: launch \"fill_f32\": the kernel takes 3 arguments, got 2");
  result(n == 0, "launch_batch: an invalid item enqueues nothing (out_enqueued %llu)",
         (unsigned long long)n);
  items[1].args = NULL;
  msg_is("launch_batch: item 1 with NULL args", api->launch_batch(rt, s, 3, items, &n),
         GPURT_ERR_INVALID_ARGUMENT, "launch_batch: item 1: launch: args is NULL");
  items[1].args = &l9;
  items[2].kernel = NULL;
  code_is("launch_batch: item 2 with a NULL kernel", api->launch_batch(rt, s, 3, items, &n),
          GPURT_ERR_INVALID_HANDLE);
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  result(count_not(rt, y, N, 7.0f) == 0, "launch_batch: refused batches wrote nothing");
  items[2].kernel = fill;
  n = 0;
  ok("launch_batch: 3 valid items", api->launch_batch(rt, s, 3, items, &n));
  result(n == 3, "launch_batch: out_enqueued %llu", (unsigned long long)n);
  ok("launch_batch: NULL out_enqueued", api->launch_batch(rt, s, 1, items, NULL));
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  result(count_not(rt, y, N, 9.0f) == 0, "launch_batch: the items ran");

  /* A batch larger than a plugin may resolve at once: an invalid item far
   * in enqueues nothing; a valid one runs every item, in order. */
  enum { BIG = 40, PER = 6 };
  gpurt_kernel_arg ba[BIG][3];
  gpurt_launch_args bl[BIG];
  gpurt_launch_item bi[BIG];
  for (int k = 0; k < BIG; k++) {
    ba[k][0] = arg_buf(y, (uint64_t)k * PER * 4, PER * 4);
    ba[k][1] = arg_val(GPURT_ARG_F32, 4, f32_bits(11.0f));
    ba[k][2] = arg_val(GPURT_ARG_U64, 8, PER);
    bl[k] = launch_args(1, 64, ba[k], 3);
    bi[k].kernel = fill;
    bi[k].args = &bl[k];
  }
  bl[33].num_args = 2;
  n = 99;
  msg_is("launch_batch: 40 items, item 33 invalid", api->launch_batch(rt, s, BIG, bi, &n),
         GPURT_ERR_INVALID_ARGUMENT,
         "launch_batch: item 33: launch \"fill_f32\": the kernel takes 3 arguments, got 2");
  result(n == 0, "launch_batch: 40 items with an invalid one enqueue nothing (out_enqueued %llu)",
         (unsigned long long)n);
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  result(count_not(rt, y, N, 9.0f) == 0, "launch_batch: the refused batch of 40 wrote nothing");
  bl[33].num_args = 3;
  ok("launch_batch: 40 valid items", api->launch_batch(rt, s, BIG, bi, &n));
  result(n == BIG, "launch_batch: 40 items, out_enqueued %llu", (unsigned long long)n);
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  result(count_not(rt, y, BIG * PER, 11.0f) == 0, "launch_batch: the 40 items ran");
  ok("launch fill_f32 9.0", api->launch(rt, s, fill, &l9));
  ok("stream_synchronize", api->stream_synchronize(rt, s));

  /* gemm_run needs a stream too. */
  gpurt_gemm_desc d = gemm_desc_square(GPURT_DTYPE_F32, 4);
  gpurt_gemm_plan *p = NULL;
  ok("gemm_plan_create f32 4x4x4", api->gemm_plan_create(rt, 0, &d, &p));
  gpurt_gemm_run_args g = gemm_run_args(y, y, y, 1.0);
  g.b_offset = 64;
  g.d_offset = 128;
  msg_is("gemm_run: NULL stream", api->gemm_run(rt, NULL, p, &g), GPURT_ERR_INVALID_ARGUMENT,
         "gemm_run: stream is NULL (gemm_run needs a stream)");
  ok("gemm_run f32 4x4x4", api->gemm_run(rt, s, p, &g));
  ok("stream_synchronize", api->stream_synchronize(rt, s));
  ok("gemm_plan_destroy", api->gemm_plan_destroy(rt, p));
  code_is("gemm_plan_destroy: destroyed plan", api->gemm_plan_destroy(rt, p),
          GPURT_ERR_INVALID_HANDLE);
  /* flags (1.9): CONST_A is a hint a plugin accepts; a bit the header
   * does not define is refused naming the field. A plugin before 1.9 reads
   * the byte as reserved (the core sends it 0). */
  if (api->abi_minor >= 9) {
    gpurt_gemm_desc fd = gemm_desc_square(GPURT_DTYPE_F32, 4);
    fd.flags = GPURT_GEMM_FLAG_CONST_A;
    gpurt_gemm_plan *fp = NULL;
    ok("gemm_plan_create: flags CONST_A", api->gemm_plan_create(rt, 0, &fd, &fp));
    ok("gemm_run: a CONST_A plan", api->gemm_run(rt, s, fp, &g));
    ok("stream_synchronize", api->stream_synchronize(rt, s));
    ok("gemm_plan_destroy: the CONST_A plan", api->gemm_plan_destroy(rt, fp));
    fd.flags = GPURT_GEMM_FLAG_CONST_A | 0x80;
    fp = NULL;
    msg_is("gemm_plan_create: unknown flags bit", api->gemm_plan_create(rt, 0, &fd, &fp),
           GPURT_ERR_INVALID_ARGUMENT,
           "gemm_plan_create: flags 0x81 has unknown bits 0x80 (GPURT_GEMM_FLAG_CONST_A is 0x01)");
    result(fp == NULL, "gemm_plan_create: a refused descriptor gives no plan");
  } else {
    printf("skip gemm flags (1.9): the plugin speaks an older minor\n");
  }
  /* prologue (1.10): the engine's checks, then (where the backend runs
   * one: the mock any shape, CUDA one bf16 token on its GEMV) the run's
   * norm_weight and norm_eps checks and a run. */
  if (api->abi_minor >= 10) {
    gpurt_gemm_desc pd = gemm_desc_square(GPURT_DTYPE_F32, 4);
    gpurt_gemm_plan *pp = NULL;
    pd.prologue = 3;
    msg_is("gemm_plan_create: prologue 3", api->gemm_plan_create(rt, 0, &pd, &pp), GPURT_ERR_INVALID_ARGUMENT,
           "gemm_plan_create: prologue 3 is not a GPURT_GEMM_PROLOGUE_* (0 none, 1 rmsnorm, 2 swiglu)");
    pd.prologue = GPURT_GEMM_PROLOGUE_RMSNORM;
    pd.trans_b = 1;
    msg_is("gemm_plan_create: rmsnorm with trans_b", api->gemm_plan_create(rt, 0, &pd, &pp), GPURT_ERR_UNSUPPORTED,
           "gemm_plan_create: the rmsnorm prologue needs trans_b 0 (each column of B one token's k values)");
    pd.trans_b = 0;
    pd.batch_count = 2;
    pd.stride_d = 16;
    msg_is("gemm_plan_create: swiglu with a batch", (pd.prologue = GPURT_GEMM_PROLOGUE_SWIGLU,
           api->gemm_plan_create(rt, 0, &pd, &pp)), GPURT_ERR_UNSUPPORTED,
           "gemm_plan_create: the swiglu prologue needs batch_count 1 (it is 2)");
    result(pp == NULL, "gemm_plan_create: a refused prologue gives no plan");
    /* y = W^T x of one bf16 token: the decode shape CUDA's GEMV takes. */
    gpurt_gemm_desc nd = gemm_desc(GPURT_DTYPE_BF16, GPURT_DTYPE_BF16, 8, 1, 32, 32, 32, 8);
    nd.trans_a = 1;
    nd.align_a = nd.align_b = nd.align_c = nd.align_d = 256;
    nd.prologue = GPURT_GEMM_PROLOGUE_RMSNORM;
    char pm[600];
    const int pc = take(api->gemm_plan_create(rt, 0, &nd, &pp), pm, sizeof pm);
    if (pc == GPURT_ERR_UNSUPPORTED) {
      printf("skip gemm prologue runs: the plugin refuses the rmsnorm prologue (%s)\n", pm);
    } else {
      result(pc == GPURT_OK, "gemm_plan_create: rmsnorm, one bf16 token%s%s", pc ? ": " : "", pm);
      gpurt_gemm_run_args pg = gemm_run_args(y, y, y, 1.0);
      pg.b_offset = 512; /* y: A (512 bytes), B, the norm weight, D */
      pg.d_offset = 768;
      msg_is("gemm_run: rmsnorm without norm_weight", api->gemm_run(rt, s, pp, &pg), GPURT_ERR_INVALID_ARGUMENT,
             "gemm_run: the plan's rmsnorm prologue needs norm_weight (k = 32 elements of bf16) but it is NULL");
      pg.norm_weight = y;
      pg.norm_weight_offset = 640;
      pg.norm_eps = -1;
      msg_is("gemm_run: a negative norm_eps", api->gemm_run(rt, s, pp, &pg), GPURT_ERR_INVALID_ARGUMENT,
             "gemm_run: norm_eps -1 is not a finite f32 value >= 0");
      pg.norm_eps = 1e-5;
      pg.norm_weight_offset = 648;
      msg_is("gemm_run: a norm_weight off 16 bytes", api->gemm_run(rt, s, pp, &pg), GPURT_ERR_INVALID_ARGUMENT,
             "gemm_run: norm_weight_offset 648 is not a multiple of 16 (the norm weight must be 16-byte aligned)");
      pg.norm_weight_offset = 640;
      ok("gemm_run: rmsnorm, one bf16 token", api->gemm_run(rt, s, pp, &pg));
      ok("stream_synchronize", api->stream_synchronize(rt, s));
      ok("gemm_plan_destroy: the rmsnorm plan", api->gemm_plan_destroy(rt, pp));
    }
    /* norm_weight and norm_eps belong to the rmsnorm prologue alone. */
    gpurt_gemm_plan *np = NULL;
    ok("gemm_plan_create f32 4x4x4 (no prologue)", api->gemm_plan_create(rt, 0, &d, &np));
    g.norm_eps = 1e-5;
    msg_is("gemm_run: norm_eps without the prologue", api->gemm_run(rt, s, np, &g), GPURT_ERR_INVALID_ARGUMENT,
           "gemm_run: norm_eps is set but the plan has no rmsnorm prologue");
    g.norm_eps = 0;
    g.norm_weight = y;
    msg_is("gemm_run: norm_weight without the prologue", api->gemm_run(rt, s, np, &g), GPURT_ERR_INVALID_ARGUMENT,
           "gemm_run: norm_weight is set but the plan has no rmsnorm prologue");
    g.norm_weight = NULL;
    ok("gemm_plan_destroy", api->gemm_plan_destroy(rt, np));
  } else {
    printf("skip gemm prologues (1.10): the plugin speaks an older minor\n");
  }

  ok("module_unload", api->module_unload(rt, mod));
  ok("stream_destroy", api->stream_destroy(rt, s));
  ok("buffer_free", api->buffer_free(rt, small));
  ok("buffer_free", api->buffer_free(rt, y));
}

/* ---- later minors: the slots' shared prologue, where the plugin has them ---- */

static void skip(const char *what) { printf("skip %s\n", what); }

/* Collectives (1.6): csrc/gp_comm.c's checks, before any vendor library
 * is needed. A plugin whose comm_create answers UNSUPPORTED (Metal; CUDA
 * without NCCL for a real communicator) skips what needs one. */
static void comm_checks(gpurt_runtime *rt, gpurt_stream *s) {
  if (!(GPURT_API_HAS(api, comm_unique_id) && GPURT_API_HAS(api, comm_create) &&
        GPURT_API_HAS(api, comm_destroy) && GPURT_API_HAS(api, comm_abort) &&
        GPURT_API_HAS(api, comm_query) && GPURT_API_HAS(api, comm_run))) {
    skip("collectives (1.6): the plugin has no comm slots");
    return;
  }
  uint32_t ndev = 0;
  ok("device_count", api->device_count(rt, &ndev));
  gpurt_comm *c = NULL;
  uint32_t devs[2] = {0, 0};
  gpurt_comm_create_args ca;
  ARGS_INIT(ca);
  ca.devices = devs;
  char m[600];
  int code = take(api->comm_create(rt, &ca, &c), m, sizeof m);
  if (code == GPURT_ERR_UNSUPPORTED) {
    skip("collectives (1.6): comm_create is unsupported here");
    return;
  }
  result(code == GPURT_ERR_INVALID_ARGUMENT &&
             strstr(m, "comm_create: device_count is 0 (a handle has >= 1 local rank)") != NULL,
         "comm_create: device_count 0: %s", m);
  msg_is("comm_create: NULL args", api->comm_create(rt, NULL, &c), GPURT_ERR_INVALID_ARGUMENT,
         "comm_create: args is NULL");
  ca.device_count = 1;
  msg_is("comm_create: NULL out", api->comm_create(rt, &ca, NULL), GPURT_ERR_INVALID_ARGUMENT,
         "comm_create: out is NULL");
  devs[0] = ndev;
  msg_is("comm_create: device out of range", api->comm_create(rt, &ca, &c), GPURT_ERR_INVALID_ARGUMENT,
         "comm_create: devices[0] is %u but the runtime has %u device(s)", ndev, ndev);
  devs[0] = 0;
  ca.device_count = 2;
  msg_is("comm_create: a device twice", api->comm_create(rt, &ca, &c), GPURT_ERR_INVALID_ARGUMENT,
         "comm_create: devices[0] and devices[1] are both device 0 (one rank per device)");
  ca.device_count = 1;
  ca.nranks = 2;
  msg_is("comm_create: no unique id", api->comm_create(rt, &ca, &c), GPURT_ERR_INVALID_ARGUMENT,
         "comm_create: unique_id is NULL with nranks 2 (pass the id from comm_unique_id)");
  ca.nranks = 0;
  ca.first_rank = 1;
  msg_is("comm_create: first_rank without nranks", api->comm_create(rt, &ca, &c), GPURT_ERR_INVALID_ARGUMENT,
         "comm_create: first_rank is 1 with nranks 0 (every rank is local; it must be 0)");
  ca.first_rank = 0;
  ok("comm_destroy(rt, NULL)", api->comm_destroy(rt, NULL));
  gpurt_comm *fake = (gpurt_comm *)(uintptr_t)0xdeadbeef;
  code_is("comm_destroy: made-up comm", api->comm_destroy(rt, fake), GPURT_ERR_INVALID_HANDLE);
  code_is("comm_abort: made-up comm", api->comm_abort(rt, fake), GPURT_ERR_INVALID_HANDLE);
  code_is("comm_query: made-up comm", api->comm_query(rt, fake), GPURT_ERR_INVALID_HANDLE);
  gpurt_comm_run_args ra;
  ARGS_INIT(ra);
  code_is("comm_run: made-up comm", api->comm_run(rt, fake, &ra), GPURT_ERR_INVALID_HANDLE);
  /* A real one-rank communicator for the run checks. */
  code = take(api->comm_create(rt, &ca, &c), m, sizeof m);
  if (code == GPURT_ERR_UNSUPPORTED) {
    skip("collectives (1.6): no one-rank communicator here (the vendor library is missing)");
    return;
  }
  result(code == GPURT_OK, "comm_create: one rank on device 0%s%s", code ? ": " : "", m);
  if (code != GPURT_OK) return;
  msg_is("comm_run: NULL args", api->comm_run(rt, c, NULL), GPURT_ERR_INVALID_ARGUMENT, "comm_run: args is NULL");
  msg_is("comm_run: count 0", api->comm_run(rt, c, &ra), GPURT_ERR_INVALID_ARGUMENT,
         "comm_run: count is 0 (a group has >= 1 op)");
  gpurt_coll_op op;
  ARGS_INIT(op);
  op.kind = GPURT_COLL_ALL_REDUCE;
  op.dtype = GPURT_DTYPE_F32;
  ra.count = 1;
  ra.ops = &op;
  ra.op_size = 4;
  msg_is("comm_run: op_size 4", api->comm_run(rt, c, &ra), GPURT_ERR_INVALID_ARGUMENT,
         "comm_run: op_size is 4, below 8");
  ra.op_size = sizeof op;
  msg_is("comm_run: NULL stream", api->comm_run(rt, c, &ra), GPURT_ERR_INVALID_ARGUMENT,
         "comm_run: op 0: stream is NULL (every op needs its rank's stream)");
  op.stream = s;
  op.rank = 1;
  msg_is("comm_run: foreign rank", api->comm_run(rt, c, &ra), GPURT_ERR_INVALID_ARGUMENT,
         "comm_run: op 0: rank 1 is not one of this handle's ranks (0..0 of 1)");
  op.rank = 0;
  op.dtype = GPURT_DTYPE_I32;
  msg_is("comm_run: all_reduce of i32", api->comm_run(rt, c, &ra), GPURT_ERR_UNSUPPORTED,
         "comm_run: op 0: all_reduce of dtype i32 is not supported (f32, f16, bf16)");
  op.dtype = GPURT_DTYPE_F32;
  op.count = 4;
  msg_is("comm_run: no send buffer", api->comm_run(rt, c, &ra), GPURT_ERR_INVALID_ARGUMENT,
         "comm_run: op 0: all_reduce needs a send buffer (send is NULL)");
  ok("comm_query: healthy", api->comm_query(rt, c));
  ok("comm_destroy", api->comm_destroy(rt, c));
  code_is("comm_query: destroyed comm", api->comm_query(rt, c), GPURT_ERR_INVALID_HANDLE);
}

/* ---- 1.7: CALL items (a recorded call of any recordable slot) --------------- */

/* A deterministic f16 in about [-1, 1): sign, exponent 13..14, mantissa. */
static uint16_t rnd_f16(uint64_t *st) {
  *st = *st * 6364136223846793005ull + 1442695040888963407ull;
  uint32_t r = (uint32_t)(*st >> 33);
  return (uint16_t)(((r & 1u) << 15) | ((13u + ((r >> 1) & 1u)) << 10) | ((r >> 2) & 0x3ffu));
}

static gpurt_buffer *alloc_f16(gpurt_runtime *rt, uint64_t n, uint64_t *st) {
  uint16_t *h = malloc(n * 2);
  gpurt_buffer *b = alloc(rt, n * 2);
  if (h == NULL || b == NULL) {
    free(h);
    return b;
  }
  for (uint64_t i = 0; i < n; i++) h[i] = rnd_f16(st);
  ok("call: upload", upload_on(rt, NULL, b, h, n * 2));
  free(h);
  return b;
}

/* A paged cache's buffers (offsets 0). */
static gpurt_kv_pages kv_pages(gpurt_buffer *k, gpurt_buffer *v, uint64_t npages, gpurt_buffer *indptr,
                               gpurt_buffer *indices, gpurt_buffer *last) {
  gpurt_kv_pages p = {.k = k, .v = v, .num_pages = npages, .indptr = indptr, .indices = indices,
                      .last_page_len = last};
  return p;
}

/* Runs one graph of a single CALL item on s and waits for it. */
static gpurt_error *replay_call(gpurt_runtime *rt, gpurt_stream *s, uint64_t slot, void *object,
                                const void *args) {
  gpurt_graph_item it = call_item(slot, object, args);
  gpurt_graph_create_args ga = graph_args(&it, 1);
  gpurt_graph *g = NULL;
  gpurt_error *e = api->graph_create(rt, &ga, &g);
  if (e) return e;
  if ((e = api->graph_launch(rt, g, s)) == NULL) e = api->stream_synchronize(rt, s);
  gpurt_error *d = api->graph_destroy(rt, g);
  if (e) {
    if (d) api->error_destroy(d);
    return e;
  }
  return d;
}

/* The eager result of `bytes` at out, then the replayed one, compared
 * byte for byte (the same plugin, the same inputs). */
static void same_bytes(const char *name, gpurt_runtime *rt, gpurt_buffer *out, uint64_t bytes,
                       const unsigned char *eager) {
  unsigned char *got = malloc(bytes);
  if (got == NULL) return;
  ok("call: download", download_on(rt, NULL, got, out, bytes));
  uint64_t diff = 0;
  for (uint64_t i = 0; i < bytes; i++) diff += got[i] != eager[i];
  result(diff == 0, "%s: the replayed call wrote the eager call's bytes (%llu of %llu differ)", name,
         (unsigned long long)diff, (unsigned long long)bytes);
  free(got);
}

static void call_quant(gpurt_runtime *rt, gpurt_stream *s) {
  const uint64_t m = 64, n = 2, k = 128, gs = 64;
  uint64_t st = 7;
  gpurt_buffer *w = alloc(rt, m * k), *sc = alloc_f16(rt, m * k / gs, &st), *bi = alloc_f16(rt, m * k / gs, &st);
  gpurt_buffer *x = alloc_f16(rt, n * k, &st), *y = alloc(rt, n * m * 2);
  unsigned char *wh = malloc(m * k), *eager = malloc(n * m * 2);
  if (!w || !sc || !bi || !x || !y || !wh || !eager) {
    result(0, "call: quant_matmul: setup");
    goto out;
  }
  for (uint64_t i = 0; i < m * k; i++) wh[i] = (unsigned char)(i * 37u + 11u);
  ok("call: upload w", upload_on(rt, NULL, w, wh, m * k));
  gpurt_quant_matmul_args q = {.struct_size = sizeof q, .x_type = GPURT_DTYPE_F16, .scale_type = GPURT_DTYPE_F16,
                               .bits = 8, .group_size = (uint32_t)gs, .m = m, .n = n, .k = k,
                               .w = w, .scales = sc, .biases = bi, .x = x, .y = y};
  ok("call: quant_matmul eager", api->quant_matmul(rt, s, &q));
  ok("call: quant_matmul eager sync", api->stream_synchronize(rt, s));
  ok("call: download eager", download_on(rt, NULL, eager, y, n * m * 2));
  gpurt_memset_args z = memset_args(y, 0, n * m * 2, 0, 1);
  ok("call: clear y", api->memset(rt, &z));
  ok("call: quant_matmul recorded", replay_call(rt, s, offsetof(gpurt_api, quant_matmul), NULL, &q));
  same_bytes("call: quant_matmul", rt, y, n * m * 2, eager);
  msg_is("call: quant_matmul with an object", replay_call(rt, s, offsetof(gpurt_api, quant_matmul), (void *)w, &q),
         GPURT_ERR_INVALID_ARGUMENT, "graph_create: item 0: call: object is %#llx but quant_matmul takes no handle",
         (unsigned long long)(uintptr_t)w);
  q.k = 100; /* not a multiple of group_size: the eager check's message */
  char want[300];
  gpurt_error *ee = api->quant_matmul(rt, s, &q);
  char em[600];
  int ec = take(ee, em, sizeof em);
  snprintf(want, sizeof want, "graph_create: item 0: %s", em + strlen(prefix));
  msg_is("call: quant_matmul bad k: the eager message, item-prefixed",
         replay_call(rt, s, offsetof(gpurt_api, quant_matmul), NULL, &q), ec, "%s", want);
out:
  free(wh);
  free(eager);
  gpurt_buffer *bs[] = {w, sc, bi, x, y};
  for (size_t i = 0; i < 5; i++)
    if (bs[i]) ok("call: buffer_free", api->buffer_free(rt, bs[i]));
}

static void call_attention(gpurt_runtime *rt, gpurt_stream *s) {
  const uint32_t D = 128, Hk = 2, Hq = 4, ps = 16, batch = 2, npages = 8;
  const int32_t kv_indptr[3] = {0, 2, 5}, last[2] = {4, 1}, indices[5] = {3, 0, 7, 1, 5};
  uint64_t st = 11, page = (uint64_t)ps * Hk * D, rows = (uint64_t)batch * Hq * D;
  gpurt_buffer *k = alloc_f16(rt, npages * page, &st), *v = alloc_f16(rt, npages * page, &st);
  gpurt_buffer *q = alloc_f16(rt, rows, &st), *o = alloc(rt, rows * 2);
  gpurt_buffer *ip = alloc(rt, sizeof kv_indptr), *ix = alloc(rt, sizeof indices), *lp = alloc(rt, sizeof last);
  unsigned char *eager = malloc(rows * 2);
  gpurt_attention *at = NULL;
  if (!k || !v || !q || !o || !ip || !ix || !lp || !eager) {
    result(0, "call: attention_run: setup");
    goto out;
  }
  ok("call: upload indptr", upload_on(rt, NULL, ip, kv_indptr, sizeof kv_indptr));
  ok("call: upload indices", upload_on(rt, NULL, ix, indices, sizeof indices));
  ok("call: upload last", upload_on(rt, NULL, lp, last, sizeof last));
  gpurt_attention_desc d;
  ARGS_INIT(d);
  d.kind = GPURT_ATTENTION_DECODE;
  d.num_qo_heads = Hq;
  d.layout = (gpurt_kv_layout){GPURT_DTYPE_F16, GPURT_KV_LAYOUT_NHD, ps, Hk, D, 0};
  d.max_batch_size = batch;
  ok("call: attention_create", api->attention_create(rt, 0, &d, &at));
  gpurt_attention_plan_args pa;
  ARGS_INIT(pa);
  pa.batch_size = batch;
  pa.kv_indptr = kv_indptr;
  pa.kv_last_page_len = last;
  gpurt_attention_run_args ra;
  ARGS_INIT(ra);
  ra.q = q;
  ra.o = o;
  ra.pages = kv_pages(k, v, npages, ip, ix, lp);
  code_is("call: attention_run before any plan", replay_call(rt, s, offsetof(gpurt_api, attention_run), at, &ra),
          GPURT_ERR_FAILED_PRECONDITION);
  ok("call: attention_plan", api->attention_plan(rt, s, at, &pa));
  ok("call: attention_run eager", api->attention_run(rt, s, at, &ra));
  ok("call: attention_run eager sync", api->stream_synchronize(rt, s));
  ok("call: download eager", download_on(rt, NULL, eager, o, rows * 2));
  gpurt_memset_args z = memset_args(o, 0, rows * 2, 0, 1);
  ok("call: clear o", api->memset(rt, &z));
  ok("call: attention_run recorded", replay_call(rt, s, offsetof(gpurt_api, attention_run), at, &ra));
  same_bytes("call: attention_run", rt, o, rows * 2, eager);
  msg_is("call: attention_run without its object", replay_call(rt, s, offsetof(gpurt_api, attention_run), NULL, &ra),
         GPURT_ERR_INVALID_ARGUMENT, "graph_create: item 0: call: object is NULL (attention_run takes a handle)");
out:
  if (at) ok("call: attention_destroy", api->attention_destroy(rt, at));
  free(eager);
  gpurt_buffer *bs[] = {k, v, q, o, ip, ix, lp};
  for (size_t i = 0; i < 7; i++)
    if (bs[i]) ok("call: buffer_free", api->buffer_free(rt, bs[i]));
}

static void call_kv_append(gpurt_runtime *rt, gpurt_stream *s) {
  const uint32_t D = 64, ps = 16, npages = 4, batch = 2;
  const int32_t indptr[3] = {0, 1, 2}, indices[2] = {2, 0}, last[2] = {3, 5}, meta[6] = {0, 0, 1, 0, 2, 4};
  const uint64_t nnz = 3, kv = (uint64_t)npages * ps * D * 2, rows = nnz * D;
  uint64_t st = 5;
  gpurt_buffer *k = alloc(rt, kv), *v = alloc(rt, kv), *kr = alloc_f16(rt, rows, &st), *vr = alloc_f16(rt, rows, &st);
  gpurt_buffer *ip = alloc(rt, sizeof indptr), *ix = alloc(rt, sizeof indices), *lp = alloc(rt, sizeof last);
  gpurt_buffer *mb = alloc(rt, sizeof meta);
  unsigned char *ek = malloc(kv), *ev = malloc(kv);
  if (!k || !v || !kr || !vr || !ip || !ix || !lp || !mb || !ek || !ev) {
    result(0, "call: kv_append: setup");
    goto out;
  }
  ok("call: upload indptr", upload_on(rt, NULL, ip, indptr, sizeof indptr));
  ok("call: upload indices", upload_on(rt, NULL, ix, indices, sizeof indices));
  ok("call: upload last", upload_on(rt, NULL, lp, last, sizeof last));
  ok("call: upload rows' batch indices and positions", upload_on(rt, NULL, mb, meta, sizeof meta));
  gpurt_memset_args zk = memset_args(k, 0, kv, 0, 1), zv = memset_args(v, 0, kv, 0, 1);
  ok("call: clear k", api->memset(rt, &zk));
  ok("call: clear v", api->memset(rt, &zv));
  gpurt_kv_append_args a = {.struct_size = sizeof a,
                            .layout = {GPURT_DTYPE_F16, GPURT_KV_LAYOUT_NHD, ps, 1, D, 0},
                            .pages = kv_pages(k, v, npages, ip, ix, lp),
                            .batch_size = batch, .nnz = nnz, .k_rows = kr, .v_rows = vr,
                            .batch_indices = mb, .positions = mb, .positions_offset = 12};
  ok("call: kv_append eager", api->kv_append(rt, s, &a));
  ok("call: kv_append eager sync", api->stream_synchronize(rt, s));
  ok("call: download eager k", download_on(rt, NULL, ek, k, kv));
  ok("call: download eager v", download_on(rt, NULL, ev, v, kv));
  ok("call: clear k", api->memset(rt, &zk));
  ok("call: clear v", api->memset(rt, &zv));
  ok("call: kv_append recorded", replay_call(rt, s, offsetof(gpurt_api, kv_append), NULL, &a));
  same_bytes("call: kv_append (K)", rt, k, kv, ek);
  same_bytes("call: kv_append (V)", rt, v, kv, ev);
out:
  free(ek);
  free(ev);
  gpurt_buffer *bs[] = {k, v, kr, vr, ip, ix, lp, mb};
  for (size_t i = 0; i < 8; i++)
    if (bs[i]) ok("call: buffer_free", api->buffer_free(rt, bs[i]));
}

static void call_checks(gpurt_runtime *rt, gpurt_stream *s) {
  if (!GPURT_API_HAS(api, graph_recordable) || !GPURT_API_HAS(api, graph_create)) {
    skip("graph CALL items (1.7): the plugin has no graph_recordable slot");
    return;
  }
  msg_is("graph_recordable: NULL out", api->graph_recordable(rt, offsetof(gpurt_api, launch), NULL),
         GPURT_ERR_INVALID_ARGUMENT, "graph_recordable: out is NULL");
  uint8_t r = 9;
  ok("graph_recordable(launch)", api->graph_recordable(rt, offsetof(gpurt_api, launch), &r));
  result(r == 1, "graph_recordable(launch) is 1 (got %u)", r);
  r = 9;
  ok("graph_recordable(offset 3)", api->graph_recordable(rt, 3, &r));
  result(r == 0, "graph_recordable(offset 3) is 0 (got %u)", r);
  gpurt_quant_matmul_args q;
  ARGS_INIT(q);
  msg_is("call: unknown slot", replay_call(rt, s, 3, NULL, &q), GPURT_ERR_UNSUPPORTED,
         "graph_create: item 0: call: the slot at offset 3 of gpurt_api is not one a graph records");
  msg_is("call: NULL args", replay_call(rt, s, offsetof(gpurt_api, quant_matmul), NULL, NULL),
         GPURT_ERR_INVALID_ARGUMENT, "graph_create: item 0: call: args is NULL (quant_matmul needs its argument struct)");
  struct {
    uint64_t slot;
    const char *name;
    void (*run)(gpurt_runtime *, gpurt_stream *);
  } ops[] = {{offsetof(gpurt_api, quant_matmul), "quant_matmul", call_quant},
             {offsetof(gpurt_api, attention_run), "attention_run", call_attention},
             {offsetof(gpurt_api, kv_append), "kv_append", call_kv_append}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    r = 0;
    ok("graph_recordable", api->graph_recordable(rt, ops[i].slot, &r));
    if (r) ops[i].run(rt, s);
    else printf("skip call: %s: graph_recordable says 0\n", ops[i].name);
  }
}

/* The slots of ops on a stream with an argument struct, called through
 * one signature. */
typedef gpurt_error *(*op_slot)(gpurt_runtime *rt, gpurt_stream *s, void *args);
static gpurt_error *slot_quant_matmul(gpurt_runtime *rt, gpurt_stream *s, void *a) {
  return api->quant_matmul(rt, s, a);
}
static gpurt_error *slot_grouped_gemm(gpurt_runtime *rt, gpurt_stream *s, void *a) {
  return api->grouped_gemm(rt, s, a);
}
static gpurt_error *slot_kv_append(gpurt_runtime *rt, gpurt_stream *s, void *a) {
  return api->kv_append(rt, s, a);
}

/* csrc's prologue of such an op, in its words: a NULL stream (with a
 * zeroed args struct of `size` bytes), NULL args, then struct_size 0. */
static void op_prologue(gpurt_runtime *rt, gpurt_stream *s, const char *op, op_slot call, uint64_t size) {
  union {
    gpurt_quant_matmul_args q;
    gpurt_grouped_gemm_args g;
    gpurt_kv_append_args k;
  } args;
  memset(&args, 0, sizeof args);
  args.q.struct_size = size; /* the first field of each */
  char name[80];
  snprintf(name, sizeof name, "%s: NULL stream", op);
  msg_is(name, call(rt, NULL, &args), GPURT_ERR_INVALID_ARGUMENT, "%s: stream is NULL (%s needs a stream)", op, op);
  snprintf(name, sizeof name, "%s: NULL args", op);
  msg_is(name, call(rt, s, NULL), GPURT_ERR_INVALID_ARGUMENT, "%s: args is NULL", op);
  args.q.struct_size = 0;
  snprintf(name, sizeof name, "%s: args struct_size 0", op);
  msg_is(name, call(rt, s, &args), GPURT_ERR_INVALID_ARGUMENT, "%s: args has struct_size 0, below 8", op);
}

static void minor_checks(gpurt_runtime *rt) {
  gpurt_stream *s = NULL;
  ok("stream_create", api->stream_create(rt, 0, &s));
  if (GPURT_API_HAS(api, graph_destroy) && GPURT_API_HAS(api, graph_create) &&
      GPURT_API_HAS(api, graph_launch)) {
    ok("graph_destroy(rt, NULL)", api->graph_destroy(rt, NULL));
    code_is("graph_destroy: made-up graph", api->graph_destroy(rt, (gpurt_graph *)(uintptr_t)0xdeadbeef),
            GPURT_ERR_INVALID_HANDLE);
    code_is("graph_launch: made-up graph", api->graph_launch(rt, (gpurt_graph *)(uintptr_t)0xdeadbeef, s),
            GPURT_ERR_INVALID_HANDLE);
    gpurt_graph *g = NULL;
    code_is("graph_create: NULL args", api->graph_create(rt, NULL, &g), GPURT_ERR_INVALID_ARGUMENT);
  } else {
    skip("graphs (1.3): the plugin has no graph slots");
  }
  const struct {
    const char *op;
    int has;
    op_slot call;
    uint64_t size;
  } ops14[] = {
      {"quant_matmul", GPURT_API_HAS(api, quant_matmul), slot_quant_matmul, sizeof(gpurt_quant_matmul_args)},
      {"grouped_gemm", GPURT_API_HAS(api, grouped_gemm), slot_grouped_gemm, sizeof(gpurt_grouped_gemm_args)},
  };
  for (size_t i = 0; i < sizeof ops14 / sizeof ops14[0]; i++) {
    if (ops14[i].has) {
      op_prologue(rt, s, ops14[i].op, ops14[i].call, ops14[i].size);
    } else {
      char why[80];
      snprintf(why, sizeof why, "%s (1.4): the plugin has no such slot", ops14[i].op);
      skip(why);
    }
  }
  if (GPURT_API_HAS(api, grouped_gemm) && api->abi_minor >= 11) { /* row counts on the device: csrc's checks */
    gpurt_buffer *fake = (gpurt_buffer *)(uintptr_t)0xdeadbeef;
    uint64_t ms[2] = {1, 2};
    gpurt_grouped_gemm_args g;
    ARGS_INIT(g);
    g.ab_type = g.d_type = GPURT_DTYPE_BF16;
    g.group_count = 2, g.n = 8, g.k = 64;
    g.a = g.b = g.d = fake;
    g.m_sizes = ms;
    g.m_counts = fake;
    msg_is("grouped_gemm: m_sizes and m_counts", api->grouped_gemm(rt, s, &g), GPURT_ERR_INVALID_ARGUMENT,
           "grouped_gemm: m_sizes and m_counts are both set (the row counts come from one of them: host or device)");
    g.m_counts = NULL;
    g.max_m = 5;
    msg_is("grouped_gemm: max_m without m_counts", api->grouped_gemm(rt, s, &g), GPURT_ERR_INVALID_ARGUMENT,
           "grouped_gemm: max_m is 5 without m_counts (it bounds the rows of device counts; 0 with m_sizes)");
    g.m_sizes = NULL;
    g.m_counts = fake;
    g.max_m = 0;
    msg_is("grouped_gemm: m_counts without max_m", api->grouped_gemm(rt, s, &g), GPURT_ERR_INVALID_ARGUMENT,
           "grouped_gemm: max_m is 0 with m_counts (must be >= 1: the rows A and D hold)");
    g.max_m = 1ull << 32;
    msg_is("grouped_gemm: max_m 2^32", api->grouped_gemm(rt, s, &g), GPURT_ERR_UNSUPPORTED,
           "grouped_gemm: max_m 4294967296 must be below 2^32");
    g.max_m = 5;
    g.m_counts_offset = 2;
    msg_is("grouped_gemm: m_counts misaligned", api->grouped_gemm(rt, s, &g), GPURT_ERR_INVALID_ARGUMENT,
           "grouped_gemm: m_counts_offset 2 is not a multiple of 4 (m_counts must be 4-byte aligned)");
  } else {
    skip("grouped_gemm's row counts on the device (1.11): the plugin speaks an older minor or has no slot");
  }
  if (GPURT_API_HAS(api, kv_append) && GPURT_API_HAS(api, attention_create) &&
      GPURT_API_HAS(api, attention_destroy) && GPURT_API_HAS(api, attention_plan) &&
      GPURT_API_HAS(api, attention_run)) {
    op_prologue(rt, s, "kv_append", slot_kv_append, sizeof(gpurt_kv_append_args));
    gpurt_attention *at = NULL;
    msg_is("attention_create: NULL desc", api->attention_create(rt, 0, NULL, &at), GPURT_ERR_INVALID_ARGUMENT,
           "attention_create: desc is NULL");
    ok("attention_destroy(rt, NULL)", api->attention_destroy(rt, NULL));
    gpurt_attention *fake = (gpurt_attention *)(uintptr_t)0xdeadbeef;
    code_is("attention_destroy: made-up attention", api->attention_destroy(rt, fake), GPURT_ERR_INVALID_HANDLE);
    gpurt_attention_plan_args pa;
    ARGS_INIT(pa);
    msg_is("attention_plan: NULL stream", api->attention_plan(rt, NULL, fake, &pa), GPURT_ERR_INVALID_ARGUMENT,
           "attention_plan: stream is NULL (attention_plan needs a stream)");
    code_is("attention_plan: made-up attention", api->attention_plan(rt, s, fake, &pa), GPURT_ERR_INVALID_HANDLE);
    gpurt_attention_run_args ra;
    ARGS_INIT(ra);
    code_is("attention_run: made-up attention", api->attention_run(rt, s, fake, &ra), GPURT_ERR_INVALID_HANDLE);
    if (api->abi_minor >= 8) { /* fp8 KV caches: csrc's layout and scale checks */
      gpurt_attention_desc d;
      ARGS_INIT(d);
      d.kind = GPURT_ATTENTION_DECODE;
      d.num_qo_heads = 2;
      d.layout = (gpurt_kv_layout){GPURT_DTYPE_FP8_E4M3, GPURT_KV_LAYOUT_NHD, 16, 2, 128, 0};
      d.max_batch_size = 1;
      msg_is("attention_create: fp8 cache without qo_dtype", api->attention_create(rt, 0, &d, &at),
             GPURT_ERR_INVALID_ARGUMENT,
             "attention_create: layout.qo_dtype invalid (0) must be f16 or bf16 for an fp8_e4m3 cache (the "
             "queries', outputs' and appended rows' type)");
      d.layout.dtype = GPURT_DTYPE_BF16;
      d.layout.qo_dtype = GPURT_DTYPE_F16;
      msg_is("attention_create: qo_dtype on a bf16 cache", api->attention_create(rt, 0, &d, &at),
             GPURT_ERR_INVALID_ARGUMENT,
             "attention_create: layout.qo_dtype is 2 (must be 0 for a bf16 cache: its queries are bf16)");
      gpurt_kv_append_args ka;
      ARGS_INIT(ka);
      ka.layout = (gpurt_kv_layout){GPURT_DTYPE_FP8_E4M3, GPURT_KV_LAYOUT_NHD, 16, 2, 128, GPURT_DTYPE_BF16};
      ka.batch_size = 1;
      ka.k_scale = 0.5f;
      msg_is("kv_append: fp8 cache with v_scale 0", api->kv_append(rt, s, &ka), GPURT_ERR_INVALID_ARGUMENT,
             "kv_append: k_scale 0.5 and v_scale 0 of an fp8_e4m3 cache must be positive and finite");
    } else {
      skip("fp8 KV caches (1.8): the plugin speaks an older minor");
    }
    if (api->abi_minor >= 10) { /* kv_append's rotary embedding: csrc's checks */
      gpurt_kv_append_args ka;
      ARGS_INIT(ka);
      ka.layout = (gpurt_kv_layout){GPURT_DTYPE_BF16, GPURT_KV_LAYOUT_NHD, 16, 2, 128, 0};
      ka.batch_size = 1;
      ka.num_qo_heads = 4;
      msg_is("kv_append: num_qo_heads without inv_freq", api->kv_append(rt, s, &ka), GPURT_ERR_INVALID_ARGUMENT,
             "kv_append: num_qo_heads is set but inv_freq is NULL (q is rotated only with a rotary embedding)");
      ka.inv_freq = (gpurt_buffer *)(uintptr_t)0xdeadbeef;
      msg_is("kv_append: num_qo_heads without q", api->kv_append(rt, s, &ka), GPURT_ERR_INVALID_ARGUMENT,
             "kv_append: q is NULL but num_qo_heads is 4 (q needs num_qo_heads >= 1, no q needs 0)");
      ka.num_qo_heads = 65537;
      ka.q = (gpurt_buffer *)(uintptr_t)0xdeadbeef;
      msg_is("kv_append: num_qo_heads 65537", api->kv_append(rt, s, &ka), GPURT_ERR_INVALID_ARGUMENT,
             "kv_append: num_qo_heads 65537 exceeds 65536");
      ka.q = NULL;
      ka.reserved2 = 1;
      msg_is("kv_append: reserved2 1", api->kv_append(rt, s, &ka), GPURT_ERR_INVALID_ARGUMENT,
             "kv_append: reserved2 is 1 (must be 0)");
      ka.reserved2 = 0;
      ka.num_qo_heads = 0;
      ka.layout = (gpurt_kv_layout){GPURT_DTYPE_FP8_E4M3, GPURT_KV_LAYOUT_NHD, 16, 2, 128, GPURT_DTYPE_BF16};
      ka.k_scale = ka.v_scale = 1.0f;
      msg_is("kv_append: rotary on an fp8 cache", api->kv_append(rt, s, &ka), GPURT_ERR_UNSUPPORTED,
             "kv_append: the rotary embedding (inv_freq) needs an f16 or bf16 cache, not fp8_e4m3");
    } else {
      skip("kv_append's rotary embedding (1.10): the plugin speaks an older minor");
    }
  } else {
    skip("attention (1.5): the plugin has no attention slots");
  }
  comm_checks(rt, s);
  call_checks(rt, s);
  ok("stream_destroy", api->stream_destroy(rt, s));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "abi_suite: dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  if (negotiate(lib) != 0) return finish_with(1);
  info_checks();
  gpurt_runtime *rt = new_runtime();
  if (rt == NULL) {
    finish_with(1);
    return 2;
  }
  runtime_checks(rt);
  handle_checks(rt);
  copy_checks(rt);
  memset_checks(rt);
  launch_checks(rt);
  minor_checks(rt);
  ok("runtime_destroy", api->runtime_destroy(rt));
  /* Plugins are never dlclose'd (gpurt.h): neither is this one. */
  return finish();
}
