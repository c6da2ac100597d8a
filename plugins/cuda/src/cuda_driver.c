/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_driver.c — loading libcuda.so.1 at run time and initialising it once.
 *
 * Nothing happens at library load: the first probe or runtime_create
 * dlopens the driver (RTLD_LOCAL), resolves the entry points, checks the
 * driver version and runs cuInit on a helper thread with all signals
 * blocked, waiting a bounded time, so a wedged driver makes probe report a
 * reason instead of hanging the caller. Nothing is printed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"

cu_driver cu_drv;

#define CU_STR2(x) #x
#define CU_STR(x) CU_STR2(x)

/* How long probe waits for cuInit (it takes ~0.2 s on an H200). */
#define CU_INIT_TIMEOUT_S 120

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_load_state;        /* 0 untried, 1 loaded, -1 failed */
static int32_t g_load_reason;   /* GPURT_PROBE_* when failed */
static char g_load_why[480];
static int g_driver_version;
static int g_init_state;        /* 0 not started, 1 running, 2 done */
static CUresult g_init_result;

/* cu_dlopen_first opens the first of the n candidate paths that dlopen
 * accepts (NULL or empty entries are passed over), RTLD_NOW | RTLD_LOCAL.
 * With explicit_only, a non-empty cands[0] (a file the user named) is the
 * only one tried. The first failure's dlerror text goes to tried (when
 * tried[0] is still empty). Returns the handle or NULL. */
void *cu_dlopen_first(const char *const *cands, size_t n, int explicit_only, char *tried, size_t cap) {
  void *h = NULL;
  for (size_t i = 0; i < n && h == NULL; i++) {
    if (cands[i] == NULL || cands[i][0] == 0) continue;
    if (i > 0 && explicit_only && cands[0] != NULL && cands[0][0] != 0) break;
    dlerror();
    h = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL && tried[0] == 0) {
      const char *e = dlerror();
      snprintf(tried, cap, "%s", e ? e : cands[i]);
    }
  }
  return h;
}

void cu_result_text(CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (cu_drv.p_cuGetErrorName == NULL ||
      cu_drv.p_cuGetErrorName(r, &name) != CUDA_SUCCESS || name == NULL)
    name = NULL;
  if (cu_drv.p_cuGetErrorString == NULL ||
      cu_drv.p_cuGetErrorString(r, &text) != CUDA_SUCCESS || text == NULL)
    text = NULL;
  if (name != NULL && text != NULL)
    snprintf(buf, cap, "%s (%s)", name, text);
  else if (name != NULL)
    snprintf(buf, cap, "%s", name);
  else
    snprintf(buf, cap, "CUresult %d", (int)r);
}

/* Under g_mu. */
static void cu_load_locked(void) {
  if (g_load_state != 0) return;
  dlerror();
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    /* dlerror() usually names the file itself: don't say it twice. */
    if (e != NULL && strncmp(e, "libcuda.so.1: ", 14) == 0)
      snprintf(g_load_why, sizeof g_load_why, "driver missing: %s", e);
    else
      snprintf(g_load_why, sizeof g_load_why, "driver missing: libcuda.so.1: %s",
               e ? e : "dlopen failed");
    g_load_reason = GPURT_PROBE_DRIVER_MISSING;
    g_load_state = -1;
    return;
  }
  cu_driver d;
  memset(&d, 0, sizeof d);
  const char *missing = NULL;
#define CU_RESOLVE(name)                                                   \
  d.p_##name = (__typeof__(d.p_##name))dlsym(h, CU_STR(name));             \
  if (d.p_##name == NULL && missing == NULL) missing = CU_STR(name);
  CU_PROBE_FUNCS(CU_RESOLVE)
  if (missing != NULL) {
    snprintf(g_load_why, sizeof g_load_why,
             "driver unusable: libcuda.so.1 has no %s", missing);
    g_load_reason = GPURT_PROBE_INIT_FAILED;
    g_load_state = -1;
    return; /* never dlclose'd: harmless and avoids unload races */
  }
  int ver = 0;
  if (d.p_cuDriverGetVersion(&ver) != CUDA_SUCCESS) ver = 0;
  g_driver_version = ver;
  if (ver < CU_REQUIRED_DRIVER) {
    snprintf(g_load_why, sizeof g_load_why,
             "driver too old: the driver supports CUDA %d.%d (%d), the plugin "
             "needs CUDA %d.%d (%d) or newer",
             ver / 1000, (ver % 1000) / 10, ver, CU_REQUIRED_DRIVER / 1000,
             (CU_REQUIRED_DRIVER % 1000) / 10, CU_REQUIRED_DRIVER);
    g_load_reason = GPURT_PROBE_DRIVER_TOO_OLD;
    cu_drv = d; /* error names still usable */
    g_load_state = -1;
    return;
  }
  CU_RUNTIME_FUNCS(CU_RESOLVE)
#undef CU_RESOLVE
  if (missing != NULL) {
    snprintf(g_load_why, sizeof g_load_why,
             "driver unusable: libcuda.so.1 (CUDA %d.%d) has no %s", ver / 1000,
             (ver % 1000) / 10, missing);
    g_load_reason = GPURT_PROBE_INIT_FAILED;
    g_load_state = -1;
    return;
  }
#define CU_RESOLVE_OPT(name) \
  d.p_##name = (__typeof__(d.p_##name))dlsym(h, CU_STR(name));
  CU_OPTIONAL_FUNCS(CU_RESOLVE_OPT)
#undef CU_RESOLVE_OPT
  cu_drv = d;
  g_load_state = 1;
}

static void *cu_init_thread(void *arg) {
  (void)arg;
  CUresult r = cu_drv.p_cuInit(0);
  pthread_mutex_lock(&g_mu);
  g_init_result = r;
  g_init_state = 2;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

int32_t cu_driver_ready(char *why, size_t cap, int *driver_version) {
  pthread_mutex_lock(&g_mu);
  cu_load_locked();
  if (driver_version) *driver_version = g_driver_version;
  if (g_load_state < 0) {
    gp_strlcpy(why, cap, g_load_why);
    int32_t reason = g_load_reason;
    pthread_mutex_unlock(&g_mu);
    return reason;
  }
  if (g_init_state == 0) {
    /* cuInit on a thread with every signal blocked, so the caller can stop
     * waiting; the driver's own threads inherit the blocked mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    int rc = pthread_create(&th, &attr, cu_init_thread, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
      /* No thread: call it here. */
      pthread_mutex_unlock(&g_mu);
      CUresult r = cu_drv.p_cuInit(0);
      pthread_mutex_lock(&g_mu);
      g_init_result = r;
      g_init_state = 2;
    } else {
      g_init_state = 1;
    }
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += CU_INIT_TIMEOUT_S;
  while (g_init_state == 1) {
    if (pthread_cond_timedwait(&g_cv, &g_mu, &deadline) == ETIMEDOUT) break;
  }
  if (g_init_state != 2) {
    snprintf(why, cap, "init failed: cuInit did not return within %d s",
             CU_INIT_TIMEOUT_S);
    pthread_mutex_unlock(&g_mu);
    return GPURT_PROBE_INIT_FAILED;
  }
  CUresult r = g_init_result;
  pthread_mutex_unlock(&g_mu);
  if (r != CUDA_SUCCESS) {
    char t[256];
    cu_result_text(r, t, sizeof t);
    snprintf(why, cap, "no device: cuInit: %s", t);
    return GPURT_PROBE_NO_DEVICE;
  }
  return GPURT_PROBE_OK;
}
