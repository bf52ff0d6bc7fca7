/* opkind.c - the table of op kinds: what each kind accepts (inputs, outputs,
 * keys), which rules give its iteration space and its work, and how its keys
 * are written back (docs/model.md has the same table in prose). */
#include "sim/ir/model_impl.h"

/* ------------------------------------------------------------ kind table */

/* One row per kind: the bounds on its inputs and outputs, the keys it takes
 * besides name, kind, in, out, layer and tag, its iteration-space rule
 * (opkind_space.c) and its work rule (opkind_work.c). A new kind is a row
 * here, a rule in each of those files, and its keys in psim_opkind_to_json. */
typedef struct kind_info {
  int min_in, max_in, min_out, max_out;
  const char *keys[5];
  psim_opspace_fn analyse;
  psim_opwork_fn work;
} kind_info;

static const kind_info kinds[PSIM_OP_KIND_COUNT] = {
    [PSIM_OP_MATMUL] = {2, 3, 1, 1, {"fp8", NULL}, psim_opspace_matmul, psim_opwork_matmul},
    [PSIM_OP_ELEMENTWISE] =
        {1, 4, 1, 1, {"fn", NULL}, psim_opspace_elementwise, psim_opwork_elementwise},
    [PSIM_OP_DROPOUT] = {1, 1, 1, 1, {"p", NULL}, psim_opspace_dropout, psim_opwork_dropout},
    [PSIM_OP_SOFTMAX] = {1, 1, 1, 1, {"axis", NULL}, psim_opspace_norm, psim_opwork_norm},
    [PSIM_OP_LAYERNORM] = {1, 3, 1, 1, {"axis", NULL}, psim_opspace_norm, psim_opwork_norm},
    [PSIM_OP_RMSNORM] = {1, 2, 1, 1, {"axis", NULL}, psim_opspace_norm, psim_opwork_norm},
    [PSIM_OP_ATTENTION] = {3,
                           3,
                           1,
                           1,
                           {"causal", "flash", "window", NULL},
                           psim_opspace_attention,
                           psim_opwork_attention},
    [PSIM_OP_EMBEDDING] = {2, 2, 1, 1, {NULL}, psim_opspace_embedding, psim_opwork_embedding},
    [PSIM_OP_CROSS_ENTROPY] =
        {2, 2, 1, 1, {NULL}, psim_opspace_cross_entropy, psim_opwork_cross_entropy},
    [PSIM_OP_CONV2D] =
        {2, 3, 1, 1, {"kernel", "stride", "pad", NULL}, psim_opspace_conv2d, psim_opwork_conv2d},
    [PSIM_OP_POOL2D] = {1,
                        1,
                        1,
                        1,
                        {"kernel", "stride", "pad", "fn", NULL},
                        psim_opspace_pool2d,
                        psim_opwork_pool2d},
    [PSIM_OP_CONCAT] =
        {1, PSIM_MAX_OP_IO, 1, 1, {"axis", NULL}, psim_opspace_concat_split, psim_opwork_copy},
    [PSIM_OP_SPLIT] =
        {1, 1, 1, PSIM_MAX_OP_IO, {"axis", NULL}, psim_opspace_concat_split, psim_opwork_copy},
    [PSIM_OP_RESHAPE] = {1, 1, 1, 1, {NULL}, psim_opspace_reshape, psim_opwork_reshape},
    [PSIM_OP_TRANSPOSE] = {1, 1, 1, 1, {NULL}, psim_opspace_transpose, psim_opwork_copy},
    [PSIM_OP_DISPATCH] =
        {1, 2, 1, 1, {"top_k", "dropless", NULL}, psim_opspace_moe, psim_opwork_moe},
    [PSIM_OP_COMBINE] =
        {1, 2, 1, 1, {"top_k", "dropless", NULL}, psim_opspace_moe, psim_opwork_moe},
};

const char *const *psim_opkind_keys(psim_op_kind k) {
  return kinds[k].keys;
}

void psim_opkind_arity(psim_op_kind k, int *min_in, int *max_in, int *min_out, int *max_out) {
  *min_in = kinds[k].min_in;
  *max_in = kinds[k].max_in;
  *min_out = kinds[k].min_out;
  *max_out = kinds[k].max_out;
}

psim_status psim_opkind_analyse(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j) {
  op->attrs.window_in[0] = op->attrs.window_in[1] = -1;
  PSIM_CHECK(kinds[op->kind].analyse(c, m, op, j));
  psim_opspace_mark_weight_dims(m, op);
  return PSIM_OK;
}

psim_status psim_opkind_work(psim_model *m, psim_op *op, size_t *cap) {
  return psim_opwork_run(m, op, cap, kinds[op->kind].work);
}

/* --------------------------------------------------------------- to_json */

static psim_status pair_json(cJSON *o, const char *key, const int64_t v[2]) {
  cJSON *a = NULL;
  PSIM_CHECK(psim_json_add_array(o, key, &a));
  for (int k = 0; k < 2; k++)
    if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[k])))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  return PSIM_OK;
}

static psim_status axis_json(const psim_model *m, const psim_op *op, cJSON *o) {
  cJSON *a = NULL;
  PSIM_CHECK(psim_json_add_array(o, "axis", &a));
  for (int k = 0; k < op->attrs.n_axis_dims; k++)
    if (!cJSON_AddItemToArray(a, cJSON_CreateString(m->dims[op->attrs.axis_dims[k]].name)))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  return PSIM_OK;
}

psim_status psim_opkind_to_json(const psim_model *m, const psim_op *op, cJSON *o) {
  const psim_op_attrs *a = &op->attrs;
  switch (op->kind) {
  case PSIM_OP_MATMUL: return a->fp8 ? psim_json_add_bool(o, "fp8", true) : PSIM_OK;
  case PSIM_OP_ELEMENTWISE: return psim_json_add_string(o, "fn", op->fn);
  case PSIM_OP_DROPOUT: return psim_json_add_number(o, "p", a->dropout_p);
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_CONCAT:
  case PSIM_OP_SPLIT: return axis_json(m, op, o);
  case PSIM_OP_ATTENTION:
    PSIM_CHECK(psim_json_add_bool(o, "causal", a->causal));
    PSIM_CHECK(psim_json_add_bool(o, "flash", a->flash));
    return a->window ? psim_json_add_number(o, "window", (double)a->window) : PSIM_OK;
  case PSIM_OP_POOL2D: PSIM_CHECK(psim_json_add_string(o, "fn", op->fn)); /* fall through */
  case PSIM_OP_CONV2D:
    PSIM_CHECK(pair_json(o, "kernel", a->kernel));
    PSIM_CHECK(pair_json(o, "stride", a->stride));
    return pair_json(o, "pad", a->pad);
  case PSIM_OP_DISPATCH:
  case PSIM_OP_COMBINE:
    PSIM_CHECK(psim_json_add_number(o, "top_k", a->top_k));
    return a->dropless ? psim_json_add_bool(o, "dropless", true) : PSIM_OK;
  default: return PSIM_OK;
  }
}
