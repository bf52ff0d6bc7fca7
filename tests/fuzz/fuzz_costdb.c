/* fuzz_costdb.c - libFuzzer target: the cost-database loader
 * (psim_costdb_from_json) and, when it loads, the writer and a reload of what
 * it wrote (a database that loads must write out to one that loads). */
#include <stdio.h>
#include <stdlib.h>

#include "costdb/costdb.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const psim_costdb *db) {
  cJSON *out = NULL;
  if (psim_costdb_to_json(db, &out) == PSIM_OK) {
    psim_costdb back;
    psim_costdb_init(&back);
    if (psim_costdb_from_json("written.json", out, &back) != PSIM_OK) {
      fprintf(stderr, "written cost database does not load back: %s\n", psim_error_message());
      abort();
    }
    psim_costdb_destroy(&back);
  }
  cJSON_Delete(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *root = psim_fuzz_parse(data, size);
  if (!root)
    return 0;
  psim_costdb db;
  psim_costdb_init(&db);
  if (psim_costdb_from_json("fuzz.json", root, &db) == PSIM_OK)
    round_trip(&db);
  psim_costdb_destroy(&db);
  cJSON_Delete(root);
  psim_error_clear();
  return 0;
}
