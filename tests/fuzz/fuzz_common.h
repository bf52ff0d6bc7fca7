/* fuzz_common.h - shared helpers of the libFuzzer targets (tests/fuzz/).
 *
 * Every target takes the fuzzer's bytes as the content of a file: it copies
 * them into a NUL-terminated buffer, parses them with psim_json_parse (the
 * parser every loader uses) and hands the document to one loader. Any status
 * is fine; a crash, a sanitizer report, a leak or a hang is a bug. */
#ifndef PSIM_FUZZ_COMMON_H
#define PSIM_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"

/* Parses data[0..size) as a JSON document; NULL when it is not one. */
static inline cJSON *psim_fuzz_parse(const uint8_t *data, size_t size) {
  psim_json_init_hooks();
  char *text = psim_malloc(size + 1);
  if (!text)
    return NULL;
  memcpy(text, data, size);
  text[size] = '\0';
  cJSON *root = NULL;
  if (psim_json_parse("fuzz.json", text, size, &root) != PSIM_OK)
    root = NULL;
  psim_free(text);
  psim_error_clear();
  return root;
}

#endif
