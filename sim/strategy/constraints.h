/* constraints.h - the one reader of per-op overrides and partial strategies
 * (--fix): the "ops" object (op name or shell glob -> split, devices,
 * replicas) and the top-level split, layout, mesh.axes, recompute and
 * pipeline, read once into psim_constraints.
 *
 * Each user interprets the type by its own rules (docs/strategy.md,
 * docs/search.md): an explicit strategy applies its ops overrides exactly
 * (strategy_load.c); MCMC and exhaustive search keep split, devices, a layout
 * with mesh.axes and recompute (search/mcmc/mcmc_start.c); the Alpa optimizer
 * reads exact split degrees, a mesh, a layout, stages and recompute
 * (search/alpa/alpa_fix.c). The reader never refuses a document (only
 * PSIM_ENOMEM): every value keeps its JSON node, so that each user refuses
 * what it does not keep with its own message and the value's JSON path. */
#ifndef PSIM_CONSTRAINTS_H
#define PSIM_CONSTRAINTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "sim/core/status.h"

/* One key -> value entry: a dim or role with its degree, a layout key with
 * its axis, a mesh axis with its size. */
typedef struct psim_constraint_entry {
  const char *key;    /* the JSON key */
  const cJSON *json;  /* the value as written (for errors with its JSON path) */
  bool is_number;     /* number holds the value */
  double number;      /* when is_number */
  const char *string; /* the value when it is a string, else NULL */
} psim_constraint_entry;

/* An object of entries; json == NULL when the key is absent. n == 0 when
 * json is not an object. */
typedef struct psim_constraint_map {
  const cJSON *json;
  int32_t n;
  psim_constraint_entry *entry;
} psim_constraint_map;

/* One "ops" entry. */
typedef struct psim_constraint_op {
  const char *pattern; /* op name or shell glob */
  bool star;           /* the pattern holds a '*' */
  const cJSON *json;   /* the entry (its keys in document order) */
  psim_constraint_map split;
  const cJSON *devices; /* as written; NULL when absent */
  /* devices as indices when they are a non-empty array of integers >= 0
   * (NULL otherwise: names, a range or anything else) */
  int32_t n_indices;
  int32_t *indices;
  const cJSON *replicas; /* as written; NULL when absent */
} psim_constraint_op;

typedef struct psim_constraints {
  const char *file; /* for messages; may be NULL */
  const cJSON *root;
  const cJSON *ops_json; /* "ops" as written; NULL when absent */
  int32_t n_ops;         /* entries when "ops" is an object */
  psim_constraint_op *ops;
  psim_constraint_map split;     /* top-level split: dim or role -> degree */
  psim_constraint_map layout;    /* dim or role -> mesh axis */
  const cJSON *mesh;             /* "mesh" as written */
  psim_constraint_map mesh_axes; /* mesh.axes: axis -> size */
  const cJSON *recompute, *pipeline;
} psim_constraints;

void psim_constraints_init(psim_constraints *k);
void psim_constraints_destroy(psim_constraints *k);
/* Reads root (NULL: no constraints) into k; only PSIM_ENOMEM fails. */
psim_status psim_constraints_read(const cJSON *root, const char *file, psim_constraints *k);
/* Reads an "ops" object alone (an explicit strategy's overrides). */
psim_status psim_constraints_read_ops(const cJSON *ops, psim_constraints *k);
/* Whether op `name` matches entry e as a shell glob. */
bool psim_constraint_op_matches(const psim_constraint_op *e, const char *name);
/* Entry `key` of map, or NULL. */
const psim_constraint_entry *psim_constraint_map_find(const psim_constraint_map *map,
                                                      const char *key);

#endif
