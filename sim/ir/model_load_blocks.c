/* model_load_blocks.c - blocks with "repeat": each repeat's scope, its inputs
 * chained from the previous repeat's outputs, and the expanded op count. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_load_impl.h"

/* ---------------------------------------------------------------- blocks */

static const char *const block_keys[] = {"block", "repeat",  "inputs",  "outputs", "in",
                                         "out",   "weights", "tensors", "ops",     NULL};

/* Checks that key is an array of n strings (n < 0: any count, set into *n). */
static psim_status names_array(psim_model_loader *L, const cJSON *j, const char *key, int *n) {
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
static psim_status alias(psim_model_loader *L, const psim_model_scope *s, const char *local,
                         int32_t idx) {
  char full[NAME_MAX_LEN];
  if (!psim_mload_join(full, s->prefix, local))
    return psim_jerr(&L->c, "name too long");
  if (psim_name_map_get(&L->tensors, full) >= 0)
    return psim_jerr(&L->c,
                     "block input '%.100s' is declared twice (block inputs alias the "
                     "block's \"in\" tensors and must not be declared)",
                     local);
  return psim_name_map_put(&L->tensors, full, idx);
}

/* Chains repeat i-1's outputs into repeat i's inputs (or "in" for i = 0). */
static psim_status bind_inputs(psim_model_loader *L, const psim_model_scope *s, const cJSON *j,
                               int i, const int32_t *prev) {
  const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(j, "inputs");
  int k = 0;
  size_t sv = psim_jctx_key(&L->c, "inputs");
  for (const cJSON *e = inputs->child; e; e = e->next, k++) {
    size_t si = psim_jctx_index(&L->c, (size_t)k);
    assert(k < 64); /* names_array capped "inputs" at 64 names */
    PSIM_CHECK(alias(L, s, e->valuestring, prev[k]));
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  (void)i;
  return PSIM_OK;
}

/* Collects the tensors of this repeat's outputs into next[] and, when the
 * block repeats, checks that they have the dims of the inputs they feed. */
static psim_status collect_outputs(psim_model_loader *L, const psim_model_scope *s, const cJSON *j,
                                   int64_t repeat, const int32_t *in, int32_t *next) {
  const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
  int k = 0;
  size_t sv = psim_jctx_key(&L->c, "outputs");
  for (const cJSON *e = outputs->child; e; e = e->next, k++) {
    size_t si = psim_jctx_index(&L->c, (size_t)k);
    char full[NAME_MAX_LEN];
    int32_t idx = psim_mload_join(full, s->prefix, e->valuestring)
                      ? psim_name_map_get(&L->tensors, full)
                      : -1;
    bool is_input = false;
    for (const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "inputs")->child; x; x = x->next)
      is_input |= strcmp(x->valuestring, e->valuestring) == 0;
    if (idx < 0 || is_input || L->m->tensors[idx].kind != PSIM_TENSOR_ACTIVATION)
      return psim_jerr(&L->c, "'%.100s' must be declared under the block's \"tensors\"",
                       e->valuestring);
    if (repeat > 1 && !psim_mload_same_shape(&L->m->tensors[idx], &L->m->tensors[in[k]]))
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

static psim_status block_repeat(psim_model_loader *L, const psim_model_scope *parent,
                                const cJSON *j, int64_t i, int64_t repeat, psim_model_scope *s,
                                int32_t *chain) {
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
  PSIM_CHECK(psim_mload_tensor_group(L, j, "weights", PSIM_TENSOR_WEIGHT, s, outputs, outer));
  PSIM_CHECK(psim_mload_tensor_group(L, j, "tensors", PSIM_TENSOR_ACTIVATION, s, outputs, outer));
  int32_t in0[64];
  memcpy(in0, chain, sizeof in0);
  PSIM_CHECK(psim_mload_ops(L, s, cJSON_GetObjectItemCaseSensitive(j, "ops")));
  return collect_outputs(L, s, j, repeat, in0, chain);
}

/* Points each op of repeat i (from start) at the same op of repeat 0. */
static void set_protos(psim_model_loader *L, int32_t start0, int32_t start, int32_t end) {
  for (int32_t x = start; x < end; x++)
    L->m->ops[x].proto = L->m->ops[start0 + (x - start)].proto;
}

static psim_status parse_block(psim_model_loader *L, const psim_model_scope *parent,
                               const cJSON *j) {
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
  PSIM_CHECK(psim_mload_io(L, parent, j, "in", n, n, chain, &(int32_t){0}));
  int32_t id;
  char key[1100];
  snprintf(key, sizeof key, "block:%s", L->c.path);
  id = psim_name_map_get(&L->defmap, key);
  if (id < 0) {
    id = L->m->n_blocks++;
    PSIM_CHECK(psim_name_map_put(&L->defmap, key, id));
  }
  psim_model_scope *s = psim_malloc(sizeof *s);
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

psim_status psim_mload_ops(psim_model_loader *L, const psim_model_scope *s, const cJSON *ops) {
  size_t sv = psim_jctx_key(&L->c, "ops");
  PSIM_CHECK(psim_json_expect_array(&L->c, ops));
  size_t i = 0;
  for (const cJSON *j = ops->child; j; j = j->next, i++) {
    size_t si = psim_jctx_index(&L->c, i);
    if (cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "block"))
      PSIM_CHECK(parse_block(L, s, j));
    else
      PSIM_CHECK(psim_mload_op(L, s, j));
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

/* Declared names of object key in block j (its "weights" or "tensors"). */
static double n_declared(const cJSON *j, const char *key) {
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, key);
  return cJSON_IsObject(g) ? (double)cJSON_GetArraySize(g) : 0;
}

void psim_mload_count_item(const cJSON *j, int depth, psim_mload_size *n) {
  const cJSON *r = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "repeat") : NULL;
  if (!cJSON_IsObject(j) || !cJSON_GetObjectItemCaseSensitive(j, "block")) {
    n->ops += 1;
    return;
  }
  double rep = cJSON_IsNumber(r) && r->valuedouble >= 1 ? r->valuedouble : 1;
  if (rep > PSIM_MODEL_MAX_REPEAT)
    rep = 1; /* reported by the parser */
  psim_mload_size in = {0, n_declared(j, "weights") + n_declared(j, "tensors")};
  psim_mload_count(cJSON_GetObjectItemCaseSensitive(j, "ops"), depth + 1, &in);
  n->ops += rep * in.ops; /* doubles: 64 levels of 10^6 repeats overflow to inf, still > limits */
  n->tensors += rep * in.tensors;
}

void psim_mload_count(const cJSON *ops, int depth, psim_mload_size *n) {
  if (!cJSON_IsArray(ops) || depth > 64)
    return;
  for (const cJSON *j = ops->child; j; j = j->next)
    psim_mload_count_item(j, depth, n);
}
