/* cmd_check.c - plansim check FILE...: validates files by their "format" key.
 *
 * Each file is parsed once and handed to its format's validator (the same
 * loader the other commands use). Good files get one "FILE: ok (...)" line on
 * standard output; bad files get their error on standard error and nothing on
 * standard output. Every file is checked even after a bad one; the status is
 * PSIM_EINPUT (exit 2) when any file is bad. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "costdb/costdb.h"
#include "search/plan/plan.h"
#include "search/sweep/sweep.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

enum { SUMMARY_MAX = 256 };

/* Validates root (already parsed from file); on success writes a one-line
 * description of the content into summary. */
typedef psim_status (*check_fn)(const char *file, const cJSON *root, char *summary);

typedef struct check_format {
  const char *name;
  check_fn check;
} check_format;

static psim_status check_model(const char *file, const cJSON *root, char *summary) {
  psim_model m;
  psim_model_init(&m);
  psim_status s = psim_model_from_json(file, root, &m);
  if (s == PSIM_OK) {
    char params[32];
    psim_cli_format_count(m.n_params, params, sizeof params);
    snprintf(summary, SUMMARY_MAX, "model '%s': %d layers, %d ops, %s parameters",
             m.name ? m.name : "", (int)m.n_layers, (int)m.n_ops, params);
  }
  psim_model_destroy(&m);
  return s;
}

static psim_status check_cluster(const char *file, const cJSON *root, char *summary) {
  psim_cluster c;
  psim_cluster_init(&c);
  psim_status s = psim_cluster_from_json(file, root, &c);
  if (s == PSIM_OK)
    snprintf(summary, SUMMARY_MAX, "cluster '%s': %d devices in %d node%s, %d links",
             c.name ? c.name : "", (int)c.n_devices, (int)c.n_nodes, c.n_nodes == 1 ? "" : "s",
             (int)c.n_links);
  psim_cluster_destroy(&c);
  return s;
}

static psim_status check_strategy(const char *file, const cJSON *root, char *summary) {
  PSIM_CHECK(psim_strategy_check_json(file, root));
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "template");
  if (cJSON_IsString(t))
    snprintf(summary, SUMMARY_MAX, "strategy: template '%.64s'", t->valuestring);
  else
    snprintf(summary, SUMMARY_MAX, "strategy: explicit form");
  strncat(summary, "; fit to a model and cluster is checked by 'plansim expand'",
          SUMMARY_MAX - strlen(summary) - 1);
  return PSIM_OK;
}

static psim_status check_costdb(const char *file, const cJSON *root, char *summary) {
  psim_costdb db;
  psim_costdb_init(&db);
  psim_status s = psim_costdb_from_json(file, root, &db);
  if (s == PSIM_OK)
    snprintf(summary, SUMMARY_MAX, "cost database: %zu entries, %d collective tables, %s '%.64s'",
             db.n_entries, (int)db.n_colls, db.fp.device, db.fp.name);
  psim_costdb_destroy(&db);
  return s;
}

/* Plans (issue 18, defect 9): the members export and report check
 * (psim_plan_check), then the strategy as a strategy file is checked. */
static psim_status check_plan(const char *file, const cJSON *root, char *summary) {
  PSIM_CHECK(psim_plan_check(root, file));
  PSIM_CHECK(psim_strategy_check_json(file, psim_plan_strategy_json(root)));
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *cluster = cJSON_GetObjectItemCaseSensitive(root, "cluster");
  snprintf(summary, SUMMARY_MAX,
           "plan of %.64s on %.64s; fit to them is checked by 'plansim expand'",
           cJSON_IsString(model) ? model->valuestring : "a model",
           cJSON_IsString(cluster) ? cluster->valuestring : "a cluster");
  return PSIM_OK;
}

/* Sweeps: only the format key is checked until their issue lands. */

static psim_status check_sweep(const char *file, const cJSON *root, char *summary) {
  PSIM_CHECK(psim_sweep_check_size(file, root)); /* issue 24: refuse what would overflow */
  snprintf(summary, SUMMARY_MAX, "sweep: format key only; deeper validation comes with sweeps");
  return PSIM_OK;
}

static const check_format formats[] = {
    {"plansim.model/1", check_model},       {"plansim.cluster/1", check_cluster},
    {"plansim.strategy/1", check_strategy}, {"plansim.costdb/1", check_costdb},
    {"plansim.plan/1", check_plan},         {"plansim.sweep/1", check_sweep},
};
enum { N_FORMATS = sizeof formats / sizeof formats[0] };

static void known_formats(char *out, size_t n) {
  out[0] = '\0';
  for (int i = 0; i < N_FORMATS; i++) {
    strncat(out, formats[i].name, n - strlen(out) - 1);
    if (i + 1 < N_FORMATS)
      strncat(out, ", ", n - strlen(out) - 1);
  }
}

/* Copies at most 80 bytes of s into out, printable ASCII kept and every other
 * byte written as \xHH, so messages stay one readable line. */
static void printable(const char *s, char *out, size_t size) {
  size_t o = 0;
  for (size_t i = 0; s[i] && i < 80 && o + 5 < size; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch >= 0x20 && ch < 0x7f)
      out[o++] = (char)ch;
    else
      o += (size_t)snprintf(out + o, size - o, "\\x%02x", ch);
  }
  out[o] = '\0';
}

static int compare_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Fails on a key that appears twice at the top level (cJSON keeps both).
 * Sorts the keys: O(k log k) for k keys, so a file with a million keys is fast. */
static psim_status check_top_keys(psim_jctx *c, const cJSON *root) {
  size_t n = 0;
  for (const cJSON *it = root->child; it; it = it->next)
    n++;
  if (n < 2)
    return PSIM_OK;
  const char **keys = psim_malloc(n * sizeof *keys);
  if (!keys)
    return psim_error(PSIM_ENOMEM, "%s: out of memory checking keys", c->file);
  size_t i = 0;
  for (const cJSON *it = root->child; it; it = it->next)
    keys[i++] = it->string;
  qsort(keys, n, sizeof *keys, compare_keys);
  psim_status s = PSIM_OK;
  for (i = 1; i < n && s == PSIM_OK; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0) {
      char shown[400];
      printable(keys[i], shown, sizeof shown);
      s = psim_jerr(c, "duplicate key '%s'", shown);
    }
  psim_free(keys);
  return s;
}

/* Finds the validator for root's "format" key. */
static psim_status find_format(const char *file, const cJSON *root, const check_format **out) {
  psim_jctx c;
  psim_jctx_init(&c, file);
  char list[256];
  known_formats(list, sizeof list);
  if (!cJSON_IsObject(root))
    return psim_jerr(&c, "expected a JSON object with a \"format\" key (%s)", list);
  PSIM_CHECK(check_top_keys(&c, root));
  const char *name = NULL;
  PSIM_CHECK(psim_json_string(&c, root, "format", false, &name));
  if (!name)
    return psim_jerr(&c, "missing key 'format'; expected one of: %s", list);
  for (int i = 0; i < N_FORMATS; i++)
    if (strcmp(formats[i].name, name) == 0) {
      *out = &formats[i];
      return PSIM_OK;
    }
  char shown[400];
  printable(name, shown, sizeof shown);
  psim_jctx_key(&c, "format");
  return psim_jerr(&c, "unknown format '%s'; expected one of: %s", shown, list);
}

/* Checks one file; on success prints its "ok" line on stdout. */
static psim_status check_file(const char *file) {
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  const check_format *fmt = NULL;
  char summary[SUMMARY_MAX] = "";
  psim_status s = find_format(file, root, &fmt);
  if (s == PSIM_OK)
    s = fmt->check(file, root, summary);
  cJSON_Delete(root);
  char shown[2 * SUMMARY_MAX]; /* names in the summary may hold control characters */
  psim_cli_escape(summary, false, shown, sizeof shown);
  if (s == PSIM_OK)
    printf("%s: ok (%s)\n", file, shown);
  return s;
}

/* The status to report for several files: a bad-input status unless some
 * failure was of another kind (out of memory, I/O), which then wins. */
static psim_status worse(psim_status a, psim_status b) {
  if (a == PSIM_OK)
    return b;
  if (a == PSIM_EINPUT && b != PSIM_OK)
    return b;
  return a;
}

psim_status psim_cmd_check(int argc, char **argv) {
  int first = 1;
  if (first < argc && strcmp(argv[first], "--") == 0)
    first++; /* every argument after "--" is a file, even "-x" */
  else
    for (int i = first; i < argc; i++)
      if (argv[i][0] == '-' && argv[i][1] != '\0')
        return psim_cli_usage("check", "unknown option '%s'", argv[i]);
  if (first >= argc)
    return psim_cli_usage("check", "expected one or more files");
  if (argc - first == 1)
    return check_file(argv[first]); /* main prints the one message */
  psim_status result = PSIM_OK;
  int bad = 0;
  for (int i = first; i < argc; i++) {
    psim_status s = check_file(argv[i]);
    if (s != PSIM_OK) {
      char msg[4096];
      psim_cli_escape(psim_error_message(), true, msg, sizeof msg);
      fprintf(stderr, "plansim check: %s\n", msg);
      result = worse(result, s);
      bad++;
    }
  }
  if (result != PSIM_OK)
    return psim_error(result, "%d of %d files failed the check", bad, argc - first);
  return PSIM_OK;
}
