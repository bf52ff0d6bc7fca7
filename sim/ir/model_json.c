/* model_json.c - writing a model back as plansim.model/1 (the loader's
 * inverse: psim_model_from_json of the result gives the same model). */
#include "sim/ir/model_impl.h"

static psim_status add_str(cJSON *arr, const char *s) {
  cJSON *v = cJSON_CreateString(s);
  if (!v || !cJSON_AddItemToArray(arr, v)) {
    cJSON_Delete(v);
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  }
  return PSIM_OK;
}

static psim_status dims_json(const psim_model *m, cJSON *root) {
  cJSON *dims = NULL;
  PSIM_CHECK(psim_json_add_object(root, "dims", &dims));
  for (int32_t i = 0; i < m->n_dims; i++) {
    cJSON *d = NULL;
    PSIM_CHECK(psim_json_add_object(dims, m->dims[i].name, &d));
    PSIM_CHECK(psim_json_add_number(d, "size", (double)m->dims[i].size));
    if (m->dims[i].role != PSIM_ROLE_NONE)
      PSIM_CHECK(psim_json_add_string(d, "role", psim_role_name(m->dims[i].role)));
  }
  return PSIM_OK;
}

static psim_status tensor_json(const psim_model *m, const psim_tensor *t, cJSON *group) {
  cJSON *o = NULL, *dims = NULL;
  PSIM_CHECK(psim_json_add_object(group, t->name, &o));
  PSIM_CHECK(psim_json_add_array(o, "dims", &dims));
  for (int k = 0; k < t->rank; k++)
    PSIM_CHECK(add_str(dims, m->dims[t->dims[k]].name));
  if (t->dtype != m->dtype)
    PSIM_CHECK(psim_json_add_string(o, "dtype", psim_dtype_name(t->dtype)));
  return PSIM_OK;
}

static psim_status tensors_json(const psim_model *m, cJSON *root) {
  static const char *const keys[] = {"inputs", "weights", "tensors"};
  cJSON *g[3];
  for (int k = 0; k < 3; k++)
    PSIM_CHECK(psim_json_add_object(root, keys[k], &g[k]));
  for (int32_t i = 0; i < m->n_tensors; i++)
    PSIM_CHECK(tensor_json(m, &m->tensors[i], g[m->tensors[i].kind]));
  return PSIM_OK;
}

static psim_status names_json(const psim_model *m, cJSON *o, const char *key, const int32_t *t,
                              int n) {
  cJSON *a = NULL;
  PSIM_CHECK(psim_json_add_array(o, key, &a));
  for (int i = 0; i < n; i++)
    PSIM_CHECK(add_str(a, m->tensors[t[i]].name));
  return PSIM_OK;
}

static psim_status op_json(const psim_model *m, const psim_op *op, cJSON *ops) {
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddItemToArray(ops, o)) {
    cJSON_Delete(o);
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  }
  PSIM_CHECK(psim_json_add_string(o, "name", op->name));
  PSIM_CHECK(psim_json_add_string(o, "kind", psim_op_kind_name(op->kind)));
  PSIM_CHECK(names_json(m, o, "in", op->in, op->n_in));
  PSIM_CHECK(names_json(m, o, "out", op->out, op->n_out));
  PSIM_CHECK(psim_json_add_number(o, "layer", op->layer));
  if (op->tag)
    PSIM_CHECK(psim_json_add_string(o, "tag", op->tag));
  return psim_opkind_to_json(m, op, o);
}

static psim_status model_json(const psim_model *m, cJSON *root) {
  PSIM_CHECK(psim_json_add_string(root, "format", "plansim.model/1"));
  PSIM_CHECK(psim_json_add_string(root, "name", m->name ? m->name : "model"));
  PSIM_CHECK(psim_json_add_string(root, "dtype", psim_dtype_name(m->dtype)));
  PSIM_CHECK(dims_json(m, root));
  PSIM_CHECK(tensors_json(m, root));
  cJSON *ops = NULL;
  PSIM_CHECK(psim_json_add_array(root, "ops", &ops));
  for (int32_t i = 0; i < m->n_ops; i++)
    PSIM_CHECK(op_json(m, &m->ops[i], ops));
  return PSIM_OK;
}

psim_status psim_model_to_json(const psim_model *m, cJSON **out) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  psim_status s = model_json(m, root);
  if (s != PSIM_OK) {
    cJSON_Delete(root);
    return s;
  }
  *out = root;
  return PSIM_OK;
}
