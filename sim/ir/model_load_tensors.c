/* model_load_tensors.c - the loader's "dims" and the tensor groups
 * ("inputs", "weights", "tensors"), at the top and in each block repeat. */
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_load_impl.h"

/* ------------------------------------------------------------------ dims */

static psim_status parse_dim(psim_model_loader *L, const cJSON *v) {
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
  if (psim_name_map_get(&L->dims, v->string) >= 0)
    return psim_jerr(&L->c, "duplicate dim '%.80s'", v->string);
  PSIM_CHECK(psim_grow((void **)&m->dims, &L->cap_dims, (size_t)m->n_dims + 1, sizeof *m->dims));
  d.name = psim_strdup(v->string);
  if (!d.name)
    return psim_error(PSIM_ENOMEM, "out of memory");
  m->dims[m->n_dims] = d;
  return psim_name_map_put(&L->dims, v->string, m->n_dims++);
}

psim_status psim_mload_dims(psim_model_loader *L, const cJSON *dims) {
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
static psim_status parse_tensor_shape(psim_model_loader *L, const cJSON *v, psim_tensor *t) {
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
    int32_t d = cJSON_IsString(e) ? psim_name_map_get(&L->dims, e->valuestring) : -2;
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
static psim_status add_tensor(psim_model_loader *L, const char *full, psim_tensor *t,
                              int32_t *out) {
  psim_model *m = L->m;
  if (psim_name_map_get(&L->tensors, full) >= 0)
    return psim_jerr(&L->c, "duplicate tensor name '%.200s'", full);
  if (m->n_tensors >= MAX_TENSORS)
    return psim_jerr(&L->c, "more than %lld tensors after expansion (the loader's limit)",
                     (long long)MAX_TENSORS);
  PSIM_CHECK(psim_grow((void **)&m->tensors, &L->cap_tensors, (size_t)m->n_tensors + 1,
                       sizeof *m->tensors));
  PSIM_CHECK(psim_grow((void **)&L->tdef, &L->cap_tdef, (size_t)m->n_tensors + 1, sizeof *L->tdef));
  PSIM_CHECK(psim_mload_def_here(L, &L->tdef[m->n_tensors]));
  t->name = psim_strdup(full);
  if (!t->name)
    return psim_error(PSIM_ENOMEM, "out of memory");
  t->producer = -1;
  t->layer = -1;
  m->tensors[m->n_tensors] = *t;
  *out = m->n_tensors;
  return psim_name_map_put(&L->tensors, full, m->n_tensors++);
}

bool psim_mload_same_shape(const psim_tensor *a, const psim_tensor *b) {
  return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->rank) == 0;
}

/* Block output of the last repeat: takes the outer name (reusing a declared
 * activation of the same dims, else declaring it in the parent's scope) and
 * aliases its local name t->name to it. */
static psim_status add_block_output(psim_model_loader *L, const psim_model_scope *s,
                                    const char *outer, psim_tensor *t) {
  const char *local_name = t->name; /* add_tensor replaces t->name by the full outer name */
  int32_t idx = psim_mload_resolve(L, s->parent, outer);
  if (idx >= 0) {
    const psim_tensor *o = &L->m->tensors[idx];
    if (o->kind != PSIM_TENSOR_ACTIVATION || !psim_mload_same_shape(o, t))
      return psim_jerr(&L->c,
                       "the block output '%.100s' must be an activation with the dims "
                       "of its local declaration",
                       outer);
  } else {
    char full[NAME_MAX_LEN];
    if (!psim_mload_join(full, s->parent->prefix, outer))
      return psim_jerr(&L->c, "name too long");
    PSIM_CHECK(add_tensor(L, full, t, &idx));
  }
  char local[NAME_MAX_LEN];
  if (!psim_mload_join(local, s->prefix, local_name))
    return psim_jerr(&L->c, "name too long");
  return psim_name_map_put(&L->tensors, local, idx);
}

/* Declares the tensors of one group ("inputs", "weights", "tensors") in scope s.
 * outputs/outer (block only, may be NULL): local names of the block outputs
 * and, for the last repeat, the outer names they take. */
psim_status psim_mload_tensor_group(psim_model_loader *L, const cJSON *obj, const char *key,
                                    psim_tensor_kind kind, const psim_model_scope *s,
                                    const cJSON *outputs, const cJSON *outer) {
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
    } else if (!psim_mload_join(full, s->prefix, v->string)) {
      return psim_jerr(&L->c, "name too long");
    } else {
      PSIM_CHECK(add_tensor(L, full, &t, &idx));
    }
    psim_jctx_pop(&L->c, si);
  }
  psim_jctx_pop(&L->c, sv);
  return PSIM_OK;
}
