/* gen_build.c - the builder of plansim.model/1 documents that every generator
 * uses (gen_impl.h): dims, tensors, ops and blocks with a sticky status.
 * Parameter counts are checked by tests/unit/test_model.c against the
 * published formulas (Narayanan et al. 2021, eq. 2; LLaMA-2 7B = 6.74e9). */
#include "models/generators.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gen_impl.h"
#include "sim/core/json.h"
#include "sim/ir/model.h"

/* Appends a space (unless buf is empty) and word to buf of capacity cap. */
void psim_gb_append(char *buf, size_t cap, const char *word) {
  assert(buf && cap > 0 && word);
  size_t n = strlen(buf), w = strlen(word);
  if (n && n + 1 < cap)
    buf[n++] = ' ';
  if (n + w >= cap)
    w = n < cap ? cap - 1 - n : 0;
  memcpy(buf + n, word, w);
  buf[n + w] = '\0';
}

void psim_gb_nomem(psim_gb *g) {
  if (g->st == PSIM_OK)
    g->st = psim_error(PSIM_ENOMEM, "out of memory building a model");
}

cJSON *psim_gb_obj(psim_gb *g, cJSON *parent, const char *key, bool array) {
  cJSON *o = array ? cJSON_AddArrayToObject(parent, key) : cJSON_AddObjectToObject(parent, key);
  if (!o)
    psim_gb_nomem(g);
  return o;
}

void psim_gb_str(psim_gb *g, cJSON *o, const char *k, const char *v) {
  if (o && !cJSON_AddStringToObject(o, k, v))
    psim_gb_nomem(g);
}
void psim_gb_num(psim_gb *g, cJSON *o, const char *k, double v) {
  if (o && !cJSON_AddNumberToObject(o, k, v))
    psim_gb_nomem(g);
}
void psim_gb_bool(psim_gb *g, cJSON *o, const char *k, bool v) {
  if (o && !cJSON_AddBoolToObject(o, k, v))
    psim_gb_nomem(g);
}

/* Array of the space-separated names in list. */
cJSON *psim_gb_names(psim_gb *g, cJSON *o, const char *key, const char *list) {
  cJSON *a = o ? psim_gb_obj(g, o, key, true) : NULL;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *t = strtok_r(buf, " ", &save); a && t; t = strtok_r(NULL, " ", &save))
    if (!cJSON_AddItemToArray(a, cJSON_CreateString(t)))
      psim_gb_nomem(g);
  return a;
}

void psim_gb_pair(psim_gb *g, cJSON *o, const char *key, int64_t h, int64_t w) {
  cJSON *a = o ? psim_gb_obj(g, o, key, true) : NULL;
  if (a && (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)h)) ||
            !cJSON_AddItemToArray(a, cJSON_CreateNumber((double)w))))
    psim_gb_nomem(g);
}

/* Declares dim name (once). */
void psim_gb_dim(psim_gb *g, const char *name, int64_t size, const char *role) {
  if (!g->dims || cJSON_GetObjectItemCaseSensitive(g->dims, name))
    return;
  cJSON *d = psim_gb_obj(g, g->dims, name, false);
  psim_gb_num(g, d, "size", (double)size);
  if (role)
    psim_gb_str(g, d, "role", role);
}

void psim_gb_tensor(psim_gb *g, cJSON *group, const char *name, const char *dims,
                    const char *dtype) {
  cJSON *t = group ? psim_gb_obj(g, group, name, false) : NULL;
  psim_gb_names(g, t, "dims", dims);
  if (dtype)
    psim_gb_str(g, t, "dtype", dtype);
}

cJSON *psim_gb_op(psim_gb *g, cJSON *ops, const char *name, const char *kind, const char *in,
                  const char *out) {
  cJSON *o = cJSON_CreateObject();
  if (!o || !ops || !cJSON_AddItemToArray(ops, o)) {
    cJSON_Delete(o);
    psim_gb_nomem(g);
    return NULL;
  }
  psim_gb_str(g, o, "name", name);
  psim_gb_str(g, o, "kind", kind);
  psim_gb_names(g, o, "in", in);
  psim_gb_names(g, o, "out", out);
  return o;
}

cJSON *psim_gb_ew(psim_gb *g, cJSON *ops, const char *name, const char *fn, const char *in,
                  const char *out) {
  cJSON *o = psim_gb_op(g, ops, name, "elementwise", in, out);
  psim_gb_str(g, o, "fn", fn);
  return o;
}

void psim_gb_linear(psim_gb *g, const psim_gb_blk *b, const char *name, const char *x,
                    const char *wdims, const char *bdims, const char *y, const char *ydims,
                    const char *ydtype) {
  char w[96], bn[96], in[256];
  snprintf(w, sizeof w, "w_%s", name);
  snprintf(bn, sizeof bn, "b_%s", name);
  /* FP8 linears write their output in the activations' dtype: torchao's Float8Linear returns
   * the input's dtype (torchao/float8/float8_linear.py), Transformer Engine's FP8 GEMMs write
   * BF16; the op carries "fp8": true for the GEMM's rate instead */
  bool fp8 = ydtype && strcmp(ydtype, "fp8") == 0;
  psim_gb_tensor(g, b->weights, w, wdims, NULL);
  psim_gb_tensor(g, b->tensors, y, ydims, fp8 ? NULL : ydtype);
  snprintf(in, sizeof in, "%s %s", x, w);
  if (bdims) {
    psim_gb_tensor(g, b->weights, bn, bdims, NULL);
    snprintf(in, sizeof in, "%s %s %s", x, w, bn);
  }
  cJSON *op = psim_gb_op(g, b->ops, name, "matmul", in, y);
  if (fp8 && op)
    psim_gb_bool(g, op, "fp8", true);
}

psim_gb_blk psim_gb_block(psim_gb *g, const char *name, int64_t repeat, const char *inputs,
                          const char *outputs, const char *in, const char *out) {
  psim_gb_blk b = {0};
  cJSON *o = cJSON_CreateObject();
  if (!o || !g->ops || !cJSON_AddItemToArray(g->ops, o)) {
    cJSON_Delete(o);
    psim_gb_nomem(g);
    return b;
  }
  psim_gb_str(g, o, "block", name);
  psim_gb_num(g, o, "repeat", (double)repeat);
  psim_gb_names(g, o, "inputs", inputs);
  psim_gb_names(g, o, "outputs", outputs);
  psim_gb_names(g, o, "in", in);
  psim_gb_names(g, o, "out", out);
  b.weights = psim_gb_obj(g, o, "weights", false);
  b.tensors = psim_gb_obj(g, o, "tensors", false);
  b.ops = psim_gb_obj(g, o, "ops", true);
  return b;
}

void psim_gb_start(psim_gb *g, const char *name, const char *dtype) {
  memset(g, 0, sizeof *g);
  g->root = cJSON_CreateObject();
  if (!g->root) {
    psim_gb_nomem(g);
    return;
  }
  psim_gb_str(g, g->root, "format", "plansim.model/1");
  psim_gb_str(g, g->root, "name", name);
  psim_gb_str(g, g->root, "dtype", dtype);
  g->dims = psim_gb_obj(g, g->root, "dims", false);
  g->inputs = psim_gb_obj(g, g->root, "inputs", false);
  g->weights = psim_gb_obj(g, g->root, "weights", false);
  g->tensors = psim_gb_obj(g, g->root, "tensors", false);
  g->ops = psim_gb_obj(g, g->root, "ops", true);
}

/* Hands the document out only when the model loader takes it: options each
 * in range can still combine into a model it refuses (a tensor of more than
 * 2^64 elements), and a generator must not write a file `check` rejects. */
psim_status psim_gb_finish(psim_gb *g, struct cJSON **out) {
  if (g->st == PSIM_OK) {
    psim_model m;
    psim_model_init(&m);
    if (psim_model_from_json("generated model", g->root, &m) != PSIM_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", psim_error_message());
      g->st = psim_error(PSIM_EINPUT, "these options give a model plansim cannot load: %s", why);
    }
    psim_model_destroy(&m);
  }
  if (g->st != PSIM_OK) {
    cJSON_Delete(g->root);
    return g->st;
  }
  *out = g->root;
  return PSIM_OK;
}

psim_status psim_gb_check_dtype(const char *dt) {
  psim_dtype t;
  if (psim_dtype_parse(dt, &t) != PSIM_OK)
    return psim_error(PSIM_EINPUT,
                      "--dtype: unknown dtype '%.40s'; expected fp32, fp16, bf16, "
                      "fp8 or fp64",
                      dt);
  return PSIM_OK;
}

psim_status psim_gb_positive(const char *flag, int64_t v, int64_t max) {
  if (v < 1 || v > max)
    return psim_error(PSIM_EINPUT, "--%s: %lld out of range [1, %lld]", flag, (long long)v,
                      (long long)max);
  return PSIM_OK;
}
