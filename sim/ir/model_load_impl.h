/* model_load_impl.h - private to the model loader (model_load*.c): the
 * loader's state and the steps its files share.
 *
 * Dependencies go one way: model_load.c -> model_load_blocks.c ->
 * model_load_ops.c, model_load_tensors.c -> model_load_names.c;
 * model_load_checks.c -> model_load_names.c; all of them -> model_impl.h. */
#ifndef PSIM_MODEL_LOAD_IMPL_H
#define PSIM_MODEL_LOAD_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/core/hashmap.h"
#include "sim/ir/model_impl.h"

enum { NAME_MAX_LEN = 1000 };
#define MAX_TENSORS (3 * PSIM_MODEL_MAX_OPS) /* tensors after expansion */

/* String -> index map (model_load_names.c): entries in insertion order, found through the
 * core hash map. Zero-initialised is empty. */
typedef struct psim_name_map {
  psim_hmap index; /* hash of a name -> its entry */
  char **key;      /* per entry: the name (owned) */
  int32_t *val;    /* per entry: its value */
  size_t cap, n;
} psim_name_map;

/* Per op while loading. */
typedef struct psim_model_opx {
  int32_t def;   /* index of the JSON path of its definition in defs */
  int32_t given; /* layer from the file or the enclosing block; -1 = infer */
} psim_model_opx;

typedef struct psim_model_loader {
  psim_model *m;
  psim_jctx c;
  psim_name_map dims, tensors, ops, defmap;
  size_t cap_dims, cap_tensors, cap_ops, cap_opx, cap_defs, cap_tdef;
  psim_model_opx *opx; /* per op (m->n_ops) */
  const char **defs;   /* JSON paths (owned by defmap) */
  int32_t n_defs;
  int32_t *tdef; /* per tensor: def index of its declaration */
  int32_t next_layer, cur_layer, depth;
} psim_model_loader;

/* Names visible in a block repeat (or at the top): prefix + local name,
 * then the enclosing scopes'. */
typedef struct psim_model_scope {
  const struct psim_model_scope *parent;
  char prefix[NAME_MAX_LEN];
  int32_t block, repeat_index; /* -1, 0 at the top */
} psim_model_scope;

/* ---- names (model_load_names.c) ---- */

/* Slot of key k: where it is, or the empty slot where it would go. */
/* Value of k, -1 when absent. */
int32_t psim_name_map_get(const psim_name_map *m, const char *k);
/* Inserts k (absent) with value v. */
psim_status psim_name_map_put(psim_name_map *m, const char *k, int32_t v);
/* The stored copy of name k (lives as long as the map), or NULL. */
const char *psim_name_map_key(const psim_name_map *m, const char *k);
void psim_name_map_destroy(psim_name_map *m);
/* out = a + b; false when that does not fit in NAME_MAX_LEN. */
bool psim_mload_join(char *out, const char *a, const char *b);
/* Index of the current JSON path in defs, adding it when new. */
psim_status psim_mload_def_here(psim_model_loader *L, int32_t *out);
/* Error at the definition path of def. */
psim_status psim_mload_def_err(psim_model_loader *L, int32_t def, const char *msg);
/* Tensor index of name seen from scope s (innermost first), -1 when none. */
int32_t psim_mload_resolve(psim_model_loader *L, const psim_model_scope *s, const char *name);

/* ---- dims and tensors (model_load_tensors.c) ---- */

psim_status psim_mload_dims(psim_model_loader *L, const cJSON *dims);
/* Declares the tensors of one group ("inputs", "weights", "tensors") in scope
 * s. outputs/outer (block only, may be NULL): local names of the block outputs
 * and, for the last repeat, the outer names they take. */
psim_status psim_mload_tensor_group(psim_model_loader *L, const cJSON *obj, const char *key,
                                    psim_tensor_kind kind, const psim_model_scope *s,
                                    const cJSON *outputs, const cJSON *outer);
/* Same rank and dims in the same order. */
bool psim_mload_same_shape(const psim_tensor *a, const psim_tensor *b);

/* ---- ops (model_load_ops.c) ---- */

/* Resolves the names of j[key] into t[], n within [lo, hi]. */
psim_status psim_mload_io(psim_model_loader *L, const psim_model_scope *s, const cJSON *j,
                          const char *key, int lo, int hi, int32_t *t, int32_t *n);
/* One op object j in scope s. */
psim_status psim_mload_op(psim_model_loader *L, const psim_model_scope *s, const cJSON *j);

/* ---- blocks (model_load_blocks.c) ---- */

/* The "ops" array: ops and blocks, in scope s. */
psim_status psim_mload_ops(psim_model_loader *L, const psim_model_scope *s, const cJSON *ops);
/* Ops and tensors after expansion (malformed parts count 1 op), counted from
 * the JSON before anything is expanded. */
typedef struct psim_mload_size {
  double ops, tensors;
} psim_mload_size;
/* Adds the expansion of the "ops" array ops (at nesting depth) to *n. */
void psim_mload_count(const cJSON *ops, int depth, psim_mload_size *n);
/* Adds the expansion of one element j of an "ops" array to *n. */
void psim_mload_count_item(const cJSON *j, int depth, psim_mload_size *n);

/* ---- after parsing (model_load_checks.c) ---- */

/* Orders the ops, assigns layers, checks the tensor rules, fills the work
 * terms, role dims and the parameter count. */
psim_status psim_mload_finish(psim_model_loader *L);

#endif
