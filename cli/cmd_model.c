/* cmd_model.c - plansim model FAMILY [options] [-o FILE]: runs a generator.
 * The families and their options are models/registry.c's, which sweeps read too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "models/registry.h"
#include "sim/core/json.h"

/* The option --flag of family f ("--kv-heads" is key "kv_heads"); NULL when
 * f takes none of that name. */
static const psim_gen_option *find_flag(const psim_gen_family *f, const char *arg) {
  char key[64];
  if (strncmp(arg, "--", 2) != 0 || strchr(arg, '_') || strlen(arg + 2) >= sizeof key)
    return NULL;
  snprintf(key, sizeof key, "%s", arg + 2);
  for (char *p = key; *p; p++)
    *p = *p == '-' ? '_' : *p;
  return psim_gen_option_find(f, key);
}

/* Sets option x (flag opt) from the text val, in the registry's range. */
static psim_status set_flag(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                            const char *opt, const char *val) {
  if (x->type == PSIM_GEN_STR) {
    psim_gen_set_string(o, f, x, val);
    return PSIM_OK;
  }
  if (x->type == PSIM_GEN_INT) {
    int64_t n, max = x->max >= 0x1p63 ? INT64_MAX : (int64_t)x->max;
    PSIM_CHECK(psim_cli_parse_int("model", opt, val, (int64_t)x->min, max, &n));
    psim_gen_set_int(o, f, x, n);
    return PSIM_OK;
  }
  char *end = NULL;
  errno = 0;
  double d = strtod(val, &end);
  if (errno || end == val || *end || !psim_gen_in_range(x, d))
    return psim_cli_usage("model", "%s wants %s, not '%s'", opt, psim_gen_range_text(x), val);
  psim_gen_set_double(o, f, x, d);
  return PSIM_OK;
}

/* Parses argv[2..] into o; *out gets the -o path. */
static psim_status parse_flags(int argc, char **argv, const psim_gen_family *f, psim_gen_opts *o,
                               const char **out) {
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
      PSIM_CHECK(psim_cli_need_value("model", argc, argv, i));
      *out = argv[++i];
      continue;
    }
    const psim_gen_option *x = find_flag(f, a);
    if (!x)
      return psim_cli_usage("model", "unknown option '%s' for %s", a, f->name);
    if (x->type == PSIM_GEN_BOOL) {
      psim_gen_set_bool(o, f, x, true);
      continue;
    }
    PSIM_CHECK(psim_cli_need_value("model", argc, argv, i));
    PSIM_CHECK(set_flag(o, f, x, a, argv[++i]));
  }
  return PSIM_OK;
}

void psim_cmd_model_help(FILE *out) {
  psim_gen_print_help(out);
}

psim_status psim_cmd_model(int argc, char **argv) {
  if (argc < 2)
    return psim_cli_usage("model", "missing FAMILY (%s)", psim_gen_family_list());
  const psim_gen_family *f = psim_gen_family_find(argv[1]);
  if (!f)
    return psim_cli_usage("model", "unknown family '%s'; expected one of %s", argv[1],
                          psim_gen_family_list());
  const char *out = "-";
  psim_gen_opts o;
  psim_gen_opts_init(f, &o);
  PSIM_CHECK(parse_flags(argc, argv, f, &o, &out));
  PSIM_CHECK(psim_file_check_output("-o", out));
  cJSON *doc = NULL;
  PSIM_CHECK(psim_gen_generate(f, &o, &doc));
  psim_status s = psim_json_write_file(out, doc);
  cJSON_Delete(doc);
  return s;
}
