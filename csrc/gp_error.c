/* SPDX-License-Identifier: Apache-2.0 */
/* Error objects: code, vendor code, message; owned by the caller. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_common.h"

struct gpurt_error {
  int32_t code;
  int32_t is_static; /* the out-of-memory fallback is never freed */
  int64_t vendor_code;
  uint64_t len;
  char *msg;
};

/* The error returned when malloc fails: "<prefix>: out of memory while
 * reporting an error", written once (the prefix is the plugin's). */
static char gp_oom_msg[96];
static struct gpurt_error gp_oom_error = {GPURT_ERR_OUT_OF_MEMORY, 1, 0, 0, gp_oom_msg};
static pthread_once_t gp_oom_once = PTHREAD_ONCE_INIT;

static void gp_oom_init(void) {
  snprintf(gp_oom_msg, sizeof gp_oom_msg, "%s: out of memory while reporting an error",
           gp_plugin_prefix);
  gp_oom_error.len = strlen(gp_oom_msg);
}

static gpurt_error *gp_oom(void) {
  pthread_once(&gp_oom_once, gp_oom_init);
  return &gp_oom_error;
}

gpurt_error *gp_errv_vendor(int32_t code, int64_t vendor, const char *fmt,
                           va_list ap) {
  char body[2048];
  vsnprintf(body, sizeof body, fmt, ap);
  size_t plen = strlen(gp_plugin_prefix), blen = strlen(body);
  struct gpurt_error *e = malloc(sizeof *e + plen + 2 + blen + 1);
  if (e == NULL) return gp_oom();
  e->code = code;
  e->is_static = 0;
  e->vendor_code = vendor;
  e->msg = (char *)(e + 1);
  memcpy(e->msg, gp_plugin_prefix, plen);
  memcpy(e->msg + plen, ": ", 2);
  memcpy(e->msg + plen + 2, body, blen + 1);
  e->len = plen + 2 + blen;
  return e;
}

gpurt_error *gp_errv(int32_t code, const char *fmt, va_list ap) {
  return gp_errv_vendor(code, 0, fmt, ap);
}

/* The body of a variadic function over fmt's arguments: returns call,
 * which reads them through ap. */
#define GP_VA_RETURN(call)        \
  va_list ap;                     \
  va_start(ap, fmt);              \
  gpurt_error *va_result_ = call; \
  va_end(ap);                     \
  return va_result_

gpurt_error *gp_err(int32_t code, const char *fmt, ...) { GP_VA_RETURN(gp_errv_vendor(code, 0, fmt, ap)); }

gpurt_error *gp_err_vendor(int32_t code, int64_t vendor, const char *fmt, ...) {
  GP_VA_RETURN(gp_errv_vendor(code, vendor, fmt, ap));
}

gpurt_error *gp_err_set_vendor(gpurt_error *e, int64_t vendor) {
  if (e != NULL && !e->is_static) e->vendor_code = vendor;
  return e;
}

/* e's message without the "<prefix>: " in front. */
static const char *gp_err_body(const gpurt_error *e) {
  size_t plen = strlen(gp_plugin_prefix) + 2;
  return e->len >= plen ? e->msg + plen : e->msg;
}

/* e (destroyed) with fmt's text (at most cap - 1 bytes) added: in front,
 * "<text>: <body>" (wrap), or behind, "<body><text>" (append). */
static gpurt_error *gp_err_rewrite(gpurt_error *e, int front, size_t cap, const char *fmt, va_list ap) {
  char text[2048];
  vsnprintf(text, cap < sizeof text ? cap : sizeof text, fmt, ap);
  gpurt_error *w = front ? gp_err_vendor(e->code, e->vendor_code, "%s: %s", text, gp_err_body(e))
                         : gp_err_vendor(e->code, e->vendor_code, "%s%s", gp_err_body(e), text);
  gp_error_destroy(e);
  return w;
}

gpurt_error *gp_err_append(gpurt_error *e, const char *fmt, ...) {
  if (e == NULL || e->is_static) return e;
  GP_VA_RETURN(gp_err_rewrite(e, 0, 2048, fmt, ap));
}

gpurt_error *gp_err_wrap(gpurt_error *e, const char *fmt, ...) {
  if (e == NULL || e->is_static) return e;
  GP_VA_RETURN(gp_err_rewrite(e, 1, 512, fmt, ap));
}

void gp_error_get(const gpurt_error *err, gpurt_error_info *out) {
  if (out == NULL || out->struct_size < sizeof(uint64_t)) return;
  gpurt_error_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = out->struct_size;
  if (err == NULL) {
    info.code = GPURT_OK;
    info.message = "";
  } else {
    info.code = err->code;
    info.vendor_code = err->vendor_code;
    info.message = err->msg;
    info.message_len = err->len;
  }
  gp_write_struct(out, &info, sizeof info);
}

void gp_error_destroy(gpurt_error *err) {
  if (err == NULL || err->is_static) return;
  free(err);
}

int32_t gp_error_code(const gpurt_error *err) {
  return err == NULL ? GPURT_OK : err->code;
}

gpurt_error *gp_read_struct(void *local, size_t local_size, const void *in,
                            const char *what) {
  if (in == NULL) {
    memset(local, 0, local_size);
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  }
  uint64_t sz;
  memcpy(&sz, in, sizeof sz);
  if (__builtin_expect(sz >= local_size, 1)) { /* the caller's struct is as new as ours */
    memcpy(local, in, local_size);
    return NULL;
  }
  memset(local, 0, local_size); /* an older caller: zero what it lacks */
  if (sz < sizeof(uint64_t))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "%s has struct_size %llu, below 8", what,
                  (unsigned long long)sz);
  /* Every version of a struct starts with a uint64_t, so its size is a
   * multiple of 8; any other size would end inside a field (half a
   * pointer read as a whole one). */
  if (sz % sizeof(uint64_t) != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "%s has struct_size %llu, not a multiple of 8 (the size of no version of the struct)",
                  what, (unsigned long long)sz);
  memcpy(local, in, (size_t)sz);
  return NULL;
}

gpurt_error *gp_check_out(const void *out, const char *what) {
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  uint64_t sz;
  memcpy(&sz, out, sizeof sz);
  if (sz < sizeof(uint64_t))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "%s has struct_size %llu, below 8", what,
                  (unsigned long long)sz);
  return NULL;
}

void gp_write_struct(void *out, const void *local, size_t local_size) {
  uint64_t sz;
  memcpy(&sz, out, sizeof sz);
  size_t n = sz < local_size ? (size_t)sz : local_size;
  if (n > sizeof(uint64_t))
    memcpy((char *)out + sizeof(uint64_t), (const char *)local + sizeof(uint64_t),
           n - sizeof(uint64_t));
}

void gp_strlcpy(char *dst, size_t cap, const char *src) {
  if (cap == 0) return;
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = 0;
}

static int gp_is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* One key=value item of an option string: [kb, ke) the key, [vs, ve) the
 * value, spaces around both trimmed; next is where the next item starts
 * (len when none). Returns 0 for an empty item, -1 for one without '=',
 * else 1. */
static int gp_option_item(const char *s, size_t len, const char *seps, size_t i, size_t *kb,
                          size_t *ke, size_t *vs, size_t *ve, size_t *next) {
  size_t j = i;
  while (j < len && strchr(seps, s[j]) == NULL && s[j] != 0) j++;
  *next = (j < len && s[j] != 0) ? j + 1 : len;
  size_t a = i, b = j;
  while (a < b && gp_is_space(s[a])) a++;
  while (b > a && gp_is_space(s[b - 1])) b--;
  *kb = a;
  *ve = b;
  if (b == a) return 0;
  const char *eq = memchr(s + a, '=', b - a);
  if (eq == NULL) return -1;
  *ke = (size_t)(eq - s);
  *vs = *ke + 1;
  while (*ke > a && gp_is_space(s[*ke - 1])) (*ke)--;
  while (*vs < b && gp_is_space(s[*vs])) (*vs)++;
  return 1;
}

gpurt_error *gp_parse_options(const char *s, size_t len, const char *seps,
                              const char *what, gp_option_fn fn, void *user) {
  if (s == NULL) return NULL;
  size_t i = 0;
  while (i < len) {
    size_t kb, ke, vs, ve, next;
    int k = gp_option_item(s, len, seps, i, &kb, &ke, &vs, &ve, &next);
    if (k < 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: \"%.*s\" is not key=value",
                    what, (int)(ve - kb), s + kb);
    if (k > 0) {
      /* A repeated key would silently take its last value: refuse it,
       * naming both values (the items before i are well-formed). */
      for (size_t p = 0; p < i;) {
        size_t pkb, pke, pvs, pve, pnext;
        if (gp_option_item(s, len, seps, p, &pkb, &pke, &pvs, &pve, &pnext) > 0 && pke - pkb == ke - kb &&
            memcmp(s + pkb, s + kb, ke - kb) == 0)
          return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %.*s=\"%.*s\" repeats the key (%.*s=\"%.*s\" came first)",
                        what, (int)(ke - kb), s + kb, (int)(ve - vs), s + vs, (int)(pke - pkb), s + pkb,
                        (int)(pve - pvs), s + pvs);
        p = pnext;
      }
      gpurt_error *e = fn(user, s + kb, ke - kb, s + vs, ve - vs);
      if (e != NULL) return e;
    }
    i = next;
  }
  return NULL;
}

int gp_parse_i64(const char *s, size_t len, int allow_suffix, int64_t *out) {
  if (s == NULL || len == 0) return -1;
  size_t i = 0;
  int neg = 0;
  if (s[0] == '-') { neg = 1; i = 1; }
  else if (s[0] == '+') i = 1;
  unsigned base = 10;
  if (len - i > 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) { base = 16; i += 2; }
  if (i >= len) return -1;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < len; i++) {
    char c = s[i];
    unsigned d;
    if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
    else if (base == 16 && c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
    else if (base == 16 && c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
    else break;
    if (v > (UINT64_MAX - d) / base) return -1;
    v = v * base + d;
    digits++;
  }
  if (digits == 0) return -1;
  if (i < len) {
    if (!allow_suffix) return -1;
    unsigned shift;
    switch (s[i]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      default: return -1;
    }
    i++;
    if (i < len && (s[i] == 'i' || s[i] == 'I')) i++;
    if (i < len && (s[i] == 'b' || s[i] == 'B')) i++;
    if (i != len) return -1;
    if (v > (UINT64_MAX >> shift)) return -1;
    v <<= shift;
  }
  if (v > (uint64_t)INT64_MAX) return -1;
  *out = neg ? -(int64_t)v : (int64_t)v;
  return 0;
}
