/* model_names.c - the names of dtypes, dim roles, op kinds and elementwise
 * functions, and what an elementwise function costs (docs/model.md). */
#include <stdio.h>
#include <string.h>

#include "sim/ir/model_impl.h"

/* ---------------------------------------------------------------- names */

static const char *const dtype_names[PSIM_DTYPE_COUNT] = {"fp32", "fp16",  "bf16",  "fp8",
                                                          "fp64", "int32", "int64", "bool"};
static const size_t dtype_sizes[PSIM_DTYPE_COUNT] = {4, 2, 2, 1, 8, 4, 8, 1};
static const char *const role_names[PSIM_ROLE_COUNT] = {"none",   "batch",    "sequence", "hidden",
                                                        "heads",  "head_dim", "ffn",      "vocab",
                                                        "expert", "channel",  "spatial"};
static const char *const kind_names[PSIM_OP_KIND_COUNT] = {
    "matmul",    "elementwise", "dropout",       "softmax",  "layernorm", "rmsnorm",
    "attention", "embedding",   "cross_entropy", "conv2d",   "pool2d",    "concat",
    "split",     "reshape",     "transpose",     "dispatch", "combine"};

size_t psim_dtype_bytes(psim_dtype t) {
  return t < PSIM_DTYPE_COUNT ? dtype_sizes[t] : 0;
}
const char *psim_dtype_name(psim_dtype t) {
  return t < PSIM_DTYPE_COUNT ? dtype_names[t] : "?";
}
const char *psim_role_name(psim_role r) {
  return r < PSIM_ROLE_COUNT ? role_names[r] : "?";
}
const char *psim_op_kind_name(psim_op_kind k) {
  return k < PSIM_OP_KIND_COUNT ? kind_names[k] : "?";
}

static int find_name(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0)
      return i;
  return -1;
}

psim_status psim_dtype_parse(const char *s, psim_dtype *out) {
  int i = find_name(dtype_names, PSIM_DTYPE_COUNT, s);
  if (i < 0)
    return psim_error(PSIM_EINPUT,
                      "unknown dtype '%.60s'; expected one of: fp32, fp16, bf16, "
                      "fp8, fp64, int32, int64, bool",
                      s);
  *out = (psim_dtype)i;
  return PSIM_OK;
}

psim_status psim_role_parse(const char *s, psim_role *out) {
  int i = find_name(role_names, PSIM_ROLE_COUNT, s);
  if (i < 0)
    return psim_error(PSIM_EINPUT,
                      "unknown role '%.60s'; expected one of: batch, sequence, "
                      "hidden, heads, head_dim, ffn, vocab, expert, channel, "
                      "spatial, none",
                      s);
  *out = (psim_role)i;
  return PSIM_OK;
}

psim_status psim_op_kind_parse(const char *s, psim_op_kind *out) {
  int i = strcmp(s, "einsum") == 0 ? PSIM_OP_MATMUL : find_name(kind_names, PSIM_OP_KIND_COUNT, s);
  if (i < 0)
    return psim_error(PSIM_EINPUT,
                      "unknown op kind '%.60s'; expected one of: matmul, einsum, "
                      "elementwise, dropout, softmax, layernorm, rmsnorm, "
                      "attention, embedding, cross_entropy, conv2d, pool2d, concat, "
                      "split, reshape, transpose, dispatch, combine",
                      s);
  *out = (psim_op_kind)i;
  return PSIM_OK;
}

/* ------------------------------------------------------- elementwise fns */

static const psim_ew_fn ew_fns[] = {
    {"add", 2, 4, 1, 1},     {"sub", 2, 2, 1, 1},  {"mul", 2, 4, 1, 2},    {"div", 2, 2, 1, 3},
    {"max", 2, 2, 1, 1},     {"min", 2, 2, 1, 1},  {"scale", 1, 1, 1, 1},  {"mask", 1, 2, 1, 1},
    {"neg", 1, 1, 1, 1},     {"exp", 1, 1, 1, 1},  {"square", 1, 1, 1, 2}, {"sqrt", 1, 1, 1, 2},
    {"rsqrt", 1, 1, 1, 3},   {"relu", 1, 1, 1, 1}, {"gelu", 1, 1, 8, 13},  {"silu", 1, 1, 4, 6},
    {"sigmoid", 1, 1, 3, 3}, {"tanh", 1, 1, 1, 3}, {"swiglu", 2, 2, 5, 8}, {"copy", 1, 1, 0, 0},
    {"cast", 1, 1, 0, 0},
};
enum { N_EW_FNS = sizeof ew_fns / sizeof ew_fns[0] };

const psim_ew_fn *psim_ew_find(const char *name) {
  for (int i = 0; i < N_EW_FNS; i++)
    if (strcmp(ew_fns[i].name, name) == 0)
      return &ew_fns[i];
  return NULL;
}

void psim_ew_list(char *buf, size_t size) {
  buf[0] = '\0';
  for (int i = 0; i < N_EW_FNS; i++)
    snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", i ? ", " : "", ew_fns[i].name);
}
