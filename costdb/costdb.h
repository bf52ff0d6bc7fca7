/* costdb.h - the cost database (plansim.costdb/1): measured kernel times keyed
 * by kernel shape, exact O(1) lookup, interpolation, efficiency fitting and
 * crash-safe persistence. Format reference: docs/costdb.md.
 *
 * Keys. An entry is keyed by (kind, fn, dtype, pass, shape). The shape is the
 * *kernel shape* of the shard: a short canonical vector that determines the
 * kernel the profiler runs, independent of how a model names its dims, so a
 * GEMM measured for one model serves every model with the same GEMM. Each
 * kind has a fixed shape signature (psim_costdb_signature):
 *   matmul/einsum    "bmnk"  batch, M, N, K (C[b,m,n] = sum_k A[b,m,k] B[b,k,n])
 *   attention        "bqkd"  batch*heads, query length, key length, head dim
 *   softmax, layernorm, rmsnorm, cross_entropy
 *                    "ra"    rows, length of the normalised axis
 *   elementwise      "ob"    output elements, elements of the second input
 *                            (0 for unary, < o when broadcast); fn = function
 *   dropout          "o"     elements
 *   embedding        "thv"   tokens, hidden, vocab (shard of the table)
 *   conv2d           "bchwoxys" batch, in channels, out height, out width,
 *                            out channels, kernel h, kernel w, stride
 *   pool2d, concat, split, reshape, transpose, dispatch, combine
 *                    "io"    elements read, elements written (data movement)
 *   adam (optimizer update, PSIM_COSTDB_KIND_ADAM) "p" parameters
 * psim_costdb_key_from_op maps a model op shard to its key.
 *
 * Units: seconds for times, FLOPs, bytes. */
#ifndef PSIM_COSTDB_H
#define PSIM_COSTDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/core/hashmap.h"
#include "sim/core/status.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"

/* Where a compute time came from: the database's lookup gives the first
 * two, the roofline (costdb/cost.h) the third; the simulator counts compute
 * seconds by origin. */
typedef enum psim_cost_origin {
  PSIM_ORIGIN_MEASURED = 0, /* an exact entry of the cost database */
  PSIM_ORIGIN_INTERPOLATED, /* from measured neighbours of the same kind and dtype,
                               or an entry measured on a slice and scaled */
  PSIM_ORIGIN_ESTIMATED,    /* the roofline with the device type's efficiency curves */
  PSIM_ORIGIN_COUNT
} psim_cost_origin;

/* Kind code of the optimizer update (Adam), which is not a model op kind. */
#define PSIM_COSTDB_KIND_ADAM  ((int32_t)PSIM_OP_KIND_COUNT)
#define PSIM_COSTDB_KIND_COUNT (PSIM_COSTDB_KIND_ADAM + 1)
#define PSIM_COSTDB_MAX_SHAPE  8
#define PSIM_COSTDB_FN_LEN     24

typedef struct psim_cost_key {
  int32_t kind; /* psim_op_kind or PSIM_COSTDB_KIND_ADAM */
  psim_dtype dtype;
  psim_pass pass;
  char fn[PSIM_COSTDB_FN_LEN]; /* elementwise fn, "causal" for attention, else "" */
  int32_t n;                   /* shape length = strlen(signature) */
  int64_t shape[PSIM_COSTDB_MAX_SHAPE];
} psim_cost_key;

typedef struct psim_cost_entry {
  psim_cost_key key;
  double median_s; /* median of the timed repetitions, s */
  double iqr_s;    /* interquartile range (p75 - p25), s */
  double min_s;    /* fastest repetition, s */
  int64_t count;   /* timed repetitions */
  double scale;    /* 1 = measured as is; > 1 = measured on a 1/scale slice of
                      the first shape dim and scaled linearly (FLOP cap) */
} psim_cost_entry;

/* Device the measurements were taken on. */
typedef struct psim_costdb_fingerprint {
  char device[16];   /* "cpu" or "cuda" */
  char name[128];    /* CPU model name or GPU name */
  int32_t cores;     /* CPU cores, or GPU streaming multiprocessors */
  int32_t threads;   /* BLAS threads per simulated device (1 on CPU) */
  char library[256]; /* openblas_get_config(), or "cuBLAS N, driver M" */
} psim_costdb_fingerprint;

typedef struct psim_costdb {
  psim_costdb_fingerprint fp;
  psim_cost_entry *entries;
  size_t n_entries, cap_entries;
  psim_coll_table *colls; /* measured collective tables, owned */
  int32_t n_colls;
  psim_hmap index; /* key hash -> entry index */
} psim_costdb;

/* Merge policy when an entry's key is already present. */
typedef enum psim_costdb_merge_mode {
  PSIM_MERGE_REPLACE = 0, /* the incoming entry replaces the present one */
  PSIM_MERGE_COMBINE      /* count-weighted median, summed counts, widest spread */
} psim_costdb_merge_mode;

void psim_costdb_init(psim_costdb *db);
void psim_costdb_destroy(psim_costdb *db);

/* Adds or updates one entry (policy mode when the key exists). Amortised O(1). */
psim_status psim_costdb_add(psim_costdb *db, const psim_cost_entry *e, psim_costdb_merge_mode mode);
/* The entry with this key, or NULL. O(1). */
const psim_cost_entry *psim_costdb_find(const psim_costdb *db, const psim_cost_key *key);
/* Adds every entry and collective table of src into dst. O(|src|). */
psim_status psim_costdb_merge(psim_costdb *dst, const psim_costdb *src,
                              psim_costdb_merge_mode mode);
/* Adds (or replaces, same kind/group/scope) a collective table; copies it. */
psim_status psim_costdb_add_coll(psim_costdb *db, const psim_coll_table *t);

/* Loads a file into an empty db. Errors: PSIM_EINPUT naming the file and the
 * JSON path. A missing file is an error (see psim_costdb_save for merging). */
psim_status psim_costdb_load(const char *file, psim_costdb *db);
struct cJSON;
psim_status psim_costdb_from_json(const char *file, const struct cJSON *root, psim_costdb *db);
psim_status psim_costdb_to_json(const psim_costdb *db, struct cJSON **out);
/* Validates a file (for plansim check); prints nothing. */
psim_status psim_costdb_check_file(const char *file);

/* Saves db into file, safe against concurrent savers and crashes: takes an
 * exclusive flock on FILE.lock, re-reads FILE if it exists, merges db's
 * entries into it (db's entries replace those with the same key), writes a
 * temporary file, fsyncs and renames it over FILE. A process killed at any
 * point leaves either the old or the new complete file. Refuses (PSIM_EINPUT)
 * to merge into a file whose fingerprint names another device. */
psim_status psim_costdb_save(const psim_costdb *db, const char *file);

/* Kernel-shape signature of a kind ("bmnk", ...); NULL for an unknown kind. */
const char *psim_costdb_signature(int32_t kind);
/* Name of a key's kind ("matmul", ..., "adam"). */
const char *psim_costdb_kind_name(int32_t kind);
psim_status psim_costdb_kind_parse(const char *s, int32_t *out);
/* "measured", "interpolated" or "estimated". */
const char *psim_cost_origin_name(psim_cost_origin o);
/* dtype names as in models (fp32, fp16, bf16, ...); kept here so the database
 * does not depend on the model loader. */
const char *psim_costdb_dtype_name(psim_dtype dt);
psim_status psim_costdb_dtype_parse(const char *s, psim_dtype *out);
/* Fills key for one shard of op (shard_sizes[i] = extent of op->dims[i]). */
psim_status psim_costdb_key_from_op(const psim_model *m, const psim_op *op,
                                    const int64_t *shard_sizes, psim_pass pass, psim_cost_key *key);
/* Key of the optimizer update of n parameters of dtype dt. */
void psim_costdb_key_adam(int64_t n_params, psim_dtype dt, psim_cost_key *key);
/* Work of a key's kernel: FLOPs (2BMNK for a GEMM, ...) and bytes of memory
 * traffic (inputs + outputs, docs/costdb.md), for fitting and interpolation. */
void psim_costdb_key_work(const psim_cost_key *key, double *flops, double *bytes);
/* True when the two keys are equal. */
bool psim_cost_key_equal(const psim_cost_key *a, const psim_cost_key *b);
/* "matmul fp32 fwd [1,512,512,512]" into buf. */
const char *psim_cost_key_format(const psim_cost_key *key, char *buf, int bufsize);

/* Interpolation options. */
typedef struct psim_costdb_interp_opts {
  int32_t neighbours; /* nearest entries used by the local fit (default 0 = 3 * (n + 1)) */
  double max_outside; /* how far (log2 units) a query may lie outside the measured
                         range in any shape dim and still be interpolated (default 1) */
} psim_costdb_interp_opts;
void psim_costdb_interp_opts_init(psim_costdb_interp_opts *o);

/* Cost of a kernel: the exact entry (PSIM_ORIGIN_MEASURED; O(1)), else an
 * interpolation of log(time/work) in log2(shape) from measured entries with
 * the same kind, fn, dtype and pass (PSIM_ORIGIN_INTERPOLATED; O(entries of
 * that group)): multilinear over the enclosing grid cell when all its corners
 * are measured, else a local linear (LOESS) fit over the nearest entries. Returns false when
 * neither applies, so the caller falls back to the roofline (psim_cost_roofline). opts
 * may be NULL. Never allocates; thread-safe for concurrent readers. */
bool psim_costdb_lookup(const psim_costdb *db, const psim_cost_key *key,
                        const psim_costdb_interp_opts *opts, double *seconds,
                        psim_cost_origin *origin);

/* Fits the efficiency curves of dt to the database's measurements of dtype
 * dtype: GEMM entries give gemm_max and gemm_half_flops by least squares on
 * t = (f + half) / (peak * gemm_max) (relative errors), memory-bound entries
 * give mem. Fields with too few measurements (< 3) keep dt's values. */
psim_status psim_costdb_fit_efficiency(const psim_costdb *db, const psim_device_type *dt,
                                       psim_dtype dtype, psim_efficiency *out);

#endif
