/* registry.h - the model families and their options: the one table that
 * `plansim model FAMILY` (parsing and help) and sweeps' generated models
 * both read, so an option means the same thing, and is refused the same way,
 * in both. */
#ifndef PSIM_GEN_REGISTRY_H
#define PSIM_GEN_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "models/generators.h"

typedef enum psim_gen_type {
  PSIM_GEN_INT,
  PSIM_GEN_STR,
  PSIM_GEN_BOOL,
  PSIM_GEN_DBL
} psim_gen_type;

/* One option. Its sweep key is key ("kv_heads"); its command-line flag is
 * --key with '-' for '_' ("--kv-heads"). */
typedef struct psim_gen_option {
  const char *key;
  psim_gen_type type;
  size_t offset;        /* into the family's options struct (tf or net) */
  const char *families; /* space-separated families that take it */
  double min, max;      /* numbers: the accepted range (min excluded for DBL; a negative
                           min on a DBL stands for [0, max]) */
  const char *unset;    /* help: what 0 or NULL (the initial value) stands for, or NULL */
  const char *help;
} psim_gen_option;

/* The options of any family: a family uses tf (gpt, llama, bert, moe) or net. */
typedef struct psim_gen_opts {
  psim_gen_tf_opts tf;
  psim_gen_net_opts net;
} psim_gen_opts;

typedef struct psim_gen_family {
  const char *name;
  const char *help; /* one line for `plansim help model` */
  void (*tf_init)(psim_gen_tf_opts *o);
  psim_status (*tf_gen)(const psim_gen_tf_opts *o, struct cJSON **out);
  psim_status (*net_gen)(const psim_gen_net_opts *o, struct cJSON **out);
} psim_gen_family;

/* Every family, ending with a {NULL} entry. */
const psim_gen_family *psim_gen_families(void);
/* The family NAME, or NULL. */
const psim_gen_family *psim_gen_family_find(const char *name);
/* "gpt, llama, ..., dlrm": the family names for messages. */
const char *psim_gen_family_list(void);

/* o with family f's defaults. */
void psim_gen_opts_init(const psim_gen_family *f, psim_gen_opts *o);
/* The option of family f with sweep key KEY; NULL when there is none or f does
 * not take it (both are refused: "unknown option"). */
const psim_gen_option *psim_gen_option_find(const psim_gen_family *f, const char *key);
/* True when v is in x's range (min excluded for DBL; whole for INT). */
bool psim_gen_in_range(const psim_gen_option *x, double v);
/* x's range for messages: "a positive integer", "a positive number". */
const char *psim_gen_range_text(const psim_gen_option *x);
/* Setters: the option's type must match and a number be in range (asserted:
 * the callers check with psim_gen_in_range and report with their context). */
void psim_gen_set_int(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                      int64_t v);
void psim_gen_set_double(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                         double v);
void psim_gen_set_string(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                         const char *v);
void psim_gen_set_bool(psim_gen_opts *o, const psim_gen_family *f, const psim_gen_option *x,
                       bool v);
/* Runs family f's generator on o. */
psim_status psim_gen_generate(const psim_gen_family *f, const psim_gen_opts *o, struct cJSON **out);
/* The families and their options with defaults and ranges, for `plansim help model`. */
void psim_gen_print_help(FILE *out);

#endif
