/* export_check.c - `plansim export PLAN --check FILE` (export.h, docs/export.md).
 *
 * Reads an exported file back into the settings its runtime reads (Megatron-LM flags, TOML,
 * YAML and JSON keys, PipelineModule arguments), reports them, and compares them with the
 * settings of the plan's own export in that format, key by key: the file runs the plan when
 * every setting the plan's export makes is in the file with the same value and the file makes
 * no other. Comments and layout are not settings. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/plan/export.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/core/strbuf.h"

typedef struct setting {
  char *key, *val;
  int32_t at; /* the order read: of a key set twice, the last value counts */
} setting;

typedef struct settings {
  setting *v;
  int32_t n, cap;
  bool oom;
} settings;

static void settings_destroy(settings *s) {
  for (int32_t i = 0; i < s->n; i++)
    psim_free_each((void *[]){s->v[i].key, s->v[i].val}, 2);
  psim_free(s->v);
  memset(s, 0, sizeof *s);
}

/* Adds key = val (kn and vn bytes), white space around val trimmed. */
static void put(settings *s, const char *key, int kn, const char *val, int vn) {
  while (vn > 0 && isspace((unsigned char)val[vn - 1]))
    vn--;
  while (vn > 0 && isspace((unsigned char)*val))
    val++, vn--;
  char *k = psim_malloc((size_t)kn + 1), *v = psim_malloc((size_t)vn + 1);
  if (k && v && s->n == s->cap) {
    setting *grown = psim_realloc(s->v, sizeof *s->v * (size_t)(2 * s->cap + 8));
    if (grown)
      s->v = grown, s->cap = 2 * s->cap + 8;
  }
  if (!k || !v || s->n == s->cap) {
    psim_free_each((void *[]){k, v}, 2);
    s->oom = true;
    return;
  }
  snprintf(k, (size_t)kn + 1, "%.*s", kn, key);
  snprintf(v, (size_t)vn + 1, "%.*s", vn, val);
  s->v[s->n] = (setting){k, v, s->n};
  s->n++;
}

static int by_key(const void *a, const void *b) {
  const setting *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* Sorts by key and keeps the last value of a key set twice, as each runtime's reader does
 * (argparse, TOML and YAML loaders would refuse some repeats; plansim writes none).
 * O(n log n): a hostile file of many settings costs no more. */
static void settings_sort(settings *s) {
  qsort(s->v, (size_t)s->n, sizeof *s->v, by_key);
  int32_t w = 0;
  for (int32_t i = 0; i < s->n; i++) {
    if (i + 1 < s->n && strcmp(s->v[i].key, s->v[i + 1].key) == 0) {
      psim_free_each((void *[]){s->v[i].key, s->v[i].val}, 2);
      continue;
    }
    s->v[w++] = s->v[i];
  }
  s->n = w;
}

/* ---- readers ---- */

/* MEGATRON_ARGS=( --flag [value] ... ), its words split at white space as bash splits them
 * (plansim quotes only --moe-layer-freq's pattern, which holds no white space; the quotes
 * are dropped), and `export NAME=VALUE` lines. */
static void read_megatron(const char *t, settings *s) {
  for (const char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    int n = (int)(strchr(l, '\n') ? strchr(l, '\n') - l : (long)strlen(l));
    const char *eq = memchr(l, '=', (size_t)n);
    if (strncmp(l, "export ", 7) == 0 && eq)
      put(s, l + 7, (int)(eq - l - 7), eq + 1, (int)(l + n - eq - 1));
  }
  const char *p = strstr(t, "MEGATRON_ARGS=("), *end = p ? strstr(p, "\n)") : NULL;
  if (!p || !end)
    return;
  const char *key = NULL;
  int kn = 0;
  for (p += 15; p < end;) {
    while (p < end && isspace((unsigned char)*p))
      p++;
    const char *w = p;
    while (p < end && !isspace((unsigned char)*p))
      p++;
    if (p == w)
      break;
    if (strncmp(w, "--", 2) == 0) {
      if (key)
        put(s, key, kn, "true", 4);
      key = w, kn = (int)(p - w);
    } else if (key) {
      int n = (int)(p - w); /* a value in single or double quotes: bash drops them */
      bool quoted = n >= 2 && (*w == '\'' || *w == '"') && w[n - 1] == *w;
      put(s, key, kn, quoted ? w + 1 : w, quoted ? n - 2 : n);
      key = NULL;
    }
  }
  if (key)
    put(s, key, kn, "true", 4);
}

static int bracket_depth(const char *p, int n) {
  int d = 0;
  for (int i = 0; i < n; i++)
    d += p[i] == '[' ? 1 : p[i] == ']' ? -1 : 0;
  return d;
}

/* TOML ([section], key = value, arrays over several lines: their whitespace dropped), the
 * two-level YAML the Bridge exporter writes (section:, "  key: value") and the Python keyword
 * arguments of the PipelineModule snippet (name=value,). */
static void read_lines(const char *t, char sep, settings *s) {
  char sec[128] = "";
  for (const char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    int n = (int)(strchr(l, '\n') ? strchr(l, '\n') - l : (long)strlen(l));
    if (n == 0 || l[0] == '#')
      continue;
    if (sep == '=' && l[0] == '[' && l[n - 1] == ']' && bracket_depth(l, n) == 0) {
      snprintf(sec, sizeof sec, "%.*s.", n - 2, l + 1);
      continue;
    }
    const char *eq = memchr(l, sep, (size_t)n), *k = l;
    if (!eq)
      continue;
    while (k < eq && isspace((unsigned char)*k))
      k++;
    int kn = (int)(eq - k);
    while (kn > 0 && isspace((unsigned char)k[kn - 1]))
      kn--;
    if (sep == ':' && k == l) { /* a YAML section, or a top-level key */
      snprintf(sec, sizeof sec, "%.*s.", kn, k);
      if (eq + 1 == l + n)
        continue;
      sec[0] = '\0';
    }
    psim_sb v = {0};
    psim_sb_printf(&v, "%.*s", (int)(l + n - eq - 1), eq + 1);
    for (int d = bracket_depth(eq, (int)(l + n - eq)); d > 0 && l[n] == '\n';) {
      l += n + 1; /* the rest of a multi-line array */
      n = (int)(strchr(l, '\n') ? strchr(l, '\n') - l : (long)strlen(l));
      psim_sb_printf(&v, "%.*s", n, l);
      d += bracket_depth(l, n);
    }
    if (v.oom) { /* psim_sb keeps the failure: the whole read is PSIM_ENOMEM */
      psim_free(v.text);
      s->oom = true;
      return;
    }
    char *val = v.text ? v.text : "";
    bool array = strchr(val, '[') != NULL;
    size_t w = 0; /* arrays: whitespace out, so that layout is not a setting */
    for (size_t r = 0; val[r]; r++)
      if (!(array && isspace((unsigned char)val[r])))
        val[w++] = val[r];
    while (w > 0 && sep == '=' && (val[w - 1] == ',' || val[w - 1] == ')') && !strchr(val, '('))
      w--;
    char key[256];
    snprintf(key, sizeof key, "%s%.*s", sec, kn, k);
    put(s, key, (int)strlen(key), val, (int)w);
    psim_free(v.text);
  }
}

static void read_json(const cJSON *j, const char *prefix, settings *s) {
  for (const cJSON *c = j->child; c; c = c->next) {
    char key[512];
    snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", c->string ? c->string : "");
    if (cJSON_IsObject(c)) {
      read_json(c, key, s);
      continue;
    }
    char *v = cJSON_PrintUnformatted(c);
    if (!v) {
      s->oom = true;
      return;
    }
    put(s, key, (int)strlen(key), v, (int)strlen(v));
    cJSON_free(v);
  }
}

static psim_status read_settings(psim_export_format f, const char *t, settings *s) {
  switch (f) {
  case PSIM_EXPORT_MEGATRON: read_megatron(t, s); break;
  case PSIM_EXPORT_TORCHTITAN: read_lines(t, '=', s); break;
  case PSIM_EXPORT_MEGATRON_BRIDGE: read_lines(t, ':', s); break;
  case PSIM_EXPORT_DEEPSPEED_PIPELINE: read_lines(t, '=', s); break;
  default: {
    cJSON *j = NULL;
    PSIM_CHECK(psim_json_parse("the file", t, strlen(t), &j)); /* ENOMEM or where it breaks */
    if (!cJSON_IsObject(j)) {
      cJSON_Delete(j);
      return psim_error(PSIM_EINPUT, "not a JSON object");
    }
    read_json(j, "", s);
    cJSON_Delete(j);
  }
  }
  if (s->oom)
    return psim_error(PSIM_ENOMEM, "out of memory");
  settings_sort(s);
  return PSIM_OK;
}

psim_status psim_export_detect(const char *t, psim_export_format *f) {
  *f = strstr(t, "MEGATRON_ARGS=(")                      ? PSIM_EXPORT_MEGATRON
       : strstr(t, "# Megatron-Bridge recipe overrides") ? PSIM_EXPORT_MEGATRON_BRIDGE
       : strstr(t, "\n[parallelism]\n")                  ? PSIM_EXPORT_TORCHTITAN
       : strstr(t, "PIPELINE_MODULE_KWARGS")             ? PSIM_EXPORT_DEEPSPEED_PIPELINE
       : strstr(t, "\"partition_specs\"")                ? PSIM_EXPORT_GSPMD
       : strstr(t, "\"train_batch_size\"")               ? PSIM_EXPORT_DEEPSPEED
       : strstr(t, "\"plansim.plan/1\"")                 ? PSIM_EXPORT_PLANSIM
                                                         : PSIM_EXPORT_COUNT;
  return *f == PSIM_EXPORT_COUNT
             ? psim_error(PSIM_EINPUT, "not a file plansim exports (no MEGATRON_ARGS, Bridge "
                                       "header, [parallelism], PipelineModule, partition_specs, "
                                       "train_batch_size or plan); give --format")
             : PSIM_OK;
}

static const char *find(const settings *s, const char *key) {
  setting probe = {(char *)key, NULL, 0};
  int32_t lo = 0, hi = s->n; /* the first key >= key (keys are unique after settings_sort) */
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (strcmp(s->v[mid].key, probe.key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < s->n && strcmp(s->v[lo].key, key) == 0 ? s->v[lo].val : NULL;
}

/* The report: the file's settings, then each difference from the plan's export. */
static int32_t compare(const settings *file, const settings *plan, psim_sb *b) {
  int32_t diff = 0;
  for (int32_t i = 0; i < file->n; i++)
    psim_sb_printf(b, "  %s = %s\n", file->v[i].key, file->v[i].val);
  for (int32_t i = 0; i < plan->n; i++) {
    const char *v = find(file, plan->v[i].key);
    if (v && strcmp(v, plan->v[i].val) == 0)
      continue;
    diff++;
    if (!v)
      psim_sb_printf(b, "differs: %s: not set in the file; the plan's export sets %s\n",
                     plan->v[i].key, plan->v[i].val);
    else
      psim_sb_printf(b, "differs: %s: the file sets %s, the plan's export %s\n", plan->v[i].key, v,
                     plan->v[i].val);
  }
  for (int32_t i = 0; i < file->n; i++)
    if (!find(plan, file->v[i].key)) {
      diff++;
      psim_sb_printf(b, "differs: %s = %s: set in the file, not by the plan's export\n",
                     file->v[i].key, file->v[i].val);
    }
  return diff;
}

psim_status psim_export_check(const psim_plan_doc *d, psim_export_format f, const char *text,
                              char **report, size_t *len, int32_t *differences) {
  *report = NULL, *len = 0, *differences = 0;
  char *mine = NULL;
  size_t mine_len = 0;
  PSIM_CHECK(psim_export(d, f, &mine, &mine_len));
  settings file = {0}, plan = {0};
  psim_status st = read_settings(f, text, &file);
  if (st == PSIM_OK)
    st = read_settings(f, mine, &plan);
  psim_free(mine);
  if (st == PSIM_OK) {
    psim_sb b = {0};
    psim_sb_printf(&b, "%s settings the runtime reads (%d):\n", psim_export_format_name(f), file.n);
    *differences = compare(&file, &plan, &b);
    if (*differences == 0)
      psim_sb_printf(&b, "matches the plan: all %d settings of its %s export agree\n", plan.n,
                     psim_export_format_name(f));
    st = psim_sb_finish(&b, "export --check", report, len);
  }
  settings_destroy(&file);
  settings_destroy(&plan);
  return st;
}
