/* model_load.c - reading plansim.model/1: names, scopes, blocks with repeat,
 * topological order, layers and the tensor rules (docs/model.md).
 *
 * Loading is linear in the expanded model: names go through hash maps, the
 * order comes from one iterative depth-first search. Kind-specific checks
 * live in opkind.c. */
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_impl.h"

enum { NAME_MAX_LEN = 1000 };
#define MAX_TENSORS (3 * PSIM_MODEL_MAX_OPS) /* tensors after expansion */

/* ------------------------------------------------------------ string map */

typedef struct smap {
  char **key; /* owned */
  int32_t *val;
  size_t cap, n;
} smap;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static size_t smap_slot(const smap *m, const char *k) {
  size_t i = (size_t)hash_str(k) & (m->cap - 1);
  while (m->key[i] && strcmp(m->key[i], k) != 0)
    i = (i + 1) & (m->cap - 1);
  return i;
}

static int32_t smap_get(const smap *m, const char *k) {
  if (!m->cap)
    return -1;
  size_t i = smap_slot(m, k);
  return m->key[i] ? m->val[i] : -1;
}

static psim_status smap_rehash(smap *m) {
  smap n = {0};
  n.cap = m->cap ? m->cap * 2 : 64;
  n.key = psim_calloc(n.cap, sizeof *n.key);
  n.val = psim_calloc(n.cap, sizeof *n.val);
  if (!n.key || !n.val) {
    psim_free(n.key);
    psim_free(n.val);
    return psim_error(PSIM_ENOMEM, "out of memory growing a name table");
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->key[i]) {
      size_t j = smap_slot(&n, m->key[i]);
      n.key[j] = m->key[i];
      n.val[j] = m->val[i];
    }
  n.n = m->n;
  psim_free(m->key);
  psim_free(m->val);
  *m = n;
  return PSIM_OK;
}

/* Inserts k (absent) with value v. */
static psim_status smap_put(smap *m, const char *k, int32_t v) {
  if (2 * (m->n + 1) > m->cap)
    PSIM_CHECK(smap_rehash(m));
  size_t i = smap_slot(m, k);
  m->key[i] = psim_strdup(k);
  if (!m->key[i])
    return psim_error(PSIM_ENOMEM, "out of memory");
  m->val[i] = v;
  m->n++;
  return PSIM_OK;
}

static void smap_destroy(smap *m) {
  for (size_t i = 0; i < m->cap; i++)
    psim_free(m->key[i]);
  psim_free(m->key);
  psim_free(m->val);
}

/* ---------------------------------------------------------------- loader */

typedef struct opx {
  int32_t def;   /* index of the JSON path of its definition in defs */
  int32_t given; /* layer from the file or the enclosing block; -1 = infer */
} opx;

typedef struct loader {
  psim_model *m;
  psim_jctx c;
  smap dims, tensors, ops, defmap;
  size_t cap_dims, cap_tensors, cap_ops, cap_opx, cap_defs, cap_tdef;
  opx *opx;
  const char **defs; /* JSON paths (owned by defmap) */
  int32_t n_defs;
  int32_t *tdef; /* per tensor: def index of its declaration */
  int32_t next_layer, cur_layer, depth;
} loader;

typedef struct scope {
  const struct scope *parent;
  char prefix[NAME_MAX_LEN];
  int32_t block, repeat_index; /* -1, 0 at the top */
} scope;

static bool join(char *out, const char *a, const char *b) {
  return (size_t)snprintf(out, NAME_MAX_LEN, "%s%s", a, b) < NAME_MAX_LEN;
}

/* Index of the current JSON path in defs, adding it when new. */
static psim_status def_here(loader *L, int32_t *out) {
  int32_t d = smap_get(&L->defmap, L->c.path);
  if (d < 0) {
    d = L->n_defs;
    PSIM_CHECK(smap_put(&L->defmap, L->c.path, d));
    PSIM_CHECK(psim_grow((void **)&L->defs, &L->cap_defs, (size_t)d + 1, sizeof *L->defs));
    L->defs[L->n_defs++] = L->defmap.key[smap_slot(&L->defmap, L->c.path)];
  }
  *out = d;
  return PSIM_OK;
}

/* Error at the definition path of def. */
static psim_status def_err(loader *L, int32_t def, const char *msg) {
  return psim_error(PSIM_EINPUT, "%s: %s: %s", L->c.file, L->defs[def], msg);
}

static int32_t resolve(loader *L, const scope *s, const char *name) {
  char full[NAME_MAX_LEN];
  for (; s; s = s->parent)
    if (join(full, s->prefix, name)) {
      int32_t t = smap_get(&L->tensors, full);
      if (t >= 0)
        return t;
    }
  return -1;
}

/* ------------------------------------------------------------------ dims */

static psim_status parse_dim(loader *L, const cJSON *v) {
  psim_model *m = L->m;
  psim_dim d = {.role = PSIM_ROLE_NONE};
  if (cJSON_IsObject(v)) {
    static const char *const keys[] = {"size", "role", NULL};
    const char *role = NULL;
    PSIM_CHECK(psim_json_check_keys(&L->c, v, keys));
    PSIM_CHECK(psim_json_int(&L->c, v, "size", true, 1, INT64_MAX, &d.size));
    PSIM_CHECK(psim_json_string(&L->c, v, "role", false, &role));
    if (role && psim_role_parse(role, &d.role) != PSIM_OK) {
      size_t sv = psim_jctx_key(&L->c, "role");
      char msg[400];
      snprintf(msg, sizeof msg, "%s", psim_error_message());
      psim_status s = psim_jerr(&L->c, "%s", msg);
      psim_jctx_pop(&L->c, sv);
      return s;
    }
  } else if (cJSON_IsNumber(v)) {
    PSIM_CHECK(psim_json_value_int(&L->c, v, 1, INT64_MAX, &d.size));
  } else {
    return psim_jerr(&L->c, "expected a size (positive integer) or {\"size\": N, \"role\": R}");
  }
  if (smap_get(&L->dims, v->string) >= 0)
    return psim_jerr(&L->c, "duplicate dim '%.80s'", v->string);
  PSIM_CHECK(psim_grow((void **)&m->dims, &L->cap_dims, (size_t)m->n_dims + 1, sizeof *m->dims));
  d.name = psim_strdup(v->string);
  if (!d.name)
    return psim_error(PSIM_ENOMEM, "out of memory");
  m->dims[m->n_dims] = d;
  return smap_put(&L->dims, v->string, m->n_dims++);
}

static psim_status parse_dims(loader *L, const cJSON *dims) {
  size_t sv = psim_jctx_key(&L->c, "dims");
  PSIM_CHECK(psim_json_expect_object(&L->c, dims));
  for (const cJSON *v = dims->child; v; v = v->next) {
    size_t si = psim_jctx_key(&L->c, v->string);
    if (!*v->string)
      return psim_jerr(&L->c, "empty dim name");
    PSIM_CHECK(parse_dim(L, v));
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

/* --------------------------------------------------------------- tensors */

/* Reads {"dims": [...], "dtype": ...} into t (dims, rank, dtype). */
static psim_status parse_tensor_shape(loader *L, const cJSON *v, psim_tensor *t) {
  static const char *const keys[] = {"dims", "dtype", NULL};
  PSIM_CHECK(psim_json_check_keys(&L->c, v, keys));
  const cJSON *dims = cJSON_GetObjectItemCaseSensitive(v, "dims");
  if (!dims)
    return psim_jerr(&L->c, "missing required key 'dims' (a list of dim names)");
  size_t sv = psim_jctx_key(&L->c, "dims");
  PSIM_CHECK(psim_json_expect_array(&L->c, dims));
  if (cJSON_GetArraySize(dims) > PSIM_MAX_RANK)
    return psim_jerr(&L->c, "more than %d dims (PSIM_MAX_RANK)", PSIM_MAX_RANK);
  int64_t elems = 1;
  for (const cJSON *e = dims->child; e; e = e->next) {
    size_t si = psim_jctx_index(&L->c, (size_t)t->rank);
    int32_t d = cJSON_IsString(e) ? smap_get(&L->dims, e->valuestring) : -2;
    if (d == -2)
      return psim_jerr(&L->c, "expected a dim name (string)");
    if (d < 0)
      return psim_jerr(&L->c, "unknown dim '%.80s'; declare it under \"dims\"", e->valuestring);
    for (int k = 0; k < t->rank; k++)
      if (t->dims[k] == d)
        return psim_jerr(&L->c, "dim '%.80s' appears twice", e->valuestring);
    if (__builtin_mul_overflow(elems, L->m->dims[d].size, &elems))
      return psim_jerr(&L->c, "the element count overflows 64 bits");
    t->dims[t->rank++] = d;
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  const char *dt = NULL;
  PSIM_CHECK(psim_json_string(&L->c, v, "dtype", false, &dt));
  t->dtype = L->m->dtype;
  if (dt && psim_dtype_parse(dt, &t->dtype) != PSIM_OK)
    return psim_jerr((psim_jctx_key(&L->c, "dtype"), &L->c),
                     "unknown dtype '%.40s'; expected fp32, fp16, bf16, fp8, fp64, "
                     "int32, int64 or bool",
                     dt);
  return PSIM_OK;
}

/* Adds tensor *t named full; fails on a duplicate name. */
static psim_status add_tensor(loader *L, const char *full, psim_tensor *t, int32_t *out) {
  psim_model *m = L->m;
  if (smap_get(&L->tensors, full) >= 0)
    return psim_jerr(&L->c, "duplicate tensor name '%.200s'", full);
  if (m->n_tensors >= MAX_TENSORS)
    return psim_jerr(&L->c, "more than %lld tensors after expansion (the loader's limit)",
                     (long long)MAX_TENSORS);
  PSIM_CHECK(psim_grow((void **)&m->tensors, &L->cap_tensors, (size_t)m->n_tensors + 1,
                       sizeof *m->tensors));
  PSIM_CHECK(psim_grow((void **)&L->tdef, &L->cap_tdef, (size_t)m->n_tensors + 1, sizeof *L->tdef));
  PSIM_CHECK(def_here(L, &L->tdef[m->n_tensors]));
  t->name = psim_strdup(full);
  if (!t->name)
    return psim_error(PSIM_ENOMEM, "out of memory");
  t->producer = -1;
  t->layer = -1;
  m->tensors[m->n_tensors] = *t;
  *out = m->n_tensors;
  return smap_put(&L->tensors, full, m->n_tensors++);
}

static bool same_shape(const psim_tensor *a, const psim_tensor *b) {
  return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->rank) == 0;
}

/* Block output of the last repeat: takes the outer name (reusing a declared
 * activation of the same dims). */
static psim_status add_block_output(loader *L, const scope *s, const char *outer, psim_tensor *t) {
  int32_t idx = resolve(L, s->parent, outer);
  if (idx >= 0) {
    const psim_tensor *o = &L->m->tensors[idx];
    if (o->kind != PSIM_TENSOR_ACTIVATION || !same_shape(o, t))
      return psim_jerr(&L->c,
                       "the block output '%.100s' must be an activation with the dims "
                       "of its local declaration",
                       outer);
  } else {
    char full[NAME_MAX_LEN];
    if (!join(full, s->parent->prefix, outer))
      return psim_jerr(&L->c, "name too long");
    PSIM_CHECK(add_tensor(L, full, t, &idx));
  }
  char local[NAME_MAX_LEN];
  if (!join(local, s->prefix, t->name))
    return psim_jerr(&L->c, "name too long");
  return smap_put(&L->tensors, local, idx);
}

/* Declares the tensors of one group ("inputs", "weights", "tensors") in scope s.
 * outputs/outer (block only, may be NULL): local names of the block outputs
 * and, for the last repeat, the outer names they take. */
static psim_status parse_tensor_group(loader *L, const cJSON *obj, const char *key,
                                      psim_tensor_kind kind, const scope *s, const cJSON *outputs,
                                      const cJSON *outer) {
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!g)
    return PSIM_OK;
  size_t sv = psim_jctx_key(&L->c, key);
  PSIM_CHECK(psim_json_expect_object(&L->c, g));
  for (const cJSON *v = g->child; v; v = v->next) {
    size_t si = psim_jctx_key(&L->c, v->string);
    psim_tensor t = {.kind = kind};
    if (!*v->string)
      return psim_jerr(&L->c, "empty tensor name");
    PSIM_CHECK(parse_tensor_shape(L, v, &t));
    int k = 0, pos = -1;
    for (const cJSON *o = outputs ? outputs->child : NULL; o; o = o->next, k++)
      if (cJSON_IsString(o) && strcmp(o->valuestring, v->string) == 0)
        pos = k;
    int32_t idx;
    char full[NAME_MAX_LEN];
    if (pos >= 0 && kind != PSIM_TENSOR_ACTIVATION)
      return psim_jerr(&L->c, "a block output must be declared under \"tensors\"");
    if (pos >= 0 && outer) {
      t.name = v->string;
      PSIM_CHECK(add_block_output(L, s, cJSON_GetArrayItem(outer, pos)->valuestring, &t));
    } else if (!join(full, s->prefix, v->string)) {
      return psim_jerr(&L->c, "name too long");
    } else {
      PSIM_CHECK(add_tensor(L, full, &t, &idx));
    }
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

/* ------------------------------------------------------------------- ops */

static const char *const common_keys[] = {"name", "kind", "in", "out", "layer", "tag"};

static psim_status check_op_keys(loader *L, const cJSON *j, psim_op_kind k) {
  const char *allowed[16];
  int n = 0;
  for (int i = 0; i < 6; i++)
    if (L->cur_layer < 0 || strcmp(common_keys[i], "layer") != 0)
      allowed[n++] = common_keys[i];
  for (const char *const *x = psim_opkind_keys(k); *x; x++)
    allowed[n++] = *x;
  allowed[n] = NULL;
  return psim_json_check_keys(&L->c, j, allowed);
}

/* Resolves the names of j[key] into t[], n within [lo, hi]. */
static psim_status parse_io(loader *L, const scope *s, const cJSON *j, const char *key, int lo,
                            int hi, int32_t *t, int32_t *n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!a)
    return psim_jerr(&L->c, "missing required key '%s' (a list of tensor names)", key);
  size_t sv = psim_jctx_key(&L->c, key);
  PSIM_CHECK(psim_json_expect_array(&L->c, a));
  int cnt = cJSON_GetArraySize(a);
  if (cnt < lo || cnt > hi)
    return psim_jerr(&L->c, "expected %d to %d tensor names, found %d", lo, hi, cnt);
  *n = 0;
  for (const cJSON *e = a->child; e; e = e->next) {
    size_t si = psim_jctx_index(&L->c, (size_t)*n);
    if (!cJSON_IsString(e))
      return psim_jerr(&L->c, "expected a tensor name (string)");
    int32_t idx = resolve(L, s, e->valuestring);
    if (idx < 0)
      return psim_jerr(&L->c, "unknown tensor '%.100s'", e->valuestring);
    t[(*n)++] = idx;
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

/* Marks op index oi as the producer of its outputs. */
static psim_status set_producers(loader *L, int32_t oi) {
  psim_model *m = L->m;
  const psim_op *op = &m->ops[oi];
  for (int i = 0; i < op->n_out; i++) {
    psim_tensor *t = &m->tensors[op->out[i]];
    size_t sv = psim_jctx_key(&L->c, "out");
    psim_jctx_index(&L->c, (size_t)i);
    if (t->kind != PSIM_TENSOR_ACTIVATION)
      return psim_jerr(&L->c,
                       "'%.100s' is %s; ops write activations (declare it under "
                       "\"tensors\")",
                       t->name, t->kind == PSIM_TENSOR_WEIGHT ? "a weight" : "an input");
    if (t->producer >= 0)
      return psim_jerr(&L->c, "tensor '%.100s' is produced twice: by '%.100s' and '%.100s'",
                       t->name, m->ops[t->producer].name, op->name);
    t->producer = oi;
    psim_jctx_pop(&L->c, sv);
  }
  return PSIM_OK;
}

static psim_status new_op(loader *L, const scope *s, const char *name, psim_op **out) {
  psim_model *m = L->m;
  char full[NAME_MAX_LEN];
  if (!*name || !join(full, s->prefix, name))
    return psim_jerr(&L->c, "name: empty or too long");
  int32_t prev = smap_get(&L->ops, full);
  if (prev >= 0)
    return psim_jerr(&L->c, "duplicate op name '%.200s' (first defined at %s)", full,
                     L->defs[L->opx[prev].def]);
  if (m->n_ops >= PSIM_MODEL_MAX_OPS)
    return psim_jerr(&L->c, "more than %lld ops after expansion (the loader's limit)",
                     (long long)PSIM_MODEL_MAX_OPS);
  PSIM_CHECK(psim_grow((void **)&m->ops, &L->cap_ops, (size_t)m->n_ops + 1, sizeof *m->ops));
  PSIM_CHECK(psim_grow((void **)&L->opx, &L->cap_opx, (size_t)m->n_ops + 1, sizeof *L->opx));
  int32_t oi = m->n_ops++;
  psim_op *op = &m->ops[oi];
  memset(op, 0, sizeof *op);
  op->block = s->block;
  op->repeat_index = s->repeat_index;
  op->proto = oi;
  op->layer = -1;
  L->opx[oi].given = L->cur_layer;
  L->opx[oi].def = 0;
  op->name = psim_strdup(full);
  if (!op->name)
    return psim_error(PSIM_ENOMEM, "out of memory");
  PSIM_CHECK(def_here(L, &L->opx[oi].def));
  PSIM_CHECK(smap_put(&L->ops, full, oi));
  *out = op;
  return PSIM_OK;
}

static psim_status parse_op(loader *L, const scope *s, const cJSON *j) {
  const char *name = NULL, *kind = NULL, *tag = NULL;
  PSIM_CHECK(psim_json_expect_object(&L->c, j));
  PSIM_CHECK(psim_json_string(&L->c, j, "name", true, &name));
  PSIM_CHECK(psim_json_string(&L->c, j, "kind", true, &kind));
  psim_op_kind k;
  if (psim_op_kind_parse(kind, &k) != PSIM_OK) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s", psim_error_message());
    size_t sv = psim_jctx_key(&L->c, "kind");
    psim_status st = psim_jerr(&L->c, "%s", msg);
    psim_jctx_pop(&L->c, sv);
    return st;
  }
  PSIM_CHECK(check_op_keys(L, j, k));
  psim_op *op = NULL;
  PSIM_CHECK(new_op(L, s, name, &op));
  op->kind = k;
  int lo, hi, olo, ohi;
  psim_opkind_arity(k, &lo, &hi, &olo, &ohi);
  PSIM_CHECK(parse_io(L, s, j, "in", lo, hi, op->in, &op->n_in));
  PSIM_CHECK(parse_io(L, s, j, "out", olo, ohi, op->out, &op->n_out));
  int64_t layer = -1;
  PSIM_CHECK(psim_json_int(&L->c, j, "layer", false, 0, PSIM_MODEL_MAX_OPS, &layer));
  if (layer >= 0)
    L->opx[L->m->n_ops - 1].given = (int32_t)layer;
  PSIM_CHECK(psim_json_string(&L->c, j, "tag", false, &tag));
  if (tag && !(op->tag = psim_strdup(tag)))
    return psim_error(PSIM_ENOMEM, "out of memory");
  if (k == PSIM_OP_ELEMENTWISE) {
    PSIM_CHECK(psim_json_string(&L->c, j, "fn", true, &kind));
    if (!(op->fn = psim_strdup(kind)))
      return psim_error(PSIM_ENOMEM, "out of memory");
  }
  PSIM_CHECK(psim_opkind_analyse(&L->c, L->m, op, j));
  return set_producers(L, L->m->n_ops - 1);
}

/* ---------------------------------------------------------------- blocks */

static psim_status parse_ops(loader *L, const scope *s, const cJSON *ops);

static const char *const block_keys[] = {"block", "repeat",  "inputs",  "outputs", "in",
                                         "out",   "weights", "tensors", "ops",     NULL};

/* Checks that key is an array of n strings (n < 0: any count, set into *n). */
static psim_status names_array(loader *L, const cJSON *j, const char *key, int *n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
  size_t sv = psim_jctx_key(&L->c, key);
  if (!a)
    return psim_jerr(&L->c, "missing (a list of tensor names)");
  PSIM_CHECK(psim_json_expect_array(&L->c, a));
  int cnt = cJSON_GetArraySize(a);
  if (*n >= 0 && cnt != *n)
    return psim_jerr(&L->c, "has %d names; expected %d, one per block input/output", cnt, *n);
  if (cnt > 64)
    return psim_jerr(&L->c, "more than 64 names");
  int i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++)
    if (!cJSON_IsString(e) || !*e->valuestring) {
      psim_jctx_index(&L->c, (size_t)i);
      return psim_jerr(&L->c, "expected a non-empty tensor name");
    }
  *n = cnt;
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

/* Registers local name (in scope s) as an alias of tensor idx. */
static psim_status alias(loader *L, const scope *s, const char *local, int32_t idx) {
  char full[NAME_MAX_LEN];
  if (!join(full, s->prefix, local))
    return psim_jerr(&L->c, "name too long");
  if (smap_get(&L->tensors, full) >= 0)
    return psim_jerr(&L->c,
                     "block input '%.100s' is declared twice (block inputs alias the "
                     "block's \"in\" tensors and must not be declared)",
                     local);
  return smap_put(&L->tensors, full, idx);
}

/* Chains repeat i-1's outputs into repeat i's inputs (or "in" for i = 0). */
static psim_status bind_inputs(loader *L, const scope *s, const cJSON *j, int i,
                               const int32_t *prev) {
  const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(j, "inputs");
  int k = 0;
  size_t sv = psim_jctx_key(&L->c, "inputs");
  for (const cJSON *e = inputs->child; e; e = e->next, k++) {
    size_t si = psim_jctx_index(&L->c, (size_t)k);
    PSIM_CHECK(alias(L, s, e->valuestring, prev[k]));
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  (void)i;
  return PSIM_OK;
}

/* Collects the tensors of this repeat's outputs into next[] and, when the
 * block repeats, checks that they have the dims of the inputs they feed. */
static psim_status collect_outputs(loader *L, const scope *s, const cJSON *j, int64_t repeat,
                                   const int32_t *in, int32_t *next) {
  const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
  int k = 0;
  size_t sv = psim_jctx_key(&L->c, "outputs");
  for (const cJSON *e = outputs->child; e; e = e->next, k++) {
    size_t si = psim_jctx_index(&L->c, (size_t)k);
    char full[NAME_MAX_LEN];
    int32_t idx = join(full, s->prefix, e->valuestring) ? smap_get(&L->tensors, full) : -1;
    bool is_input = false;
    for (const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "inputs")->child; x; x = x->next)
      is_input |= strcmp(x->valuestring, e->valuestring) == 0;
    if (idx < 0 || is_input || L->m->tensors[idx].kind != PSIM_TENSOR_ACTIVATION)
      return psim_jerr(&L->c, "'%.100s' must be declared under the block's \"tensors\"",
                       e->valuestring);
    if (repeat > 1 && !same_shape(&L->m->tensors[idx], &L->m->tensors[in[k]]))
      return psim_jerr(&L->c,
                       "'%.100s' must have the dims of '%.100s' (repeat i's outputs "
                       "feed repeat i+1's inputs)",
                       e->valuestring, L->m->tensors[in[k]].name);
    next[k] = idx;
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

static psim_status block_repeat(loader *L, const scope *parent, const cJSON *j, int64_t i,
                                int64_t repeat, scope *s, int32_t *chain) {
  const char *bname = cJSON_GetObjectItemCaseSensitive(j, "block")->valuestring;
  s->parent = parent;
  s->repeat_index = (int32_t)i;
  if ((size_t)snprintf(s->prefix, sizeof s->prefix, "%s%s.%lld.", parent->prefix, bname,
                       (long long)i) >= sizeof s->prefix)
    return psim_jerr(&L->c, "block name too long");
  if (L->depth == 1)
    L->cur_layer = L->next_layer++;
  const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
  const cJSON *outer = i == repeat - 1 ? cJSON_GetObjectItemCaseSensitive(j, "out") : NULL;
  PSIM_CHECK(bind_inputs(L, s, j, (int)i, chain));
  PSIM_CHECK(parse_tensor_group(L, j, "weights", PSIM_TENSOR_WEIGHT, s, outputs, outer));
  PSIM_CHECK(parse_tensor_group(L, j, "tensors", PSIM_TENSOR_ACTIVATION, s, outputs, outer));
  int32_t in0[64];
  memcpy(in0, chain, sizeof in0);
  PSIM_CHECK(parse_ops(L, s, cJSON_GetObjectItemCaseSensitive(j, "ops")));
  return collect_outputs(L, s, j, repeat, in0, chain);
}

/* Points each op of repeat i (from start) at the same op of repeat 0. */
static void set_protos(loader *L, int32_t start0, int32_t start, int32_t end) {
  for (int32_t x = start; x < end; x++)
    L->m->ops[x].proto = L->m->ops[start0 + (x - start)].proto;
}

static psim_status parse_block(loader *L, const scope *parent, const cJSON *j) {
  PSIM_CHECK(psim_json_check_keys(&L->c, j, block_keys));
  const char *bname = NULL;
  int64_t repeat = 1;
  PSIM_CHECK(psim_json_string(&L->c, j, "block", true, &bname));
  if (!*bname || strchr(bname, '.'))
    return psim_jerr(&L->c, "block: expected a non-empty name without '.'");
  PSIM_CHECK(psim_json_int(&L->c, j, "repeat", false, 1, PSIM_MODEL_MAX_REPEAT, &repeat));
  int n = -1, no = -1;
  PSIM_CHECK(names_array(L, j, "inputs", &n));
  PSIM_CHECK(names_array(L, j, "in", &n));
  PSIM_CHECK(names_array(L, j, "outputs", &no));
  PSIM_CHECK(names_array(L, j, "out", &no));
  if (n != no)
    return psim_jerr(&L->c,
                     "\"outputs\" has %d names but \"inputs\" has %d; repeat i's outputs "
                     "feed repeat i+1's inputs positionally",
                     no, n);
  if (!cJSON_GetObjectItemCaseSensitive(j, "ops"))
    return psim_jerr(&L->c, "missing required key 'ops'");
  int32_t chain[64];
  PSIM_CHECK(parse_io(L, parent, j, "in", n, n, chain, &(int32_t){0}));
  int32_t id;
  char key[1100];
  snprintf(key, sizeof key, "block:%s", L->c.path);
  id = smap_get(&L->defmap, key);
  if (id < 0) {
    id = L->m->n_blocks++;
    PSIM_CHECK(smap_put(&L->defmap, key, id));
  }
  scope *s = psim_malloc(sizeof *s);
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory");
  s->block = id;
  L->depth++;
  int32_t start0 = L->m->n_ops;
  psim_status st = PSIM_OK;
  for (int64_t i = 0; i < repeat && st == PSIM_OK; i++) {
    int32_t start = L->m->n_ops;
    st = block_repeat(L, parent, j, i, repeat, s, chain);
    if (i > 0 && st == PSIM_OK)
      set_protos(L, start0, start, L->m->n_ops);
  }
  L->depth--;
  if (L->depth == 0)
    L->cur_layer = -1;
  psim_free(s);
  return st;
}

static psim_status parse_ops(loader *L, const scope *s, const cJSON *ops) {
  size_t sv = psim_jctx_key(&L->c, "ops");
  PSIM_CHECK(psim_json_expect_array(&L->c, ops));
  size_t i = 0;
  for (const cJSON *j = ops->child; j; j = j->next, i++) {
    size_t si = psim_jctx_index(&L->c, i);
    if (cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "block"))
      PSIM_CHECK(parse_block(L, s, j));
    else
      PSIM_CHECK(parse_op(L, s, j));
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

/* Ops after expansion, saturating above the limit (malformed parts count 1). */
static int64_t count_ops(const cJSON *ops, int depth) {
  int64_t n = 0;
  if (!cJSON_IsArray(ops) || depth > 64)
    return 0;
  for (const cJSON *j = ops->child; j && n <= PSIM_MODEL_MAX_OPS; j = j->next) {
    const cJSON *r = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "repeat") : NULL;
    if (!cJSON_IsObject(j) || !cJSON_GetObjectItemCaseSensitive(j, "block")) {
      n++;
      continue;
    }
    double rep = cJSON_IsNumber(r) && r->valuedouble >= 1 ? r->valuedouble : 1;
    if (rep > PSIM_MODEL_MAX_REPEAT)
      rep = 1; /* reported by the parser */
    double inner = (double)count_ops(cJSON_GetObjectItemCaseSensitive(j, "ops"), depth + 1);
    double t = (double)n + rep * inner;
    n = t > (double)PSIM_MODEL_MAX_OPS ? PSIM_MODEL_MAX_OPS + 1 : (int64_t)t;
  }
  return n;
}

/* --------------------------------------------------- order, layers, checks */

/* Depth-first post-order over producers: file order when the file is already
 * in order. Reports a cycle with the ops on it. */
static psim_status topo_order(loader *L, int32_t *order) {
  psim_model *m = L->m;
  int32_t n = m->n_ops, done = 0;
  uint8_t *state = psim_calloc((size_t)n, 1);
  int32_t *stack = psim_malloc(sizeof *stack * (size_t)n * 2 + 1);
  if (!state || !stack) {
    psim_free(state);
    psim_free(stack);
    return psim_error(PSIM_ENOMEM, "out of memory ordering ops");
  }
  psim_status s = PSIM_OK;
  for (int32_t r = 0; r < n && s == PSIM_OK; r++) {
    if (state[r])
      continue;
    int32_t sp = 0;
    stack[sp++] = r;
    stack[sp++] = 0;
    state[r] = 1;
    while (sp && s == PSIM_OK) {
      int32_t u = stack[sp - 2], k = stack[sp - 1]++;
      if (k >= m->ops[u].n_in) {
        state[u] = 2;
        order[done++] = u;
        sp -= 2;
        continue;
      }
      int32_t p = m->tensors[m->ops[u].in[k]].producer;
      if (p < 0 || state[p] == 2)
        continue;
      if (state[p] == 1) {
        char msg[900];
        snprintf(msg, sizeof msg,
                 "the ops form a cycle: '%.200s' needs '%.200s' of '%.200s', "
                 "which depends on '%.200s'",
                 m->ops[u].name, m->tensors[m->ops[u].in[k]].name, m->ops[p].name, m->ops[u].name);
        s = def_err(L, L->opx[u].def, msg);
        break;
      }
      state[p] = 1;
      stack[sp++] = p;
      stack[sp++] = 0;
    }
  }
  psim_free(state);
  psim_free(stack);
  return s;
}

/* Reorders ops (and their loader records) into order. */
static psim_status apply_order(loader *L, const int32_t *order) {
  psim_model *m = L->m;
  int32_t n = m->n_ops;
  psim_op *ops = psim_malloc(sizeof *ops * (size_t)n + 1);
  opx *ox = psim_malloc(sizeof *ox * (size_t)n + 1);
  int32_t *inv = psim_malloc(sizeof *inv * (size_t)n + 1);
  if (!ops || !ox || !inv) {
    psim_free(ops);
    psim_free(ox);
    psim_free(inv);
    return psim_error(PSIM_ENOMEM, "out of memory ordering ops");
  }
  for (int32_t i = 0; i < n; i++) {
    ops[i] = m->ops[order[i]];
    ox[i] = L->opx[order[i]];
    inv[order[i]] = i;
  }
  for (int32_t i = 0; i < n; i++)
    ops[i].proto = inv[ops[i].proto];
  for (int32_t t = 0; t < m->n_tensors; t++)
    if (m->tensors[t].producer >= 0)
      m->tensors[t].producer = inv[m->tensors[t].producer];
  psim_free(m->ops);
  psim_free(L->opx);
  psim_free(inv);
  m->ops = ops;
  L->opx = ox;
  L->cap_ops = L->cap_opx = (size_t)n;
  return PSIM_OK;
}

static psim_status assign_layers(loader *L) {
  psim_model *m = L->m;
  m->n_layers = 0;
  for (int32_t i = 0; i < m->n_ops; i++) {
    psim_op *op = &m->ops[i];
    int32_t lmax = 0;
    for (int k = 0; k < op->n_in; k++) {
      int32_t p = m->tensors[op->in[k]].producer;
      if (p >= 0 && m->ops[p].layer > lmax)
        lmax = m->ops[p].layer;
    }
    op->layer = L->opx[i].given >= 0 ? L->opx[i].given : lmax;
    if (op->layer < lmax) {
      char msg[600];
      snprintf(msg, sizeof msg,
               "op '%.200s' is in layer %d but reads the output of layer %d; "
               "layers must not decrease along the data flow",
               op->name, op->layer, lmax);
      return def_err(L, L->opx[i].def, msg);
    }
    if (op->layer + 1 > m->n_layers)
      m->n_layers = op->layer + 1;
  }
  return PSIM_OK;
}

/* Layers of tensors, gradients, and the never-produced / never-used rules. */
static psim_status check_tensors(loader *L) {
  psim_model *m = L->m;
  for (int32_t i = 0; i < m->n_ops; i++) {
    psim_op *op = &m->ops[i];
    bool grad = false;
    for (int k = 0; k < op->n_in; k++) {
      psim_tensor *t = &m->tensors[op->in[k]];
      if (t->producer < 0 && t->kind == PSIM_TENSOR_ACTIVATION) {
        char msg[600];
        snprintf(msg, sizeof msg, "op '%.200s' reads '%.200s', which no op produces", op->name,
                 t->name);
        return def_err(L, L->opx[i].def, msg);
      }
      if (t->layer < 0)
        t->layer = op->layer;
      t->requires_grad |= t->kind == PSIM_TENSOR_WEIGHT;
      grad |= t->requires_grad;
    }
    for (int k = 0; k < op->n_out; k++) {
      m->tensors[op->out[k]].layer = op->layer;
      m->tensors[op->out[k]].requires_grad = grad;
    }
  }
  for (int32_t t = 0; t < m->n_tensors; t++) {
    const psim_tensor *x = &m->tensors[t];
    char msg[600];
    snprintf(msg, sizeof msg, "%s '%.200s' is %s",
             x->kind == PSIM_TENSOR_WEIGHT ? "weight" : "activation", x->name,
             x->kind == PSIM_TENSOR_WEIGHT ? "never used" : "declared but never produced");
    if ((x->kind == PSIM_TENSOR_WEIGHT && x->layer < 0) ||
        (x->kind == PSIM_TENSOR_ACTIVATION && x->producer < 0))
      return def_err(L, L->tdef[t], msg);
  }
  return PSIM_OK;
}

static psim_status finish(loader *L) {
  psim_model *m = L->m;
  int32_t *order = psim_malloc(sizeof *order * (size_t)m->n_ops + 1);
  if (!order)
    return psim_error(PSIM_ENOMEM, "out of memory ordering ops");
  psim_status s = topo_order(L, order);
  if (s == PSIM_OK)
    s = apply_order(L, order);
  psim_free(order);
  PSIM_CHECK(s);
  PSIM_CHECK(assign_layers(L));
  PSIM_CHECK(check_tensors(L));
  size_t cap = 0;
  for (int32_t i = 0; i < m->n_ops; i++)
    PSIM_CHECK(psim_opkind_work(m, &m->ops[i], &cap));
  for (int32_t d = m->n_dims - 1; d >= 0; d--)
    m->role_dim[m->dims[d].role] = d;
  m->role_dim[PSIM_ROLE_NONE] = -1;
  m->n_params = 0;
  for (int32_t t = 0; t < m->n_tensors; t++)
    if (m->tensors[t].kind == PSIM_TENSOR_WEIGHT)
      m->n_params += psim_tensor_elems(m, &m->tensors[t]);
  return PSIM_OK;
}

/* ------------------------------------------------------------------- top */

static psim_status parse_header(loader *L, const cJSON *root) {
  static const char *const keys[] = {"format", "name",    "description", "dtype", "dims",
                                     "inputs", "weights", "tensors",     "ops",   NULL};
  PSIM_CHECK(psim_json_check_keys(&L->c, root, keys));
  const char *fmt = NULL, *name = "model", *dt = NULL, *desc = NULL;
  PSIM_CHECK(psim_json_string(&L->c, root, "format", true, &fmt));
  if (strcmp(fmt, "plansim.model/1") != 0)
    return psim_jerr(&L->c, "format: expected \"plansim.model/1\", found \"%.60s\"", fmt);
  PSIM_CHECK(psim_json_string(&L->c, root, "name", false, &name));
  PSIM_CHECK(psim_json_string(&L->c, root, "description", false, &desc));
  PSIM_CHECK(psim_json_string(&L->c, root, "dtype", false, &dt));
  L->m->dtype = PSIM_DTYPE_FP32;
  if (dt && psim_dtype_parse(dt, &L->m->dtype) != PSIM_OK) {
    psim_jctx_key(&L->c, "dtype");
    return psim_jerr(&L->c,
                     "unknown dtype '%.40s'; expected fp32, fp16, bf16, fp8, fp64, "
                     "int32, int64 or bool",
                     dt);
  }
  if (!(L->m->name = psim_strdup(name)))
    return psim_error(PSIM_ENOMEM, "out of memory");
  if (!cJSON_GetObjectItemCaseSensitive(root, "dims"))
    return psim_jerr(&L->c, "missing required key 'dims'");
  if (!cJSON_GetObjectItemCaseSensitive(root, "ops"))
    return psim_jerr(&L->c, "missing required key 'ops'");
  return PSIM_OK;
}

static psim_status load(loader *L, const cJSON *root) {
  PSIM_CHECK(psim_json_expect_object(&L->c, root));
  PSIM_CHECK(parse_header(L, root));
  PSIM_CHECK(parse_dims(L, cJSON_GetObjectItemCaseSensitive(root, "dims")));
  scope *top = psim_calloc(1, sizeof *top);
  if (!top)
    return psim_error(PSIM_ENOMEM, "out of memory");
  top->block = -1;
  psim_status s = parse_tensor_group(L, root, "inputs", PSIM_TENSOR_INPUT, top, NULL, NULL);
  if (s == PSIM_OK)
    s = parse_tensor_group(L, root, "weights", PSIM_TENSOR_WEIGHT, top, NULL, NULL);
  if (s == PSIM_OK)
    s = parse_tensor_group(L, root, "tensors", PSIM_TENSOR_ACTIVATION, top, NULL, NULL);
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "ops");
  if (s == PSIM_OK && count_ops(ops, 0) > PSIM_MODEL_MAX_OPS)
    s = psim_jerr((psim_jctx_key(&L->c, "ops"), &L->c),
                  "the model expands to more than %lld ops (the loader's limit)",
                  (long long)PSIM_MODEL_MAX_OPS);
  if (s == PSIM_OK)
    s = parse_ops(L, top, ops);
  psim_free(top);
  PSIM_CHECK(s);
  if (L->m->n_ops == 0)
    return psim_jerr(&L->c, "ops: the model has no ops");
  return finish(L);
}

psim_status psim_model_from_json(const char *file, const cJSON *root, psim_model *m) {
  psim_model_init(m);
  loader L = {.m = m, .cur_layer = -1};
  psim_jctx_init(&L.c, file ? file : "(model)");
  psim_status s = load(&L, root);
  if (s == PSIM_OK && file && !(m->file = psim_strdup(file)))
    s = psim_error(PSIM_ENOMEM, "out of memory");
  smap_destroy(&L.dims);
  smap_destroy(&L.tensors);
  smap_destroy(&L.ops);
  smap_destroy(&L.defmap);
  psim_free(L.opx);
  psim_free(L.defs);
  psim_free(L.tdef);
  if (s != PSIM_OK)
    psim_model_destroy(m);
  return s;
}

psim_status psim_model_load(const char *file, psim_model *m) {
  psim_model_init(m);
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_status s = psim_model_from_json(file, root, m);
  cJSON_Delete(root);
  return s;
}
