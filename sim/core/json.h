/* json.h - reading JSON files with precise errors, and writing them atomically.
 *
 * Every JSON byte goes through cJSON. A psim_jctx carries the file name and the
 * JSON path of the value being read ("ops[12].in[1]") so that content errors
 * name both: "model.json: ops[12].in[1]: unknown tensor 'x'". */
#ifndef PSIM_JSON_H
#define PSIM_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/core/status.h"
#include "sim/core/units.h"

/* Largest JSON file plansim reads (bytes); larger files are refused. */
#define PSIM_JSON_MAX_BYTES ((size_t)256 << 20)

typedef struct psim_jctx {
  const char *file; /* name used in messages; not owned */
  char path[1024];  /* current JSON path, "" at the root */
  size_t len;
} psim_jctx;

/* Routes cJSON's allocations through psim_malloc (idempotent). */
void psim_json_init_hooks(void);

/* Reads and parses a file. A directory is PSIM_EINPUT ("is a directory").
 * Syntax errors give "file:LINE:COL: JSON syntax error: expected ..., found
 * '...'" with the 1-based column of the first offending character, counted in
 * UTF-8 characters. The caller owns *out (cJSON_Delete). */
psim_status psim_json_load_file(const char *file, cJSON **out);
/* Parses text of len bytes, NUL-terminated at text[len]; name is used in messages. */
psim_status psim_json_parse(const char *name, const char *text, size_t len, cJSON **out);

void psim_jctx_init(psim_jctx *c, const char *file);
/* Path pushes return the previous length; psim_jctx_pop restores it. */
size_t psim_jctx_key(psim_jctx *c, const char *key);
size_t psim_jctx_index(psim_jctx *c, size_t index);
void psim_jctx_pop(psim_jctx *c, size_t saved);

/* Records "file: path: message" as PSIM_EINPUT and returns PSIM_EINPUT. */
psim_status psim_jerr(const psim_jctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Fails naming the first key of obj that is not in allowed (NULL-terminated),
 * or when obj is not an object. */
psim_status psim_json_check_keys(psim_jctx *c, const cJSON *obj, const char *const *allowed);
psim_status psim_json_expect_object(psim_jctx *c, const cJSON *v);
psim_status psim_json_expect_array(psim_jctx *c, const cJSON *v);

/* Getters: when the key is absent, required ones fail and optional ones leave
 * *out unchanged (so callers preset defaults). Type errors name the path. */
psim_status psim_json_string(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                             const char **out);
psim_status psim_json_bool(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                           bool *out);
/* Integers must be whole numbers in [min, max]. */
psim_status psim_json_int(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                          int64_t min, int64_t max, int64_t *out);
psim_status psim_json_number(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                             double min, double max, double *out);
/* A number (SI) or a string with a unit of the given kind ("300 GB/s"). */
psim_status psim_json_quantity(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                               psim_unit_kind kind, double *out);
/* The same for a value that is not under a key (array elements). */
psim_status psim_json_value_int(psim_jctx *c, const cJSON *v, int64_t min, int64_t max,
                                int64_t *out);
psim_status psim_json_value_quantity(psim_jctx *c, const cJSON *v, psim_unit_kind kind,
                                     double *out);

/* Writes bytes to path atomically: a temporary file in the same folder,
 * fsync, rename. A killed process never leaves a truncated file at path.
 * Errors name path, not the temporary file. A character device or FIFO
 * (/dev/null) is written in place. */
psim_status psim_file_write_atomic(const char *path, const char *data, size_t len);
/* Run before any work for every output option, so a long search never ends
 * in "cannot create": PSIM_EINPUT naming option and path when path is empty,
 * is a directory (or ends in '/'), or its folder is missing or not writable.
 * "-" (standard output) passes. O(1) system calls. */
psim_status psim_file_check_output(const char *option, const char *path);
/* The same for an output folder that the command creates when absent
 * (sweep -o DIR): an existing path must be a writable folder. */
psim_status psim_file_check_output_dir(const char *option, const char *path);

/* Prints root (formatted) and writes it atomically; "-" writes to stdout. */
psim_status psim_json_write_file(const char *path, const cJSON *root);

/* Reads a whole file into a NUL-terminated buffer (caller frees with psim_free). */
psim_status psim_file_read(const char *path, size_t max_bytes, char **out, size_t *len);
/* The same, saying "expected EXPECTED" when PATH is no regular file (issue 24: a FIFO, a
 * device or a directory is refused with PSIM_EINPUT; /dev/stdin and /dev/fd/N are read). */
psim_status psim_file_read_expecting(const char *path, size_t max_bytes, const char *expected,
                                     char **out, size_t *len);

/* Creation helpers that turn a NULL from cJSON into PSIM_ENOMEM. */
psim_status psim_json_add_number(cJSON *obj, const char *key, double v);
psim_status psim_json_add_string(cJSON *obj, const char *key, const char *v);
psim_status psim_json_add_bool(cJSON *obj, const char *key, bool v);
psim_status psim_json_add_object(cJSON *obj, const char *key, cJSON **out);
psim_status psim_json_add_array(cJSON *obj, const char *key, cJSON **out);

#endif
