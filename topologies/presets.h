/* presets.h - cluster presets behind `plansim cluster PRESET`.
 *
 * A preset writes the hierarchical form of plansim.cluster/1 for a known
 * machine (docs/cluster.md lists them with the source of every figure):
 * dgx-a100-80g dgx-a100-40g dgx-h100 dgx-h200 dgx-b200 gb200-nvl72 gb300-nvl72
 * dgx-b300 dgx1-v100 p100-nvlink k80-pcie pcie-box cpu. */
#ifndef PSIM_PRESETS_H
#define PSIM_PRESETS_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "sim/core/status.h"

typedef struct psim_preset_opts {
  const char *preset;      /* required: one of psim_preset_names() */
  int32_t nodes;           /* servers; default 1 */
  int32_t nics_per_node;   /* 0 = the preset's figure */
  int32_t nodes_per_rack;  /* 0 = the preset's rack size (capped at nodes) */
  double oversubscription; /* fat-tree uplink oversubscription, >= 1; default 1 (non-blocking) */
  double nic_bw;           /* bytes/s per NIC per direction; 0 = the preset's figure */
  const char *name;        /* cluster name; NULL = "PRESET-xNODES" */
} psim_preset_opts;

void psim_preset_opts_init(psim_preset_opts *o);

/* Builds the cluster JSON (caller owns *out: cJSON_Delete). PSIM_EINPUT for
 * an unknown preset or options out of range. O(1): the file stays small
 * whatever the node count. */
psim_status psim_preset_cluster(const psim_preset_opts *o, cJSON **out);

/* NULL-terminated preset names, and a one-line description of each. */
const char *const *psim_preset_names(void);
const char *psim_preset_description(const char *preset);

#endif
