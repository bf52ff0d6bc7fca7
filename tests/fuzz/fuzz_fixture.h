/* fuzz_fixture.h - the fixed model and cluster that strategy and plan
 * documents are expanded against (tests/data/tiny-gpt.json on one 8-GPU
 * DGX A100), loaded once per fuzzing process. */
#ifndef PSIM_FUZZ_FIXTURE_H
#define PSIM_FUZZ_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "sim/ir/cluster.h"
#include "sim/ir/model.h"

#ifndef PSIM_SOURCE_ROOT
#define PSIM_SOURCE_ROOT "."
#endif

static psim_model psim_fuzz_model;
static psim_cluster psim_fuzz_cluster;

/* Loads the fixture; aborts the fuzzer (not a finding) when the files are missing. */
static inline void psim_fuzz_fixture_load(void) {
  static int loaded;
  if (loaded)
    return;
  loaded = 1;
  psim_json_init_hooks();
  psim_model_init(&psim_fuzz_model);
  psim_cluster_init(&psim_fuzz_cluster);
  if (psim_model_load(PSIM_SOURCE_ROOT "/tests/data/tiny-gpt.json", &psim_fuzz_model) != PSIM_OK ||
      psim_cluster_load(PSIM_SOURCE_ROOT "/topologies/dgx-a100-x1.json", &psim_fuzz_cluster) !=
          PSIM_OK) {
    fprintf(stderr, "fuzz fixture: %s\n", psim_error_message());
    abort();
  }
}

#endif
