/* json.c - cJSON with file/line/column and JSON-path errors; atomic writes. */
#define _POSIX_C_SOURCE 200809L
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"

static void *hook_malloc(size_t n) { return psim_malloc(n); }
static void hook_free(void *p) { psim_free(p); }

void psim_json_init_hooks(void) {
  cJSON_Hooks hooks = {hook_malloc, hook_free};
  cJSON_InitHooks(&hooks);
}

psim_status psim_file_read(const char *path, size_t max_bytes, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return psim_error(PSIM_EINPUT, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 0, n = 0;
  char *buf = NULL;
  psim_status s = PSIM_OK;
  for (;;) {
    s = psim_grow((void **)&buf, &cap, n + 65537, 1);
    if (s != PSIM_OK)
      break;
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (n > max_bytes) {
      s = psim_error(PSIM_EINPUT, "%s: larger than the limit of %zu bytes", path, max_bytes);
      break;
    }
    if (got == 0)
      break;
  }
  if (s == PSIM_OK && ferror(f))
    s = psim_error(PSIM_EIO, "%s: read error: %s", path, strerror(errno));
  fclose(f);
  if (s != PSIM_OK) {
    psim_free(buf);
    return s;
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return PSIM_OK;
}

static void line_col(const char *text, size_t offset, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < offset; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

psim_status psim_json_parse(const char *name, const char *text, size_t len, cJSON **out) {
  psim_json_init_hooks();
  if (len == 0)
    return psim_error(PSIM_EINPUT, "%s: empty file; expected a JSON object", name);
  if (memchr(text, '\0', len))
    return psim_error(PSIM_EINPUT, "%s: contains a NUL byte; expected JSON text", name);
  const char *end = NULL;
  long failures = psim_alloc_failures();
  /* text[len] is the terminating NUL; cJSON wants it counted to reject trailing junk. */
  cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
  if (!root && psim_alloc_failures() != failures) /* issue 9: not a syntax error */
    return psim_error(PSIM_ENOMEM, "%s: out of memory parsing JSON", name);
  if (!root) {
    size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    int line, col;
    line_col(text, off, &line, &col);
    if (off >= len)
      return psim_error(PSIM_EINPUT, "%s:%d:%d: JSON syntax error: unexpected end of input",
                        name, line, col);
    return psim_error(PSIM_EINPUT, "%s:%d:%d: JSON syntax error near '%.20s'", name, line, col,
                      text + off);
  }
  *out = root;
  return PSIM_OK;
}

psim_status psim_json_load_file(const char *file, cJSON **out) {
  char *text = NULL;
  size_t len = 0;
  PSIM_CHECK(psim_file_read(file, PSIM_JSON_MAX_BYTES, &text, &len));
  psim_status s = psim_json_parse(file, text, len, out);
  psim_free(text);
  return s;
}

void psim_jctx_init(psim_jctx *c, const char *file) {
  c->file = file;
  c->path[0] = '\0';
  c->len = 0;
}

size_t psim_jctx_key(psim_jctx *c, const char *key) {
  size_t saved = c->len;
  int n = snprintf(c->path + c->len, sizeof c->path - c->len, "%s%s", c->len ? "." : "", key);
  if (n > 0)
    c->len = c->len + (size_t)n < sizeof c->path ? c->len + (size_t)n : sizeof c->path - 1;
  return saved;
}

size_t psim_jctx_index(psim_jctx *c, size_t index) {
  size_t saved = c->len;
  int n = snprintf(c->path + c->len, sizeof c->path - c->len, "[%zu]", index);
  if (n > 0)
    c->len = c->len + (size_t)n < sizeof c->path ? c->len + (size_t)n : sizeof c->path - 1;
  return saved;
}

void psim_jctx_pop(psim_jctx *c, size_t saved) {
  c->len = saved;
  c->path[saved] = '\0';
}

psim_status psim_jerr(const psim_jctx *c, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return psim_error(PSIM_EINPUT, "%s: %s: %s", c->file, c->len ? c->path : "(top level)", msg);
}

static const char *type_name(const cJSON *v) {
  if (!v) return "nothing";
  if (cJSON_IsObject(v)) return "an object";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsNull(v)) return "null";
  return "an invalid value";
}

psim_status psim_json_expect_object(psim_jctx *c, const cJSON *v) {
  if (!cJSON_IsObject(v))
    return psim_jerr(c, "expected an object, found %s", type_name(v));
  return PSIM_OK;
}

psim_status psim_json_expect_array(psim_jctx *c, const cJSON *v) {
  if (!cJSON_IsArray(v))
    return psim_jerr(c, "expected an array, found %s", type_name(v));
  return PSIM_OK;
}

psim_status psim_json_check_keys(psim_jctx *c, const cJSON *obj, const char *const *allowed) {
  PSIM_CHECK(psim_json_expect_object(c, obj));
  for (const cJSON *it = obj->child; it; it = it->next) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++)
      if (strcmp(*a, it->string) == 0)
        ok = 1;
    if (!ok) {
      char list[512] = "";
      for (const char *const *a = allowed; *a; a++) {
        strncat(list, *a, sizeof list - strlen(list) - 1);
        if (a[1])
          strncat(list, ", ", sizeof list - strlen(list) - 1);
      }
      return psim_jerr(c, "unknown key '%.80s'; expected one of: %s", it->string, list);
    }
    for (const cJSON *jt = obj->child; jt != it; jt = jt->next)
      if (strcmp(jt->string, it->string) == 0)
        return psim_jerr(c, "duplicate key '%.80s'", it->string);
  }
  return PSIM_OK;
}

/* Looks key up; returns PSIM_OK with *v NULL when optional and absent. */
static psim_status lookup(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                          const cJSON **v) {
  *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!*v && required)
    return psim_jerr(c, "missing required key '%s'", key);
  return PSIM_OK;
}

psim_status psim_json_string(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                             const char **out) {
  const cJSON *v;
  PSIM_CHECK(lookup(c, obj, key, required, &v));
  if (!v)
    return PSIM_OK;
  if (!cJSON_IsString(v)) {
    size_t sv = psim_jctx_key(c, key);
    psim_status s = psim_jerr(c, "expected a string, found %s", type_name(v));
    psim_jctx_pop(c, sv);
    return s;
  }
  *out = v->valuestring;
  return PSIM_OK;
}

psim_status psim_json_bool(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                           bool *out) {
  const cJSON *v;
  PSIM_CHECK(lookup(c, obj, key, required, &v));
  if (!v)
    return PSIM_OK;
  if (!cJSON_IsBool(v)) {
    size_t sv = psim_jctx_key(c, key);
    psim_status s = psim_jerr(c, "expected true or false, found %s", type_name(v));
    psim_jctx_pop(c, sv);
    return s;
  }
  *out = cJSON_IsTrue(v);
  return PSIM_OK;
}

psim_status psim_json_value_int(psim_jctx *c, const cJSON *v, int64_t min, int64_t max,
                                int64_t *out) {
  if (!cJSON_IsNumber(v))
    return psim_jerr(c, "expected an integer, found %s", type_name(v));
  double d = v->valuedouble;
  if (!isfinite(d) || d != floor(d))
    return psim_jerr(c, "expected an integer, found %g", d);
  /* 9.2e18 ~ 2^63: anything beyond overflows 64 bits. */
  if (d >= 9.2e18 || d <= -9.2e18)
    return psim_jerr(c, "integer %g overflows 64 bits", d);
  int64_t i = (int64_t)d;
  if (i < min || i > max)
    return psim_jerr(c, "integer %lld out of range [%lld, %lld]", (long long)i, (long long)min,
                     (long long)max);
  *out = i;
  return PSIM_OK;
}

psim_status psim_json_int(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                          int64_t min, int64_t max, int64_t *out) {
  const cJSON *v;
  PSIM_CHECK(lookup(c, obj, key, required, &v));
  if (!v)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  psim_status s = psim_json_value_int(c, v, min, max, out);
  psim_jctx_pop(c, sv);
  return s;
}

psim_status psim_json_number(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                             double min, double max, double *out) {
  const cJSON *v;
  PSIM_CHECK(lookup(c, obj, key, required, &v));
  if (!v)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  psim_status s = PSIM_OK;
  if (!cJSON_IsNumber(v))
    s = psim_jerr(c, "expected a number, found %s", type_name(v));
  else if (!isfinite(v->valuedouble) || v->valuedouble < min || v->valuedouble > max)
    s = psim_jerr(c, "%g out of range [%g, %g]", v->valuedouble, min, max);
  else
    *out = v->valuedouble;
  psim_jctx_pop(c, sv);
  return s;
}

psim_status psim_json_value_quantity(psim_jctx *c, const cJSON *v, psim_unit_kind kind,
                                     double *out) {
  if (cJSON_IsNumber(v)) {
    if (!isfinite(v->valuedouble) || v->valuedouble < 0)
      return psim_jerr(c, "%g out of range; expected a non-negative %s", v->valuedouble,
                       psim_units_kind_name(kind));
    *out = v->valuedouble;
    return PSIM_OK;
  }
  if (!cJSON_IsString(v))
    return psim_jerr(c, "expected %s, found %s", psim_units_kind_name(kind), type_name(v));
  if (psim_units_parse(v->valuestring, kind, out) != PSIM_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", psim_error_message());
    return psim_jerr(c, "%s", msg);
  }
  return PSIM_OK;
}

psim_status psim_json_quantity(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                               psim_unit_kind kind, double *out) {
  const cJSON *v;
  PSIM_CHECK(lookup(c, obj, key, required, &v));
  if (!v)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  psim_status s = psim_json_value_quantity(c, v, kind, out);
  psim_jctx_pop(c, sv);
  return s;
}

psim_status psim_file_write_atomic(const char *path, const char *data, size_t len) {
  size_t n = strlen(path) + 32;
  char *tmp = psim_malloc(n);
  if (!tmp)
    return psim_error(PSIM_ENOMEM, "%s: out of memory", path);
  snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
  psim_status s = PSIM_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    s = psim_error(PSIM_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    psim_free(tmp);
    return s;
  }
  size_t done = 0;
  while (done < len && s == PSIM_OK) {
    ssize_t w = write(fd, data + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      s = psim_error(PSIM_EIO, "%s: write failed: %s", tmp, strerror(errno));
    else
      done += (size_t)w;
  }
  if (s == PSIM_OK && fsync(fd) != 0)
    s = psim_error(PSIM_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
  if (close(fd) != 0 && s == PSIM_OK)
    s = psim_error(PSIM_EIO, "%s: close failed: %s", tmp, strerror(errno));
  if (s == PSIM_OK && rename(tmp, path) != 0)
    s = psim_error(PSIM_EIO, "%s: cannot rename into place: %s", path, strerror(errno));
  if (s != PSIM_OK)
    unlink(tmp);
  psim_free(tmp);
  return s;
}

psim_status psim_json_write_file(const char *path, const cJSON *root) {
  char *text = cJSON_Print(root);
  if (!text)
    return psim_error(PSIM_ENOMEM, "out of memory printing JSON");
  size_t len = strlen(text);
  psim_status s = PSIM_OK;
  if (strcmp(path, "-") == 0) {
    if (fwrite(text, 1, len, stdout) != len || fputc('\n', stdout) == EOF)
      s = psim_error(PSIM_EIO, "writing to standard output failed");
  } else {
    text[len] = '\n'; /* replace NUL with a newline; length grows by one */
    s = psim_file_write_atomic(path, text, len + 1);
  }
  cJSON_free(text);
  return s;
}

static psim_status added(cJSON *item) {
  return item ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory building JSON");
}

psim_status psim_json_add_number(cJSON *obj, const char *key, double v) {
  return added(cJSON_AddNumberToObject(obj, key, v));
}
psim_status psim_json_add_string(cJSON *obj, const char *key, const char *v) {
  return added(cJSON_AddStringToObject(obj, key, v));
}
psim_status psim_json_add_bool(cJSON *obj, const char *key, bool v) {
  return added(cJSON_AddBoolToObject(obj, key, v));
}
psim_status psim_json_add_object(cJSON *obj, const char *key, cJSON **out) {
  *out = cJSON_AddObjectToObject(obj, key);
  return added(*out);
}
psim_status psim_json_add_array(cJSON *obj, const char *key, cJSON **out) {
  *out = cJSON_AddArrayToObject(obj, key);
  return added(*out);
}
