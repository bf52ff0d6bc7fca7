/* alpa_fix.h - partial strategies (--fix) as constraints of the Alpa
 * optimizer: op splits and a mesh layout fix ILP variables; micro-batches,
 * stage layer ranges and recomputation fix DP choices. */
#ifndef PSIM_ALPA_FIX_H
#define PSIM_ALPA_FIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

#define PSIM_ALPA_FIX_MAX_OPS 32

typedef struct psim_alpa_fix_op {
  char pattern[128]; /* op name or shell glob */
  int32_t n_split;
  char split_key[PSIM_MAX_OP_DIMS][64]; /* dim or role name */
  int32_t split_degree[PSIM_MAX_OP_DIMS];
} psim_alpa_fix_op;

typedef struct psim_alpa_fix {
  bool active;
  const char *file;
  int32_t n_ops;
  psim_alpa_fix_op ops[PSIM_ALPA_FIX_MAX_OPS];
  int32_t n_micro;  /* 0 = free */
  int32_t n_stages; /* 0 = free; else stage_last[i] = last layer of stage i */
  int32_t *stage_last;
  bool has_recompute;
  psim_recompute recompute;
  bool has_mesh;
  int32_t mesh[2];
  char axis_name[2][64];
  int32_t n_layout;
  char layout_key[PSIM_ALPA_FIX_MAX_OPS][64];
  int32_t layout_axis[PSIM_ALPA_FIX_MAX_OPS];
} psim_alpa_fix;

void psim_alpa_fix_init(psim_alpa_fix *f);
void psim_alpa_fix_destroy(psim_alpa_fix *f);
struct cJSON;
/* Parses a partial plansim.strategy/1 document (root may be NULL: no fix). */
psim_status psim_alpa_fix_parse(const struct cJSON *root, const char *file, const psim_model *m,
                                psim_alpa_fix *f);
/* degree[i] for op dim i: 0 = free, else the fixed degree (unlisted dims of
 * a matched op are fixed to 1). *entries: bit e set for each entry matched. */
psim_status psim_alpa_fix_degrees(const psim_alpa_fix *f, const psim_model *m, int32_t op,
                                  int32_t *degree, uint64_t *entries);
/* Op dim the layout maps to mesh axis `axis` for op, or -1 (sets the entry bit). */
int32_t psim_alpa_fix_layout_dim(const psim_alpa_fix *f, const psim_model *m, int32_t op, int axis,
                                 uint64_t *entries);
/* "ops.a, layout.b" for the entries set in the mask. */
void psim_alpa_fix_describe(const psim_alpa_fix *f, uint64_t entries, char *buf, size_t size);

#endif
