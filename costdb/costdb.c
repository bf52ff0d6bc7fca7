/* costdb.c - the cost database: entries, hash index, merge, names, keys. */
#include "costdb/costdb.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"

static const char *const kind_names[PSIM_COSTDB_KIND_COUNT] = {
    "matmul",    "elementwise", "dropout",       "softmax",  "layernorm", "rmsnorm",
    "attention", "embedding",   "cross_entropy", "conv2d",   "pool2d",    "concat",
    "split",     "reshape",     "transpose",     "dispatch", "combine",   "adam"};

static const char *const kind_sigs[PSIM_COSTDB_KIND_COUNT] = {
    "bmnk",     "ob", "o",  "ra", "ra", "ra", "bqkd", "thv", "ra",
    "bchwoxys", "io", "io", "io", "io", "io", "io",   "io",  "p"};

static const char *const origin_names[PSIM_ORIGIN_COUNT] = {"measured", "interpolated",
                                                            "estimated"};

const char *psim_costdb_signature(int32_t kind) {
  return kind >= 0 && kind < PSIM_COSTDB_KIND_COUNT ? kind_sigs[kind] : NULL;
}

const char *psim_costdb_kind_name(int32_t kind) {
  return kind >= 0 && kind < PSIM_COSTDB_KIND_COUNT ? kind_names[kind] : "?";
}

psim_status psim_costdb_kind_parse(const char *s, int32_t *out) {
  for (int32_t k = 0; k < PSIM_COSTDB_KIND_COUNT; k++)
    if (strcmp(s, kind_names[k]) == 0) {
      *out = k;
      return PSIM_OK;
    }
  if (strcmp(s, "einsum") == 0) {
    *out = PSIM_OP_MATMUL;
    return PSIM_OK;
  }
  return psim_error(PSIM_EINPUT, "unknown kind '%.40s'", s);
}

const char *psim_cost_origin_name(psim_cost_origin o) {
  return o < PSIM_ORIGIN_COUNT ? origin_names[o] : "?";
}

void psim_costdb_init(psim_costdb *db) {
  memset(db, 0, sizeof *db);
}

static void coll_table_free(psim_coll_table *t) {
  psim_free(t->bytes);
  psim_free(t->busbw);
  t->bytes = t->busbw = NULL;
}

void psim_costdb_destroy(psim_costdb *db) {
  psim_hmap_destroy(&db->index);
  psim_free(db->entries);
  for (int32_t i = 0; i < db->n_colls; i++)
    coll_table_free(&db->colls[i]);
  psim_free(db->colls);
  psim_costdb_init(db);
}

bool psim_cost_key_equal(const psim_cost_key *a, const psim_cost_key *b) {
  if (a->kind != b->kind || a->dtype != b->dtype || a->pass != b->pass || a->n != b->n)
    return false;
  if (strncmp(a->fn, b->fn, PSIM_COSTDB_FN_LEN) != 0)
    return false;
  return memcmp(a->shape, b->shape, (size_t)a->n * sizeof a->shape[0]) == 0;
}

/* Hash of the key's fields (fn up to its end, shape up to n only), as
 * psim_cost_key_equal compares them. */
static uint64_t key_hash(const psim_cost_key *k) {
  int64_t head[4] = {k->kind, k->dtype, k->pass, k->n};
  assert(k->n >= 0 && k->n <= PSIM_COSTDB_MAX_SHAPE);
  uint64_t h = psim_hmap_hash_bytes(head, sizeof head, 0);
  h = psim_hmap_hash_bytes(k->fn, strnlen(k->fn, PSIM_COSTDB_FN_LEN), h);
  return psim_hmap_hash_bytes(k->shape, (size_t)k->n * sizeof k->shape[0], h);
}

typedef struct key_query {
  const psim_costdb *db;
  const psim_cost_key *key;
} key_query;

static bool entry_has_key(const void *ctx, int32_t e) {
  const key_query *q = ctx;
  assert(e >= 0 && (size_t)e < q->db->n_entries);
  return psim_cost_key_equal(&q->db->entries[e].key, q->key);
}

/* Index of the entry with this key, or -1. */
static int32_t find_index(const psim_costdb *db, const psim_cost_key *key) {
  key_query q = {db, key};
  int32_t e = -1;
  if (!psim_hmap_find_eq(&db->index, key_hash(key), entry_has_key, &q, &e))
    return -1;
  return e;
}

const psim_cost_entry *psim_costdb_find(const psim_costdb *db, const psim_cost_key *key) {
  if (!db || db->n_entries == 0 || key->n < 0 || key->n > PSIM_COSTDB_MAX_SHAPE)
    return NULL;
  int32_t e = find_index(db, key);
  return e >= 0 ? &db->entries[e] : NULL;
}

static void combine(psim_cost_entry *old, const psim_cost_entry *e) {
  double c1 = (double)old->count, c2 = (double)e->count;
  if (c1 + c2 > 0)
    old->median_s = (old->median_s * c1 + e->median_s * c2) / (c1 + c2);
  old->iqr_s = old->iqr_s > e->iqr_s ? old->iqr_s : e->iqr_s;
  old->min_s = old->min_s < e->min_s ? old->min_s : e->min_s;
  old->count += e->count;
}

psim_status psim_costdb_add(psim_costdb *db, const psim_cost_entry *e,
                            psim_costdb_merge_mode mode) {
  assert(db->index.count == db->n_entries);
  if (e->key.n < 0 || e->key.n > PSIM_COSTDB_MAX_SHAPE)
    return psim_error(PSIM_EINPUT, "cost entry with %d shape dims (at most %d)", (int)e->key.n,
                      PSIM_COSTDB_MAX_SHAPE);
  int32_t at = find_index(db, &e->key);
  if (at >= 0) {
    if (mode == PSIM_MERGE_REPLACE)
      db->entries[at] = *e;
    else
      combine(&db->entries[at], e);
    return PSIM_OK;
  }
  if (db->n_entries >= INT32_MAX)
    return psim_error(PSIM_EINPUT, "a cost database holds at most %d entries", INT32_MAX);
  PSIM_CHECK(PSIM_VEC_RESERVE(db->entries, db->cap_entries, db->n_entries + 1));
  PSIM_CHECK(psim_hmap_add(&db->index, key_hash(&e->key), (int32_t)db->n_entries));
  db->entries[db->n_entries++] = *e;
  return PSIM_OK;
}

static bool coll_same(const psim_coll_table *a, const psim_coll_table *b) {
  return a->kind == b->kind && a->group_size == b->group_size && a->intra_node == b->intra_node;
}

psim_status psim_costdb_add_coll(psim_costdb *db, const psim_coll_table *t) {
  psim_coll_table c = *t;
  c.bytes = psim_malloc((size_t)(t->n_points ? t->n_points : 1) * sizeof(double));
  c.busbw = psim_malloc((size_t)(t->n_points ? t->n_points : 1) * sizeof(double));
  if (!c.bytes || !c.busbw) {
    coll_table_free(&c);
    return psim_error(PSIM_ENOMEM, "out of memory copying a collective table");
  }
  memcpy(c.bytes, t->bytes, (size_t)t->n_points * sizeof(double));
  memcpy(c.busbw, t->busbw, (size_t)t->n_points * sizeof(double));
  for (int32_t i = 0; i < db->n_colls; i++)
    if (coll_same(&db->colls[i], t)) {
      coll_table_free(&db->colls[i]);
      db->colls[i] = c;
      return PSIM_OK;
    }
  psim_coll_table *grown = psim_realloc(db->colls, (size_t)(db->n_colls + 1) * sizeof *grown);
  if (!grown) {
    coll_table_free(&c);
    return psim_error(PSIM_ENOMEM, "out of memory adding a collective table");
  }
  db->colls = grown;
  db->colls[db->n_colls++] = c;
  return PSIM_OK;
}

psim_status psim_costdb_merge(psim_costdb *dst, const psim_costdb *src,
                              psim_costdb_merge_mode mode) {
  for (size_t i = 0; i < src->n_entries; i++)
    PSIM_CHECK(psim_costdb_add(dst, &src->entries[i], mode));
  for (int32_t i = 0; i < src->n_colls; i++)
    PSIM_CHECK(psim_costdb_add_coll(dst, &src->colls[i]));
  if (!dst->fp.device[0])
    dst->fp = src->fp;
  return PSIM_OK;
}

static const char *const dtype_names[PSIM_DTYPE_COUNT] = {"fp32", "fp16",  "bf16",  "fp8",
                                                          "fp64", "int32", "int64", "bool"};

const char *psim_costdb_dtype_name(psim_dtype dt) {
  return dt < PSIM_DTYPE_COUNT ? dtype_names[dt] : "?";
}

psim_status psim_costdb_dtype_parse(const char *s, psim_dtype *out) {
  for (int i = 0; i < PSIM_DTYPE_COUNT; i++)
    if (strcmp(s, dtype_names[i]) == 0) {
      *out = (psim_dtype)i;
      return PSIM_OK;
    }
  return psim_error(PSIM_EINPUT, "unknown dtype '%.40s'", s);
}

const char *psim_cost_key_format(const psim_cost_key *key, char *buf, int bufsize) {
  int len = snprintf(buf, (size_t)bufsize, "%s%s%s %s %s [", psim_costdb_kind_name(key->kind),
                     key->fn[0] ? ":" : "", key->fn,
                     key->dtype < PSIM_DTYPE_COUNT ? dtype_names[key->dtype] : "?",
                     key->pass == PSIM_PASS_FWD ? "fwd" : "bwd");
  for (int32_t i = 0; i < key->n && len > 0 && len < bufsize; i++)
    len += snprintf(buf + len, (size_t)(bufsize - len), "%s%lld", i ? "," : "",
                    (long long)key->shape[i]);
  if (len > 0 && len < bufsize)
    snprintf(buf + len, (size_t)(bufsize - len), "]");
  return buf;
}

void psim_costdb_key_adam(int64_t n_params, psim_dtype dt, psim_cost_key *key) {
  memset(key, 0, sizeof *key);
  key->kind = PSIM_COSTDB_KIND_ADAM;
  key->dtype = dt;
  key->pass = PSIM_PASS_FWD;
  key->n = 1;
  key->shape[0] = n_params;
}

/* Work per kind class. Element sizes from the dtype; memory traffic counts
 * every operand read once and every result written once. */
static double dsize(psim_dtype dt) {
  static const double bytes[PSIM_DTYPE_COUNT] = {4, 2, 2, 1, 8, 4, 8, 1};
  return dt < PSIM_DTYPE_COUNT ? bytes[dt] : 4;
}

static void work_gemm(const psim_cost_key *k, double *flops, double *bytes) {
  double b = (double)k->shape[0], m = (double)k->shape[1], n = (double)k->shape[2];
  double kk = (double)k->shape[3], pass = k->pass == PSIM_PASS_BWD ? 2 : 1;
  *flops = 2 * b * m * n * kk * pass;
  *bytes = b * (m * kk + kk * n + m * n) * dsize(k->dtype) * pass;
}

static void work_attention(const psim_cost_key *k, double *flops, double *bytes) {
  double b = (double)k->shape[0], q = (double)k->shape[1], kv = (double)k->shape[2];
  double d = (double)k->shape[3], pass = k->pass == PSIM_PASS_BWD ? 2 : 1;
  *flops = 4 * b * q * kv * d * pass;
  *bytes = b * (2 * q * d + 2 * kv * d + q * kv) * dsize(k->dtype) * pass;
}

static void work_conv(const psim_cost_key *k, double *flops, double *bytes) {
  const int64_t *s = k->shape; /* b c h w o x y stride */
  double pass = k->pass == PSIM_PASS_BWD ? 2 : 1, ds = dsize(k->dtype);
  double out = (double)s[0] * (double)s[4] * (double)s[2] * (double)s[3];
  *flops = 2 * out * (double)s[1] * (double)s[5] * (double)s[6] * pass;
  double hin = (double)((s[2] - 1) * s[7] + s[5]), win = (double)((s[3] - 1) * s[7] + s[6]);
  double in = (double)s[0] * (double)s[1] * hin * win;
  *bytes = (out + in + (double)(s[4] * s[1] * s[5] * s[6])) * ds * pass;
}

/* Memory-bound kernels: FLOPs are nominal (elements); bytes dominate. */
static void work_memory(const psim_cost_key *k, double *flops, double *bytes) {
  double ds = dsize(k->dtype), pass = k->pass == PSIM_PASS_BWD ? 2 : 1;
  const int64_t *s = k->shape;
  switch (k->kind) {
  case PSIM_OP_ELEMENTWISE: *bytes = (2.0 * (double)s[0] + (double)s[1]) * ds; break;
  case PSIM_OP_EMBEDDING: *bytes = (double)s[0] * ((double)s[1] * ds + 8); break;
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_CROSS_ENTROPY: *bytes = 2.0 * (double)s[0] * (double)s[1] * ds; break;
  case PSIM_COSTDB_KIND_ADAM:
    *bytes = (double)s[0] * (4 * 4 + 3 * 4);
    pass = 1;
    break;
  case PSIM_OP_DROPOUT: *bytes = (double)s[0] * (2 * ds + 1); break;
  default: *bytes = ((double)s[0] + (double)(k->n > 1 ? s[1] : s[0])) * ds; break;
  }
  *bytes *= pass;
  bool rows = k->kind == PSIM_OP_SOFTMAX || k->kind == PSIM_OP_LAYERNORM ||
              k->kind == PSIM_OP_RMSNORM || k->kind == PSIM_OP_CROSS_ENTROPY ||
              k->kind == PSIM_OP_EMBEDDING; /* shape[0] x shape[1] elements */
  *flops = (double)s[0] * (rows ? (double)s[1] : 1) * pass;
}

void psim_costdb_key_work(const psim_cost_key *key, double *flops, double *bytes) {
  if (key->kind == PSIM_OP_MATMUL && key->n == 4)
    work_gemm(key, flops, bytes);
  else if (key->kind == PSIM_OP_ATTENTION && key->n == 4)
    work_attention(key, flops, bytes);
  else if (key->kind == PSIM_OP_CONV2D && key->n == 8)
    work_conv(key, flops, bytes);
  else
    work_memory(key, flops, bytes);
}
