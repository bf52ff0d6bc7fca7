/* sweep_row.c - one row of sweep results as a JSON line or a CSV line, and back
 * (sweep.h). */
#include "search/sweep/sweep.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/core/json.h"

/* ---- rows as text ---- */

static const char *const columns[] = {"case",
                                      "key",
                                      "model",
                                      "cluster",
                                      "devices",
                                      "searcher",
                                      "seed",
                                      "budget",
                                      "status",
                                      "error",
                                      "iteration_time_s",
                                      "samples_per_s",
                                      "tokens_per_s",
                                      "mfu",
                                      "peak_memory_bytes",
                                      "fits",
                                      "evaluations",
                                      "plan",
                                      "search_wall_s",
                                      NULL};

const char *psim_sweep_csv_header(void) {
  static char header[512];
  if (!header[0]) {
    size_t n = 0;
    for (const char *const *c = columns; *c; c++)
      n += (size_t)snprintf(header + n, sizeof header - n, "%s%s", c == columns ? "" : ",", *c);
    snprintf(header + n, sizeof header - n, "\n");
  }
  return header;
}

typedef struct tbuf {
  char *p;
  size_t n, size;
} tbuf;

static void put(tbuf *b, const char *s, size_t len) {
  for (size_t i = 0; i < len && b->n + 1 < b->size; i++)
    b->p[b->n++] = s[i];
  b->p[b->n] = '\0';
}

static void puts_(tbuf *b, const char *s) {
  put(b, s, strlen(s));
}

static void put_json_string(tbuf *b, const char *s) {
  puts_(b, "\"");
  for (; *s; s++) {
    char esc[8];
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      esc[0] = '\\';
      esc[1] = (char)ch;
      put(b, esc, 2);
    } else if (ch < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", ch);
      puts_(b, esc);
    } else {
      put(b, s, 1);
    }
  }
  puts_(b, "\"");
}

/* Whole numbers exactly, others with 9 significant digits; null (JSON) or empty (CSV)
 * when not finite. */
static void put_number(tbuf *b, double v, bool json) {
  char num[40];
  if (isfinite(v) && v == floor(v) && fabs(v) < 9e15)
    snprintf(num, sizeof num, "%.0f", v); /* counts, seeds, bytes: exact */
  else if (isfinite(v))
    snprintf(num, sizeof num, "%.9g", v);
  else
    snprintf(num, sizeof num, "%s", json ? "null" : "");
  puts_(b, num);
}

typedef struct row_value {
  const char *text; /* string column, or NULL for a number */
  double number;
  bool is_bool;
} row_value;

static void row_values(const psim_sweep_row *r, row_value *v) {
  row_value vals[] = {{NULL, r->index, false},
                      {r->key, 0, false},
                      {r->model, 0, false},
                      {r->cluster, 0, false},
                      {NULL, r->devices, false},
                      {r->searcher, 0, false},
                      {NULL, (double)r->seed, false},
                      {r->budget, 0, false},
                      {r->status, 0, false},
                      {r->error, 0, false},
                      {NULL, r->iteration_time_s, false},
                      {NULL, r->samples_per_s, false},
                      {NULL, r->tokens_per_s, false},
                      {NULL, r->mfu, false},
                      {NULL, r->peak_memory_bytes, false},
                      {NULL, r->fits, true},
                      {NULL, (double)r->evaluations, false},
                      {r->plan, 0, false},
                      {NULL, r->search_wall_s, false}};
  memcpy(v, vals, sizeof vals);
}

enum { N_COLUMNS = 19 };

psim_status psim_sweep_row_jsonl(const psim_sweep_row *row, char *buf, size_t size) {
  row_value v[N_COLUMNS];
  row_values(row, v);
  tbuf b = {buf, 0, size};
  buf[0] = '\0';
  puts_(&b, "{");
  for (int i = 0; i < N_COLUMNS; i++) {
    if (i)
      puts_(&b, ",");
    put_json_string(&b, columns[i]);
    puts_(&b, ":");
    if (v[i].text)
      put_json_string(&b, v[i].text);
    else if (v[i].is_bool)
      puts_(&b, v[i].number != 0 ? "true" : "false");
    else
      put_number(&b, v[i].number, true);
  }
  puts_(&b, "}\n");
  if (b.n + 1 >= size)
    return psim_error(PSIM_ELIMIT, "sweep: a row is longer than %zu bytes", size);
  return PSIM_OK;
}

/* A text field: quoted when it holds a separator, quote or line break (RFC 4180); one that a
 * spreadsheet would read as a formula (a first character of = + - @, tab or carriage return:
 * OWASP's CSV injection guidance) is quoted and prefixed with an apostrophe, so that the
 * cell shows the text instead of running it. */
static void put_csv_field(tbuf *b, const char *s) {
  bool formula = s[0] && strchr("=+-@\t\r", s[0]);
  if (!formula && !strpbrk(s, ",\"\n\r")) {
    puts_(b, s);
    return;
  }
  puts_(b, formula ? "\"'" : "\"");
  for (; *s; s++)
    put(b, *s == '"' ? "\"\"" : s, *s == '"' ? 2 : 1);
  puts_(b, "\"");
}

void psim_sweep_row_csv(const psim_sweep_row *row, char *buf, size_t size) {
  row_value v[N_COLUMNS];
  row_values(row, v);
  tbuf b = {buf, 0, size};
  buf[0] = '\0';
  for (int i = 0; i < N_COLUMNS; i++) {
    if (i)
      puts_(&b, ",");
    if (v[i].text)
      put_csv_field(&b, v[i].text);
    else if (v[i].is_bool)
      puts_(&b, v[i].number != 0 ? "true" : "false");
    else
      put_number(&b, v[i].number, false);
  }
  puts_(&b, "\n");
}

static psim_status get_text(const cJSON *o, const char *key, char *out, size_t size) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsString(v))
    return psim_error(PSIM_EINPUT, "row: '%s' is missing or not a string", key);
  snprintf(out, size, "%s", v->valuestring);
  return PSIM_OK;
}

/* A number column (null reads as NaN); *bad names the first column that is
 * missing or not a number. */
static double get_number(const cJSON *o, const char *key, const char **bad) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (cJSON_IsNull(v))
    return NAN;
  if (!cJSON_IsNumber(v) && !*bad)
    *bad = key;
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* An integer column in [lo, hi]: anything else (null, NaN, 2e47; a fraction
 * is truncated) is a bad column rather than a cast that C leaves undefined
 * (fuzz_sweep found "evaluations": 2e47). */
static double get_integer(const cJSON *o, const char *key, double lo, double hi, const char **bad) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (d >= lo && d <= hi)
    return d;
  if (!*bad)
    *bad = key;
  return 0;
}

static psim_status parse_row(const cJSON *o, psim_sweep_row *r) {
  if (!cJSON_IsObject(o))
    return psim_error(PSIM_EINPUT, "row: not an object");
  memset(r, 0, sizeof *r);
  const char *bad = NULL;
  r->index = (int32_t)get_integer(o, "case", -1, INT32_MAX, &bad);
  r->devices = (int32_t)get_integer(o, "devices", 0, INT32_MAX, &bad);
  /* the largest double below 2^64 */
  r->seed = (uint64_t)get_integer(o, "seed", 0, 18446744073709549568.0, &bad);
  r->iteration_time_s = get_number(o, "iteration_time_s", &bad);
  r->samples_per_s = get_number(o, "samples_per_s", &bad);
  r->tokens_per_s = get_number(o, "tokens_per_s", &bad);
  r->mfu = get_number(o, "mfu", &bad);
  r->peak_memory_bytes = get_number(o, "peak_memory_bytes", &bad);
  r->evaluations = (int64_t)get_integer(o, "evaluations", 0, 9.2e18, &bad);
  r->search_wall_s = get_number(o, "search_wall_s", &bad);
  r->fits = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "fits"));
  if (bad)
    return psim_error(PSIM_EINPUT, "row: column \"%s\" is missing, not a number or out of range",
                      bad);
  PSIM_CHECK(get_text(o, "key", r->key, sizeof r->key));
  PSIM_CHECK(get_text(o, "model", r->model, sizeof r->model));
  PSIM_CHECK(get_text(o, "cluster", r->cluster, sizeof r->cluster));
  PSIM_CHECK(get_text(o, "searcher", r->searcher, sizeof r->searcher));
  PSIM_CHECK(get_text(o, "budget", r->budget, sizeof r->budget));
  PSIM_CHECK(get_text(o, "status", r->status, sizeof r->status));
  PSIM_CHECK(get_text(o, "error", r->error, sizeof r->error));
  return get_text(o, "plan", r->plan, sizeof r->plan);
}

psim_status psim_sweep_row_parse(const char *line, psim_sweep_row *row) {
  cJSON *o = NULL; /* the one JSON parser: a NUL escape in a key is refused, not cut */
  if (psim_json_parse("row", line, strlen(line), &o) != PSIM_OK)
    return psim_error(PSIM_EINPUT, "row: not valid JSON");
  psim_status st = parse_row(o, row);
  cJSON_Delete(o);
  return st;
}
