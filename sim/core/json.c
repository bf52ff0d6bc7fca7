/* json.c - cJSON with file/line/column and JSON-path errors; atomic writes. */
#define _POSIX_C_SOURCE 200809L
#include "sim/core/json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/core/alloc.h"
#include "sim/core/utf8.h"

static void *hook_malloc(size_t n) {
  return psim_malloc(n);
}
static void hook_free(void *p) {
  psim_free(p);
}

void psim_json_init_hooks(void) {
  cJSON_Hooks hooks = {hook_malloc, hook_free};
  cJSON_InitHooks(&hooks);
}

/* ---- syntax errors ----
 *
 * cJSON reports where it gave up, which is often one byte past the offending
 * character (a key that is not a string) or the end of the input. When it
 * fails, this scanner reads the text again with cJSON's own leniency (any byte
 * <= 32 is white space, its number and literal rules, no control-character
 * check in strings) and stops at the first character that cannot start or
 * continue the expected token, saying what was expected there. */

enum { SCAN_MAX_DEPTH = 1000 }; /* CJSON_NESTING_LIMIT: deeper input fails in cJSON */

typedef struct jscan {
  const unsigned char *s;
  size_t len, i;
  size_t at;       /* offset of the offending character (len: the end) */
  const char *why; /* what was expected there; NULL: a string never closed */
} jscan;

static bool scan_fail(jscan *z, size_t at, const char *why) {
  z->at = at;
  z->why = why;
  return false;
}

static void scan_ws(jscan *z) {
  while (z->i < z->len && z->s[z->i] <= 32)
    z->i++;
}

static unsigned scan_hex4(const unsigned char *p) {
  unsigned h = 0;
  for (int k = 0; k < 4; k++) {
    int c = p[k], d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (d < 0)
      return 0; /* as cJSON's parse_hex4: an invalid digit reads as U+0000 */
    h = h * 16 + (unsigned)d;
  }
  return h;
}

/* A \u escape at p (string closes at end): the length it takes, 0 when bad. */
static size_t scan_u_escape(const unsigned char *p, const unsigned char *end) {
  if (end - p < 6)
    return 0;
  unsigned first = scan_hex4(p + 2);
  if (first >= 0xDC00 && first <= 0xDFFF)
    return 0;
  if (first < 0xD800 || first > 0xDBFF)
    return 6;
  if (end - (p + 6) < 6 || p[6] != '\\' || p[7] != 'u')
    return 0;
  unsigned second = scan_hex4(p + 8);
  return second >= 0xDC00 && second <= 0xDFFF ? 12 : 0;
}

static bool scan_escapes(jscan *z, size_t from, size_t close) {
  const unsigned char *p = z->s + from, *end = z->s + close;
  while (p < end) {
    if (*p != '\\') {
      p++;
      continue;
    }
    size_t n = p[1] && strchr("bfnrt\"\\/", p[1]) ? 2 : p[1] == 'u' ? scan_u_escape(p, end) : 0;
    if (n == 0)
      return scan_fail(z, (size_t)(p - z->s),
                       p[1] == 'u' ? "a \\u escape with 4 hex digits (a UTF-16 surrogate "
                                     "needs its pair)"
                                   : "a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    p += n;
  }
  return true;
}

static bool scan_string(jscan *z) {
  size_t open = z->i, j = open + 1;
  while (j < z->len && z->s[j] != '"')
    j += z->s[j] == '\\' ? 2 : 1;
  if (j >= z->len)
    return scan_fail(z, open, NULL); /* unterminated string: no token to show */
  if (!scan_escapes(z, open + 1, j))
    return false;
  z->i = j + 1;
  return true;
}

/* cJSON's rule: the longest run of [0-9+-eE.] that strtod accepts a prefix of. */
static bool scan_number(jscan *z) {
  char buf[64];
  size_t n = 0;
  while (n < sizeof buf - 1 && z->i + n < z->len && z->s[z->i + n] &&
         strchr("0123456789+-eE.", z->s[z->i + n]))
    n++;
  memcpy(buf, z->s + z->i, n);
  buf[n] = '\0';
  char *after = buf;
  strtod(buf, &after);
  if (after == buf)
    return scan_fail(z, z->i, "a number");
  z->i += (size_t)(after - buf);
  return true;
}

static bool scan_literal(jscan *z) {
  static const char *const words[] = {"null", "true", "false"};
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(words[k]);
    if (z->len - z->i >= n && memcmp(z->s + z->i, words[k], n) == 0) {
      z->i += n;
      return true;
    }
  }
  return scan_fail(z, z->i, "a value (an object, array, string, number, true, false or null)");
}

static bool scan_value(jscan *z, int depth);

static bool scan_members(jscan *z, int depth, char close) {
  bool object = close == '}';
  z->i++;
  scan_ws(z);
  if (z->i < z->len && z->s[z->i] == close) {
    z->i++;
    return true;
  }
  for (bool first = true;; first = false) {
    scan_ws(z);
    bool closed = z->i < z->len && z->s[z->i] == close; /* "[1,]", {"a":1,} */
    if (!first && closed)
      return scan_fail(z, z->i,
                       object ? "a string key in double quotes (no comma before '}')"
                              : "a value (no comma before ']')");
    if (object && (z->i >= z->len || z->s[z->i] != '"'))
      return scan_fail(z, z->i,
                       first ? "a string key in double quotes or '}'"
                             : "a string key in double quotes");
    if (object && !scan_string(z))
      return false;
    scan_ws(z);
    if (object && (z->i >= z->len || z->s[z->i] != ':'))
      return scan_fail(z, z->i, "':' after the key");
    z->i += object;
    if (!scan_value(z, depth + 1))
      return false;
    scan_ws(z);
    if (z->i < z->len && z->s[z->i] == ',') {
      z->i++;
      continue;
    }
    if (z->i < z->len && z->s[z->i] == close) {
      z->i++;
      return true;
    }
    return scan_fail(z, z->i, object ? "',' or '}'" : "',' or ']'");
  }
}

static bool scan_value(jscan *z, int depth) {
  scan_ws(z);
  if (z->i >= z->len)
    return scan_fail(z, z->i, "a value (an object, array, string, number, true, false or null)");
  unsigned char c = z->s[z->i];
  if ((c == '{' || c == '[') && depth >= SCAN_MAX_DEPTH)
    return scan_fail(z, z->i, "at most 1000 nested arrays and objects");
  if (c == '{' || c == '[')
    return scan_members(z, depth, c == '[' ? ']' : '}');
  if (c == '"')
    return scan_string(z);
  if (c == '-' || (c >= '0' && c <= '9'))
    return scan_number(z);
  return scan_literal(z);
}

/* True with *z describing the first error; false when the scanner finds none. */
static bool scan_find_error(jscan *z) {
  if (z->len >= 3 && memcmp(z->s, "\xEF\xBB\xBF", 3) == 0)
    z->i = 3; /* cJSON skips a UTF-8 byte-order mark */
  if (!scan_value(z, 0))
    return true;
  scan_ws(z);
  if (z->i < z->len)
    return !scan_fail(z, z->i, "the end of the file after the top-level value");
  return false;
}

/* 1-based line and column of offset; the column counts UTF-8 characters
 * (bytes that do not continue a multi-byte sequence), a tab as one. */
static void line_col(const char *text, size_t offset, int *line, int *col) {
  *line = 1;
  *col = 1;
  size_t i = strncmp(text, "\xEF\xBB\xBF", 3) == 0 && offset >= 3 ? 3 : 0; /* BOM: no column */
  for (; i < offset; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\n') {
      (*line)++;
      *col = 1;
    } else if ((c & 0xC0) != 0x80) {
      (*col)++;
    }
  }
}

/* The token at text[at] for messages: one structural character, or up to 20
 * bytes up to white space or punctuation; other bytes than printable ASCII
 * as \xHH. Only for files that begin as JSON: the bytes of a file that does
 * not (a token, /etc/shadow named as a plan's model_file) are never shown. */
static void found_token(const char *text, size_t len, size_t at, char *out, size_t size) {
  size_t n = 1, o = 0;
  if (!strchr("{}[],:\"", text[at]))
    while (at + n < len && n < 20 && (unsigned char)text[at + n] > 32 &&
           !strchr("{}[],:\"", text[at + n]))
      n++;
  for (size_t k = 0; k < n && o + 5 < size; k++) {
    unsigned char c = (unsigned char)text[at + k];
    if (c >= 0x20 && c < 0x7f)
      out[o++] = (char)c;
    else
      o += (size_t)snprintf(out + o, size - o, "\\x%02x", c);
  }
  out[o] = '\0';
}

static psim_status syntax_error(const char *name, const char *text, size_t len, const char *end) {
  jscan z = {(const unsigned char *)text, len, 0, 0, NULL};
  bool found = scan_find_error(&z);
  size_t off = found ? z.at : end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
  int line, col;
  line_col(text, off, &line, &col);
  const char *why = found ? z.why : "valid JSON";
  if (found && !z.why)
    return psim_error(PSIM_EINPUT,
                      "%s:%d:%d: JSON syntax error: this string is never closed; "
                      "expected a closing '\"'",
                      name, line, col);
  if (off >= len)
    return psim_error(PSIM_EINPUT,
                      "%s:%d:%d: JSON syntax error: unexpected end of input; "
                      "expected %s",
                      name, line, col, why);
  size_t start = strspn(text, " \t\r\n");
  if (off == start && text[off] != '{' && text[off] != '[') /* issue 24: a token, a key file */
    return psim_error(PSIM_EINPUT,
                      "%s:%d:%d: JSON syntax error: not a JSON file (expected %s at its start; "
                      "its content is not shown)",
                      name, line, col, why);
  char tok[128];
  found_token(text, len, off, tok, sizeof tok);
  return psim_error(PSIM_EINPUT, "%s:%d:%d: JSON syntax error: expected %s, found '%s'", name, line,
                    col, why, tok);
}

/* Offset of the first string escape that cJSON decodes to U+0000 in text that
 * cJSON parsed, or SIZE_MAX. cJSON writes that NUL into the C string, which
 * then ends there: a name "a\u0000b" would be read as "a". Its parse_hex4 reads
 * an escape with a non-hex digit ("\uZZZZ") as U+0000 too (cJSON.c 1.7.15,
 * parse_hex4 and utf16_literal_to_utf8). In valid JSON a '"' or '\\' occurs
 * only in strings, so tracking quotes and skipping escaped bytes is exact. */
static size_t find_nul_escape(const char *text, size_t len) {
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == '"') {
      in_string = !in_string;
    } else if (in_string && text[i] == '\\') {
      if (text[i + 1] == 'u' && len - i >= 6 && scan_hex4((const unsigned char *)text + i + 2) == 0)
        return i;
      i++; /* the escaped byte: '"' or '\\' does not end or start anything */
    }
  }
  return SIZE_MAX;
}

/* issue 24: a NUL, raw or escaped, would cut a name or key short; refused. */
static psim_status nul_error(const char *name, const char *text, size_t at, bool escaped) {
  int line, col;
  line_col(text, at, &line, &col);
  if (!escaped)
    return psim_error(PSIM_EINPUT, "%s:%d:%d: a NUL byte; expected JSON text (no NUL bytes)", name,
                      line, col);
  char esc[7] = {0};
  memcpy(esc, text + at, 6);
  for (int k = 2; k < 6; k++)
    if ((unsigned char)esc[k] < 0x20 || (unsigned char)esc[k] >= 0x7f)
      esc[k] = '?';
  if (strncmp(esc, "\\u0000", 6) == 0)
    return psim_error(PSIM_EINPUT,
                      "%s:%d:%d: a NUL character (\\u0000) in a string; expected text without "
                      "NUL characters (it would cut the string there)",
                      name, line, col);
  return psim_error(PSIM_EINPUT,
                    "%s:%d:%d: JSON syntax error: expected a \\u escape with 4 hex digits, "
                    "found '%s'",
                    name, line, col, esc);
}

psim_status psim_json_parse(const char *name, const char *text, size_t len, cJSON **out) {
  psim_json_init_hooks();
  if (len == 0)
    return psim_error(PSIM_EINPUT, "%s: empty file; expected a JSON object", name);
  const char *nul = memchr(text, '\0', len);
  if (nul)
    return nul_error(name, text, (size_t)(nul - text), false);
  const char *end = NULL;
  long failures = psim_alloc_failures();
  /* text[len] is the terminating NUL; cJSON wants it counted to reject trailing junk. */
  cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
  if (!root && psim_alloc_failures() != failures) /* issue 9: not a syntax error */
    return psim_error(PSIM_ENOMEM, "%s: out of memory parsing JSON", name);
  if (!root)
    return syntax_error(name, text, len, end);
  size_t esc = find_nul_escape(text, len);
  if (esc != SIZE_MAX) {
    cJSON_Delete(root);
    return nul_error(name, text, esc, true);
  }
  *out = root;
  return PSIM_OK;
}

psim_status psim_json_load_file(const char *file, cJSON **out) {
  char *text = NULL;
  size_t len = 0;
  PSIM_CHECK(psim_file_read_expecting(file, PSIM_JSON_MAX_BYTES, "a JSON file", &text, &len));
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
  if (!v)
    return "nothing";
  if (cJSON_IsObject(v))
    return "an object";
  if (cJSON_IsArray(v))
    return "an array";
  if (cJSON_IsString(v))
    return "a string";
  if (cJSON_IsNumber(v))
    return "a number";
  if (cJSON_IsBool(v))
    return "a boolean";
  if (cJSON_IsNull(v))
    return "null";
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
  size_t bad = psim_utf8_invalid_at(v->valuestring); /* issue 24: refused, not cut later */
  if (bad != SIZE_MAX) {
    size_t sv = psim_jctx_key(c, key);
    psim_status s = psim_jerr(c, "expected UTF-8 text, found byte 0x%02x at offset %zu",
                              (unsigned char)v->valuestring[bad], bad);
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
    if (psim_units_check(v->valuedouble, kind) != PSIM_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", psim_error_message());
      return psim_jerr(c, "%s", msg);
    }
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

/* ---- output paths ---- */

/* The folder that holds path (trailing slashes ignored) into dir. */
static bool parent_folder(const char *path, char *dir, size_t size) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/')
    n--;
  while (n > 0 && path[n - 1] != '/')
    n--;
  while (n > 1 && path[n - 1] == '/')
    n--;
  if (n >= size)
    return false;
  if (n == 0)
    snprintf(dir, size, ".");
  else
    snprintf(dir, size, "%.*s", (int)n, path);
  return true;
}

static psim_status check_folder(const char *option, const char *path) {
  char dir[4096];
  struct stat st;
  if (!parent_folder(path, dir, sizeof dir))
    return psim_error(PSIM_EINPUT, "%s %s: path too long", option, path);
  if (stat(dir, &st) != 0)
    return psim_error(PSIM_EINPUT, "%s %s: folder '%s' %s", option, path, dir,
                      errno == ENOENT ? "does not exist; create it first" : strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return psim_error(PSIM_EINPUT, "%s %s: '%s' is not a folder", option, path, dir);
  if (access(dir, W_OK | X_OK) != 0)
    return psim_error(PSIM_EINPUT, "%s %s: cannot write in folder '%s': %s", option, path, dir,
                      strerror(errno));
  return PSIM_OK;
}

psim_status psim_file_check_output(const char *option, const char *path) {
  if (!*path)
    return psim_error(PSIM_EINPUT, "%s: empty file name; expected a file path", option);
  if (strcmp(path, "-") == 0)
    return PSIM_OK; /* standard output */
  struct stat st;
  size_t n = strlen(path);
  if (path[n - 1] == '/' || (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
    return psim_error(PSIM_EINPUT, "%s %s: is a directory; expected a file name", option, path);
  return check_folder(option, path);
}

psim_status psim_file_check_output_dir(const char *option, const char *path) {
  if (!*path)
    return psim_error(PSIM_EINPUT, "%s: empty folder name; expected a folder path", option);
  struct stat st;
  if (stat(path, &st) != 0)
    return check_folder(option, path); /* created by the command */
  if (!S_ISDIR(st.st_mode))
    return psim_error(PSIM_EINPUT, "%s %s: exists and is not a folder; expected a folder", option,
                      path);
  if (access(path, W_OK | X_OK) != 0)
    return psim_error(PSIM_EINPUT, "%s %s: cannot write in this folder: %s", option, path,
                      strerror(errno));
  return PSIM_OK;
}

static psim_status write_fd(int fd, const char *path, const char *data, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, data + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return psim_error(PSIM_EIO, "%s: write failed: %s", path, strerror(errno));
    done += (size_t)w;
  }
  return PSIM_OK;
}

/* A character device or FIFO (/dev/null, /dev/stdout) is written in place:
 * renaming a temporary file over it would replace the device node. */
static bool is_device(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

static psim_status write_device(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY);
  if (fd < 0)
    return psim_error(PSIM_EIO, "%s: cannot open for writing: %s", path, strerror(errno));
  psim_status s = write_fd(fd, path, data, len);
  close(fd);
  return s;
}

/* The permission bits a replaced output keeps, or those a new file gets
 * (0666 less the umask, as open(O_CREAT) would give). The umask is read from
 * /proc (umask() itself would change it for every thread for a moment). */
static mode_t output_mode(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
    return st.st_mode & 07777;
  unsigned mask = 022;
  FILE *f = fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "Umask: %o", &mask) == 1)
        break;
    fclose(f);
  }
  return 0666 & ~(mode_t)mask;
}

/* Writes, syncs and renames the open temporary tmp (fd) over path. Errors
 * name path, the user's name, not the temporary file. */
static psim_status finish_temp(int fd, const char *path, const char *tmp, const char *data,
                               size_t len) {
  psim_status s = PSIM_OK;
  if (fchmod(fd, output_mode(path)) != 0)
    s = psim_error(PSIM_EIO, "%s: cannot set permissions: %s", path, strerror(errno));
  if (s == PSIM_OK)
    s = write_fd(fd, path, data, len);
  if (s == PSIM_OK && fsync(fd) != 0)
    s = psim_error(PSIM_EIO, "%s: fsync failed: %s", path, strerror(errno));
  if (close(fd) != 0 && s == PSIM_OK)
    s = psim_error(PSIM_EIO, "%s: close failed: %s", path, strerror(errno));
  if (s == PSIM_OK && rename(tmp, path) != 0) {
    int e = errno;
    s = e == EISDIR ? psim_error(PSIM_EINPUT, "%s: is a directory; expected a file name", path)
                    : psim_error(PSIM_EIO, "%s: cannot rename into place: %s", path, strerror(e));
  }
  if (s != PSIM_OK)
    unlink(tmp);
  return s;
}

/* The temporary is "FOLDER/.NAME.XXXXXX" made by mkstemp: a fresh name
 * opened with O_EXCL, so a file or symlink planted beside the output is never
 * followed or truncated (a predictable name was, issue 24). */
psim_status psim_file_write_atomic(const char *path, const char *data, size_t len) {
  if (!*path)
    return psim_error(PSIM_EINPUT, "empty output file name; expected a file path");
  if (is_device(path))
    return write_device(path, data, len);
  const char *slash = strrchr(path, '/');
  size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
  size_t n = strlen(path) + 16;
  char *tmp = psim_malloc(n);
  if (!tmp)
    return psim_error(PSIM_ENOMEM, "%s: out of memory", path);
  snprintf(tmp, n, "%.*s.%s.XXXXXX", (int)dir_len, path, path + dir_len);
  psim_status s;
  int fd = mkstemp(tmp);
  if (fd < 0)
    s = psim_error(PSIM_EIO, "%s: cannot create a temporary file beside it: %s", path,
                   strerror(errno));
  else
    s = finish_temp(fd, path, tmp, data, len);
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
