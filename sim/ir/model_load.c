/* model_load.c - reading plansim.model/1 (docs/model.md): the header and the
 * order of the steps. The steps: names and scopes (model_load_names.c), dims
 * and tensors (model_load_tensors.c), ops (model_load_ops.c), blocks with
 * repeat (model_load_blocks.c), order, layers and the tensor rules
 * (model_load_checks.c); kind-specific checks live in opkind.c.
 *
 * Loading is linear in the expanded model: names go through hash maps, the
 * order comes from one iterative depth-first search. */
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_load_impl.h"

static psim_status parse_header(psim_model_loader *L, const cJSON *root) {
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

/* Refuses a model whose expansion would exceed PSIM_MODEL_MAX_OPS ops or
 * PSIM_MODEL_MAX_BYTES of memory, from the JSON alone (issue 24 item 9: a
 * 3 kB file with "repeat": 833333 took 8.46 GB and 55 s before failing),
 * naming the top-level entry of the "ops" array that expands the most. */
static psim_status check_size(psim_model_loader *L, const cJSON *ops) {
  psim_mload_size n = {0, (double)L->m->n_tensors}, big = {0, 0};
  size_t i = 0, at = 0;
  for (const cJSON *j = cJSON_IsArray(ops) ? ops->child : NULL; j; j = j->next, i++) {
    psim_mload_size one = {0, 0};
    psim_mload_count_item(j, 0, &one);
    if (one.ops > big.ops)
      big = one, at = i;
    n.ops += one.ops;
    n.tensors += one.tensors;
  }
  double bytes = n.ops * PSIM_MODEL_BYTES_PER_OP + n.tensors * PSIM_MODEL_BYTES_PER_TENSOR;
  if (n.ops <= (double)PSIM_MODEL_MAX_OPS && bytes <= PSIM_MODEL_MAX_BYTES)
    return PSIM_OK;
  psim_jctx_key(&L->c, "ops");
  psim_jctx_index(&L->c, at);
  if (n.ops > (double)PSIM_MODEL_MAX_OPS)
    return psim_jerr(&L->c,
                     "the model expands to %.3g ops (%.3g here), over the loader's limit of "
                     "%lld (PSIM_MODEL_MAX_OPS in sim/ir/model.h)",
                     n.ops, big.ops, (long long)PSIM_MODEL_MAX_OPS);
  return psim_jerr(&L->c,
                   "the model expands to %.3g ops and %.3g tensors (%.3g ops here), about "
                   "%.3g GB in memory, over the loader's limit of %.3g GB "
                   "(PSIM_MODEL_MAX_BYTES in sim/ir/model.h)",
                   n.ops, n.tensors, big.ops, bytes / 1e9, PSIM_MODEL_MAX_BYTES / 1e9);
}

static psim_status load(psim_model_loader *L, const cJSON *root) {
  PSIM_CHECK(psim_json_expect_object(&L->c, root));
  PSIM_CHECK(parse_header(L, root));
  PSIM_CHECK(psim_mload_dims(L, cJSON_GetObjectItemCaseSensitive(root, "dims")));
  psim_model_scope *top = psim_calloc(1, sizeof *top);
  if (!top)
    return psim_error(PSIM_ENOMEM, "out of memory");
  top->block = -1;
  psim_status s = psim_mload_tensor_group(L, root, "inputs", PSIM_TENSOR_INPUT, top, NULL, NULL);
  if (s == PSIM_OK)
    s = psim_mload_tensor_group(L, root, "weights", PSIM_TENSOR_WEIGHT, top, NULL, NULL);
  if (s == PSIM_OK)
    s = psim_mload_tensor_group(L, root, "tensors", PSIM_TENSOR_ACTIVATION, top, NULL, NULL);
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "ops");
  if (s == PSIM_OK)
    s = check_size(L, ops);
  if (s == PSIM_OK)
    s = psim_mload_ops(L, top, ops);
  psim_free(top);
  PSIM_CHECK(s);
  if (L->m->n_ops == 0)
    return psim_jerr(&L->c, "ops: the model has no ops");
  return psim_mload_finish(L);
}

psim_status psim_model_from_json(const char *file, const cJSON *root, psim_model *m) {
  psim_model_init(m);
  psim_model_loader L = {.m = m, .cur_layer = -1};
  psim_jctx_init(&L.c, file ? file : "(model)");
  psim_status s = load(&L, root);
  if (s == PSIM_OK && file && !(m->file = psim_strdup(file)))
    s = psim_error(PSIM_ENOMEM, "out of memory");
  psim_name_map_destroy(&L.dims);
  psim_name_map_destroy(&L.tensors);
  psim_name_map_destroy(&L.ops);
  psim_name_map_destroy(&L.defmap);
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
