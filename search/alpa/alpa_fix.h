/* alpa_fix.h - partial strategies (--fix) as constraints of the Alpa
 * optimizer: op splits and a mesh layout fix ILP variables; micro-batches,
 * stage layer ranges and recomputation fix DP choices. The document is read
 * once by sim/strategy/constraints.h; this file applies Alpa's rules to it.
 *
 * Entries are numbered for blame: ops entries 0..n_ops-1 in document order,
 * then layout entries n_ops..n_ops+n_layout-1. */
#ifndef PSIM_ALPA_FIX_H
#define PSIM_ALPA_FIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/ir/model.h"
#include "sim/strategy/constraints.h"
#include "sim/strategy/strategy.h"

typedef struct psim_alpa_fix {
  bool active;
  const char *file;
  const psim_constraints *k; /* --fix as read once (never NULL; empty without --fix) */
  int32_t n_micro;           /* 0 = free */
  int32_t n_stages;          /* 0 = free; else stage_last[i] = last layer of stage i */
  int32_t *stage_last;
  bool has_recompute;
  psim_recompute recompute;
  bool has_mesh;
  int32_t mesh[2];
  const char *axis_name[2]; /* "" for a second axis not given */
  int32_t *layout_axis;     /* per layout entry: the mesh axis (0 or 1) */
} psim_alpa_fix;

void psim_alpa_fix_init(psim_alpa_fix *f);
void psim_alpa_fix_destroy(psim_alpa_fix *f);
/* Takes a partial plansim.strategy/1 document as read (k may be NULL: no fix) by Alpa's
 * rules; f keeps a pointer to k, which must outlive it. */
psim_status psim_alpa_fix_parse(const psim_constraints *k, const psim_model *m, psim_alpa_fix *f);
/* Entries that can be blamed (ops entries, then layout entries). */
int32_t psim_alpa_fix_entries(const psim_alpa_fix *f);
/* degree[i] for op dim i: 0 = free, else the fixed degree (unlisted dims of
 * a matched op are fixed to 1). hit (NULL, or psim_alpa_fix_entries bytes):
 * set to 1 for each ops entry matched. */
psim_status psim_alpa_fix_degrees(const psim_alpa_fix *f, const psim_model *m, int32_t op,
                                  int32_t *degree, uint8_t *hit);
/* Whether ops a and b match the same ops entries. */
bool psim_alpa_fix_same_entries(const psim_alpa_fix *f, const psim_model *m, int32_t a, int32_t b);
/* Op dim the layout maps to mesh axis `axis` for op, or -1 (marks the entry in hit). */
int32_t psim_alpa_fix_layout_dim(const psim_alpa_fix *f, const psim_model *m, int32_t op, int axis,
                                 uint8_t *hit);
/* "ops.a, layout.b" for the entries marked in blame. */
void psim_alpa_fix_describe(const psim_alpa_fix *f, const uint8_t *blame, char *buf, size_t size);

#endif
