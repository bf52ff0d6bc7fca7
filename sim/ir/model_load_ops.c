/* model_load_ops.c - one op of plansim.model/1: its common keys, inputs and
 * outputs by name, and the kind-specific part (through the kind table). */
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_load_impl.h"

/* ------------------------------------------------------------------- ops */

static const char *const common_keys[] = {"name", "kind", "in", "out", "layer", "tag"};

static psim_status check_op_keys(psim_model_loader *L, const cJSON *j, psim_op_kind k) {
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
psim_status psim_mload_io(psim_model_loader *L, const psim_model_scope *s, const cJSON *j,
                          const char *key, int lo, int hi, int32_t *t, int32_t *n) {
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
    int32_t idx = psim_mload_resolve(L, s, e->valuestring);
    if (idx < 0)
      return psim_jerr(&L->c, "unknown tensor '%.100s'", e->valuestring);
    t[(*n)++] = idx;
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}

/* Marks op index oi as the producer of its outputs. */
static psim_status set_producers(psim_model_loader *L, int32_t oi) {
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

static psim_status new_op(psim_model_loader *L, const psim_model_scope *s, const char *name,
                          psim_op **out) {
  psim_model *m = L->m;
  char full[NAME_MAX_LEN];
  if (!*name || !psim_mload_join(full, s->prefix, name))
    return psim_jerr(&L->c, "name: empty or too long");
  int32_t prev = psim_name_map_get(&L->ops, full);
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
  PSIM_CHECK(psim_mload_def_here(L, &L->opx[oi].def));
  PSIM_CHECK(psim_name_map_put(&L->ops, full, oi));
  *out = op;
  return PSIM_OK;
}

psim_status psim_mload_op(psim_model_loader *L, const psim_model_scope *s, const cJSON *j) {
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
  PSIM_CHECK(psim_mload_io(L, s, j, "in", lo, hi, op->in, &op->n_in));
  PSIM_CHECK(psim_mload_io(L, s, j, "out", olo, ohi, op->out, &op->n_out));
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
