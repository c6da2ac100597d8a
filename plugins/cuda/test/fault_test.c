/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fault_test PLUGIN OOB_PTX — real GPU faults through the CUDA plugin (run
 * by scripts/gpu_check.sh on the GPU machine).
 *
 * A user kernel (plugins/cuda/testdata/oob.cu, compiled to PTX) writes far
 * out of bounds. The error must surface at the next synchronize with CUDA's
 * error name and the kernel's name; the context is then in a sticky error
 * state, so every later call touching the device answers
 * GPURT_ERR_DEVICE_LOST naming the original error and "restart"; frees
 * still work; the process does not crash. CUDA cannot recover from a sticky
 * error inside the process, so after the runtime is destroyed a new
 * runtime_create answers DEVICE_LOST naming the original error, the kernel
 * and "restart the process", and probe says the device is unavailable.
 *
 * Prints "N passed, M failed"; exits 0 only when nothing failed.
 */
#include "harness.h"

static gpurt_runtime *new_runtime(void) {
  gpurt_runtime_create_args ca;
  ARGS_INIT(ca);
  gpurt_runtime *rt = NULL;
  OK(api->runtime_create(&ca, &rt));
  return rt;
}

static gpurt_module *load_ptx(gpurt_runtime *rt, const char *ptx, size_t len) {
  gpurt_module_load_args ml;
  ARGS_INIT(ml);
  ml.format = GPURT_MODULE_PTX;
  ml.data = ptx;
  ml.data_len = len;
  ml.name = "oob";
  ml.name_len = 3;
  gpurt_module *m = NULL;
  OK(api->module_load(rt, &ml, &m));
  return m;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: fault_test PLUGIN OOB_PTX\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  load_plugin(argv[1]);
  size_t ptx_len = 0;
  char *ptx = read_file(argv[2], &ptx_len);
  if (ptx == NULL) {
    printf("cannot read %s\n0 passed, 1 failed\n", argv[2]);
    return 1;
  }

  gpurt_runtime *rt = new_runtime();
  if (rt == NULL) return finish();
  gpurt_stream *s = NULL, *s2 = NULL;
  OK(api->stream_create(rt, 0, &s));
  OK(api->stream_create(rt, 0, &s2));
  gpurt_buffer *buf = NULL;
  OK(api->buffer_alloc(rt, 0, 4096, &buf));
  gpurt_event *ev0 = NULL;
  OK(api->event_create(rt, 0, GPURT_EVENT_TIMING, &ev0));
  /* An f32 GEMM plan made before the fault (NULL when cuBLASLt is missing). */
  gpurt_gemm_desc gd = gemm_desc_square(GPURT_DTYPE_F32, 16);
  gpurt_gemm_plan *plan = NULL;
  OK(api->gemm_plan_create(rt, 0, &gd, &plan));
  gpurt_module *m = load_ptx(rt, ptx, ptx_len);
  gpurt_kernel *oob = NULL, *okk = NULL;
  OK(api->kernel_get(rt, m, "oob_write", 9, &oob));
  OK(api->kernel_get(rt, m, "ok_write", 8, &okk));

  /* A working launch first. */
  gpurt_kernel_arg okargs[2] = {arg_buf(buf, 0, 0), arg_val(GPURT_ARG_U32, 4, 7)};
  OK(launch1d(rt, s, okk, 1, 32, okargs, 2));
  OK(api->stream_synchronize(rt, s));

  /* The fault: p[1<<40] is 4 TiB past the buffer. */
  gpurt_kernel_arg bad[2] = {arg_buf(buf, 0, 0), arg_val(GPURT_ARG_U64, 8, 1ull << 40)};
  char msg[1024];
  int code = take(launch1d(rt, s, oob, 1, 32, bad, 2), msg, sizeof msg);
  CHECK(code == 0, "the faulting launch itself is asynchronous: code %d %s", code, msg);
  gpurt_error *e = api->stream_synchronize(rt, s);
  gpurt_error_info info;
  ARGS_INIT(info);
  api->error_get(e, &info);
  int64_t vendor = info.vendor_code;
  code = take(e, msg, sizeof msg);
  printf("first error: code %d vendor %lld: %s\n", code, (long long)vendor, msg);
  CHECK(code == GPURT_ERR_LAUNCH_FAILED || code == GPURT_ERR_DEVICE_LOST,
        "synchronize after the fault: code %d", code);
  CHECK(strstr(msg, "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL, "names the CUDA error: %s", msg);
  CHECK(strstr(msg, "oob_write") != NULL, "names the kernel: %s", msg);
  CHECK(vendor == 700, "vendor_code is the CUresult 700, got %lld", (long long)vendor);

  /* Everything touching the device now is DEVICE_LOST naming the error. */
  gpurt_buffer *b2 = NULL;
  ERR(api->buffer_alloc(rt, 0, 4096, &b2), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ERR(api->stream_synchronize(rt, s), GPURT_ERR_DEVICE_LOST, "oob_write");
  ERR(api->stream_synchronize(rt, s2), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ERR(launch1d(rt, s2, okk, 1, 32, okargs, 2), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ERR(api->device_synchronize(rt, 0), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpurt_device_info di;
  ARGS_INIT(di);
  ERR(api->device_info(rt, 0, &di), GPURT_ERR_DEVICE_LOST, "lost");
  uint32_t word = 0;
  gpurt_copy_args c;
  ARGS_INIT(c);
  c.flags = GPURT_COPY_SYNC;
  c.size = 4;
  c.src_buffer = buf;
  c.dst_ptr = &word;
  ERR(api->copy(rt, &c), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpurt_stream *s3 = NULL;
  ERR(api->stream_create(rt, 0, &s3), GPURT_ERR_DEVICE_LOST, "lost");
  gpurt_event *ev = NULL;
  ERR(api->event_create(rt, 0, GPURT_EVENT_TIMING, &ev), GPURT_ERR_DEVICE_LOST, "lost");
  ERR(api->stream_query(rt, s2), GPURT_ERR_DEVICE_LOST, "restart");
  ERR(api->event_record(rt, ev0, s2), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ERR(api->event_query(rt, ev0), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ERR(api->event_synchronize(rt, ev0), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ERR(api->stream_wait_event(rt, s2, ev0), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpurt_memset_args ms = memset_args(buf, 0, 64, 0, 4);
  ERR(api->memset(rt, &ms), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ms.stream = s2;
  ERR(api->memset(rt, &ms), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpurt_copy_args ca;
  ARGS_INIT(ca);
  ca.stream = s2;
  ca.size = 64;
  ca.src_buffer = buf;
  ca.dst_buffer = buf;
  ca.dst_offset = 1024;
  ERR(api->copy(rt, &ca), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpurt_kernel *k3 = NULL;
  ERR(api->kernel_get(rt, m, "ok_write", 8, &k3), GPURT_ERR_DEVICE_LOST, "restart");
  gpurt_kernel_info ki;
  ARGS_INIT(ki);
  ERR(api->kernel_info(rt, okk, &ki), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpurt_module *m3 = NULL;
  ERR(load_builtin(rt, &m3), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpurt_gemm_plan *plan2 = NULL;
  ERR(api->gemm_plan_create(rt, 0, &gd, &plan2), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  if (plan != NULL) {
    gpurt_gemm_run_args gr = gemm_run_args(buf, buf, buf, 1);
    ERR(api->gemm_run(rt, s2, plan, &gr), GPURT_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
  }
  gpurt_host_buffer *hb = NULL;
  void *hp = NULL;
  ERR(api->host_alloc(rt, 4096, &hb, &hp), GPURT_ERR_DEVICE_LOST, "restart");
  /* Handle validation still comes first. */
  ERR(api->buffer_free(rt, (gpurt_buffer *)(uintptr_t)0x1234), GPURT_ERR_INVALID_HANDLE, "buffer");

  /* Frees still work, and the runtime goes away cleanly. */
  OK(api->buffer_free(rt, buf));
  (void)take(api->stream_destroy(rt, s), NULL, 0);
  (void)take(api->stream_destroy(rt, s2), NULL, 0);
  OK(api->module_unload(rt, m));
  OK(api->event_destroy(rt, ev0));
  if (plan != NULL) OK(api->gemm_plan_destroy(rt, plan));
  gpurt_runtime_stats st;
  ARGS_INIT(st);
  OK(api->runtime_stats(rt, &st));
  CHECK(st.live_buffers == 0 && st.live_streams == 0 && st.live_modules == 0,
        "nothing live after the frees: %llu buffers %llu streams %llu modules",
        (unsigned long long)st.live_buffers, (unsigned long long)st.live_streams,
        (unsigned long long)st.live_modules);
  OK(api->runtime_destroy(rt));
  ERR(api->runtime_stats(rt, &st), GPURT_ERR_INVALID_HANDLE, "runtime");

  /* CUDA cannot recover from a sticky error in this process: a new runtime
   * is refused naming the original error, the kernel and the remedy. */
  gpurt_runtime_create_args cra;
  ARGS_INIT(cra);
  gpurt_runtime *rt2 = NULL;
  code = take(api->runtime_create(&cra, &rt2), msg, sizeof msg);
  printf("runtime_create after the fault: code %d: %s\n", code, msg);
  CHECK(code == GPURT_ERR_DEVICE_LOST, "runtime_create after the fault: code %d (want %d): %s",
        code, GPURT_ERR_DEVICE_LOST, msg);
  CHECK(strstr(msg, "device 0 is lost") != NULL, "names the device: %s", msg);
  CHECK(strstr(msg, "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL, "names the original error: %s", msg);
  CHECK(strstr(msg, "oob_write") != NULL, "names the kernel: %s", msg);
  CHECK(strstr(msg, "restart the process") != NULL, "says to restart the process: %s", msg);
  CHECK(rt2 == NULL, "no runtime handle on failure");
  if (rt2 != NULL) (void)take(api->runtime_destroy(rt2), NULL, 0);
  /* Probe agrees: not available, naming the lost device. */
  gpurt_probe_args pa;
  ARGS_INIT(pa);
  OK(api->probe(&pa));
  printf("probe after the fault: available=%u reason_code=%d: %s\n", pa.available,
         pa.reason_code, pa.reason);
  CHECK(pa.available == 0, "probe after the fault: available %u", pa.available);
  CHECK(strstr(pa.reason, "lost") != NULL && strstr(pa.reason, "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL &&
            strstr(pa.reason, "restart") != NULL,
        "probe reason names the lost device, the error and the remedy: %s", pa.reason);
  free(ptx);
  return finish();
}
