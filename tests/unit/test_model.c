/* test_model.c - model IR: loader, blocks, validation, op work, generators. */
#include <check.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/generators.h"
#include "models/registry.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/ir/model.h"

static psim_status load_text(const char *text, psim_model *m) {
  cJSON *root = NULL;
  psim_status s = psim_json_parse("t.json", text, strlen(text), &root);
  if (s != PSIM_OK)
    return s;
  s = psim_model_from_json("t.json", root, m);
  cJSON_Delete(root);
  return s;
}

/* x [b, k] (input or activation) times w [k, n] -> y [b, n]. */
static const char *mm_model =
    "{\"format\": \"plansim.model/1\", \"dtype\": \"fp32\","
    " \"dims\": {\"b\": {\"size\": 6, \"role\": \"batch\"}, \"k\": 10, \"n\": 14},"
    " \"inputs\": {\"x\": {\"dims\": [\"b\", \"k\"]}},"
    " \"weights\": {\"w\": {\"dims\": [\"k\", \"n\"]}},"
    " \"tensors\": {\"y\": {\"dims\": [\"b\", \"n\"]}},"
    " \"ops\": [{\"name\": \"mm\", \"kind\": \"matmul\", \"in\": [\"x\", \"w\"], \"out\": "
    "[\"y\"]}]}";

START_TEST(matmul_flops_2mnk) {
  psim_model m;
  ck_assert_int_eq(load_text(mm_model, &m), PSIM_OK);
  const psim_op *op = &m.ops[0];
  ck_assert_double_eq(op->flops[PSIM_PASS_FWD], 2.0 * 6 * 10 * 14);
  /* x is a model input: only the weight gradient is computed. */
  ck_assert_double_eq(op->flops[PSIM_PASS_BWD], 2.0 * 6 * 10 * 14);
  ck_assert_double_eq(op->bytes[PSIM_PASS_FWD], 4.0 * (6 * 10 + 10 * 14 + 6 * 14));
  ck_assert_int_eq(op->n_dims, 3);
  int kd = psim_op_dim_index(op, psim_model_find_dim(&m, "k"));
  ck_assert_int_eq(op->dims[kd].use, PSIM_USE_CONTRACTED);
  ck_assert(op->dims[kd].in_weight);
  int bd = psim_op_dim_index(op, psim_model_find_dim(&m, "b"));
  ck_assert_int_eq(op->dims[bd].use, PSIM_USE_OUTPUT);
  ck_assert(!op->dims[bd].in_weight);
  ck_assert_double_eq(m.n_params, 140);
  ck_assert_int_eq(m.role_dim[PSIM_ROLE_BATCH], psim_model_find_dim(&m, "b"));
  psim_model_destroy(&m);
}
END_TEST

/* Backward is 2x forward when both operands need gradients. */
static const char *mm2_model =
    "{\"format\": \"plansim.model/1\", \"dims\": {\"b\": 4, \"k\": 8, \"n\": 8, \"o\": 3},"
    " \"inputs\": {\"x\": {\"dims\": [\"b\", \"k\"]}},"
    " \"weights\": {\"w\": {\"dims\": [\"k\", \"n\"]}, \"v\": {\"dims\": [\"n\", \"o\"]}},"
    " \"tensors\": {\"y\": {\"dims\": [\"b\", \"n\"]}, \"z\": {\"dims\": [\"b\", \"o\"]}},"
    " \"ops\": [{\"name\": \"b2\", \"kind\": \"einsum\", \"in\": [\"y\", \"v\"], \"out\": [\"z\"]},"
    "          {\"name\": \"a1\", \"kind\": \"matmul\", \"in\": [\"x\", \"w\"], \"out\": "
    "[\"y\"]}]}";

START_TEST(matmul_backward_and_order) {
  psim_model m;
  ck_assert_int_eq(load_text(mm2_model, &m), PSIM_OK);
  /* file order is b2, a1; topological order puts a1 first */
  ck_assert_str_eq(m.ops[0].name, "a1");
  ck_assert_str_eq(m.ops[1].name, "b2");
  ck_assert_double_eq(m.ops[1].flops[PSIM_PASS_BWD], 2 * m.ops[1].flops[PSIM_PASS_FWD]);
  ck_assert_double_eq(m.ops[0].flops[PSIM_PASS_BWD], m.ops[0].flops[PSIM_PASS_FWD]);
  ck_assert(m.tensors[psim_model_find_tensor(&m, "y")].requires_grad);
  ck_assert(!m.tensors[psim_model_find_tensor(&m, "x")].requires_grad);
  ck_assert_int_eq(m.tensors[psim_model_find_tensor(&m, "y")].producer, 0);
  psim_model_destroy(&m);
}
END_TEST

START_TEST(shard_work_scales_by_tensor) {
  psim_model m;
  ck_assert_int_eq(load_text(mm_model, &m), PSIM_OK);
  const psim_op *op = &m.ops[0];
  int64_t sz[PSIM_MAX_OP_DIMS];
  for (int i = 0; i < op->n_dims; i++)
    sz[i] = m.dims[op->dims[i].dim].size;
  int bd = psim_op_dim_index(op, psim_model_find_dim(&m, "b"));
  int kd = psim_op_dim_index(op, psim_model_find_dim(&m, "k"));
  sz[bd] = 3; /* batch split in 2: x and y halve, w stays whole */
  double f, b;
  psim_op_shard_work(&m, op, sz, PSIM_PASS_FWD, &f, &b);
  ck_assert_double_eq(f, 2.0 * 3 * 10 * 14);
  ck_assert_double_eq(b, 4.0 * (3 * 10 + 10 * 14 + 3 * 14));
  sz[bd] = 6;
  sz[kd] = 5; /* contracted split: x and w halve, y (partial sums) whole */
  psim_op_shard_work(&m, op, sz, PSIM_PASS_FWD, &f, &b);
  ck_assert_double_eq(f, 2.0 * 6 * 5 * 14);
  ck_assert_double_eq(b, 4.0 * (6 * 5 + 5 * 14 + 6 * 14));
  psim_model_destroy(&m);
}
END_TEST

START_TEST(conv_flops_closed_form) {
  const char *t =
      "{\"format\": \"plansim.model/1\", \"dims\": {\"b\": 2, \"ci\": 3, \"co\": 8, \"h\": 32,"
      " \"w\": 32, \"h2\": 16, \"w2\": 16, \"kh\": 3, \"kw\": 3},"
      " \"inputs\": {\"img\": {\"dims\": [\"b\", \"ci\", \"h\", \"w\"]}},"
      " \"weights\": {\"k\": {\"dims\": [\"co\", \"ci\", \"kh\", \"kw\"]}},"
      " \"tensors\": {\"o\": {\"dims\": [\"b\", \"co\", \"h2\", \"w2\"]}},"
      " \"ops\": [{\"name\": \"conv\", \"kind\": \"conv2d\", \"in\": [\"img\", \"k\"],"
      " \"out\": [\"o\"], \"stride\": 2, \"pad\": [1, 1]}]}";
  psim_model m;
  ck_assert_int_eq(load_text(t, &m), PSIM_OK);
  const psim_op *op = &m.ops[0];
  /* 2 * b * cout * h2 * w2 * cin * kh * kw */
  ck_assert_double_eq(op->flops[PSIM_PASS_FWD], 2.0 * 2 * 8 * 16 * 16 * 3 * 3 * 3);
  int hd = psim_op_dim_index(op, psim_model_find_dim(&m, "h2"));
  ck_assert_int_eq(op->dims[hd].use, PSIM_USE_WINDOW);
  ck_assert_int_eq(op->dims[psim_op_dim_index(op, psim_model_find_dim(&m, "ci"))].use,
                   PSIM_USE_CONTRACTED);
  ck_assert_int_eq(op->dims[psim_op_dim_index(op, psim_model_find_dim(&m, "kh"))].use,
                   PSIM_USE_FIXED);
  /* a split of the output rows halves the input image too (h maps onto h2) */
  int64_t sz[PSIM_MAX_OP_DIMS];
  for (int i = 0; i < op->n_dims; i++)
    sz[i] = m.dims[op->dims[i].dim].size;
  sz[hd] = 8;
  double f, b;
  psim_op_shard_work(&m, op, sz, PSIM_PASS_FWD, &f, &b);
  ck_assert_double_eq(f, op->flops[PSIM_PASS_FWD] / 2);
  ck_assert_double_eq(b, 4.0 * (2 * 3 * 16 * 32 + 8 * 3 * 9 + 2 * 8 * 8 * 16));
  psim_model_destroy(&m);
}
END_TEST

START_TEST(attention_flops) {
  psim_gen_tf_opts o;
  psim_gen_gpt_opts_init(&o);
  o.layers = 2, o.hidden = 256, o.heads = 4, o.seq = 128, o.vocab = 1000, o.batch = 8;
  for (int flash = 0; flash < 2; flash++) {
    o.flash = flash;
    cJSON *doc = NULL;
    ck_assert_int_eq(psim_gen_gpt(&o, &doc), PSIM_OK);
    psim_model m;
    ck_assert_int_eq(psim_model_from_json("gpt", doc, &m), PSIM_OK);
    double core = 0;
    for (int i = 0; i < m.n_ops; i++)
      if (m.ops[i].layer == 0 && m.ops[i].tag &&
          (m.ops[i].kind == PSIM_OP_MATMUL || m.ops[i].kind == PSIM_OP_ATTENTION))
        core += m.ops[i].flops[PSIM_PASS_FWD];
    /* 4 b s^2 h (QK^T and PV); flash with causal skips half */
    double want = 4.0 * 8 * 128 * 128 * 256 * (flash ? 0.5 : 1.0);
    ck_assert_double_eq_tol(core, want, 1e-6 * want);
    psim_model_destroy(&m);
    cJSON_Delete(doc);
  }
}
END_TEST

static const char *block_model =
    "{\"format\": \"plansim.model/1\", \"name\": \"blocky\","
    " \"dims\": {\"b\": {\"size\": 4, \"role\": \"batch\"}, \"h\": 8, \"h2\": 8},"
    " \"inputs\": {\"x0\": {\"dims\": [\"b\", \"h\"]}, \"mask\": {\"dims\": [\"h\"]}},"
    " \"tensors\": {\"out\": {\"dims\": [\"b\", \"h\"]}, \"loss\": {\"dims\": [\"b\"]}},"
    " \"weights\": {\"wl\": {\"dims\": [\"h\"]}},"
    " \"ops\": [{\"block\": \"layer\", \"repeat\": 3, \"inputs\": [\"x\"], \"outputs\": [\"y\"],"
    "   \"in\": [\"x0\"], \"out\": [\"out\"], \"weights\": {\"w\": {\"dims\": [\"h\", \"h2\"]}},"
    "   \"tensors\": {\"t\": {\"dims\": [\"b\", \"h2\"]}, \"u\": {\"dims\": [\"b\", \"h\"]},"
    "                 \"y\": {\"dims\": [\"b\", \"h\"]}},"
    "   \"ops\": [{\"name\": \"fc\", \"kind\": \"matmul\", \"in\": [\"x\", \"w\"], \"out\": "
    "[\"t\"]},"
    "             {\"name\": \"view\", \"kind\": \"reshape\", \"in\": [\"t\"], \"out\": [\"u\"]},"
    "             {\"name\": \"m\", \"kind\": \"elementwise\", \"fn\": \"mul\","
    "              \"in\": [\"u\", \"mask\"], \"out\": [\"y\"]}]},"
    "  {\"name\": \"head\", \"kind\": \"matmul\", \"in\": [\"out\", \"wl\"], \"out\": "
    "[\"loss\"]}]}";

START_TEST(block_expansion) {
  psim_model m;
  ck_assert_int_eq(load_text(block_model, &m), PSIM_OK);
  ck_assert_int_eq(m.n_ops, 10);
  ck_assert_int_eq(m.n_layers, 3);
  ck_assert_int_eq(m.n_blocks, 1);
  int32_t a = psim_model_find_op(&m, "layer.0.fc"), c = psim_model_find_op(&m, "layer.2.fc");
  ck_assert_int_ge(a, 0);
  ck_assert_int_ge(c, 0);
  ck_assert_int_eq(m.ops[c].proto, a);
  ck_assert_int_eq(m.ops[a].proto, a);
  ck_assert_int_eq(m.ops[c].layer, 2);
  ck_assert_int_eq(m.ops[c].repeat_index, 2);
  ck_assert_int_eq(m.ops[c].block, 0);
  ck_assert_int_ge(psim_model_find_tensor(&m, "layer.1.w"), 0);
  ck_assert_int_ge(psim_model_find_tensor(&m, "layer.1.y"), 0);
  ck_assert_int_lt(psim_model_find_tensor(&m, "layer.2.y"), 0); /* takes the outer name */
  /* repeat 1 reads repeat 0's output */
  int32_t fc1 = psim_model_find_op(&m, "layer.1.fc");
  ck_assert_str_eq(m.tensors[m.ops[fc1].in[0]].name, "layer.0.y");
  /* the block's final output and the shared input from the outer scope */
  int32_t mul2 = psim_model_find_op(&m, "layer.2.m");
  ck_assert_str_eq(m.tensors[m.ops[mul2].out[0]].name, "out");
  ck_assert_str_eq(m.tensors[m.ops[mul2].in[1]].name, "mask");
  int32_t head = psim_model_find_op(&m, "head");
  ck_assert_int_eq(m.ops[head].layer, 2);
  ck_assert_int_eq(m.ops[head].block, -1);
  ck_assert_double_eq(m.n_params, 3 * 64 + 8);
  psim_model_destroy(&m);
}
END_TEST

/* Writing back and loading again gives the same model. */
static void round_trip(const psim_model *m) {
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_model_to_json(m, &doc), PSIM_OK);
  psim_model r;
  ck_assert_msg(psim_model_from_json("rt", doc, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert_int_eq(r.n_ops, m->n_ops);
  ck_assert_int_eq(r.n_tensors, m->n_tensors);
  ck_assert_int_eq(r.n_layers, m->n_layers);
  ck_assert_double_eq(r.n_params, m->n_params);
  for (int32_t i = 0; i < m->n_ops; i++) {
    ck_assert_str_eq(r.ops[i].name, m->ops[i].name);
    ck_assert_int_eq(r.ops[i].layer, m->ops[i].layer);
    ck_assert_int_eq(r.ops[i].n_dims, m->ops[i].n_dims);
    for (int p = 0; p < PSIM_PASS_COUNT; p++) {
      ck_assert_double_eq(r.ops[i].flops[p], m->ops[i].flops[p]);
      ck_assert_double_eq(r.ops[i].bytes[p], m->ops[i].bytes[p]);
    }
  }
  psim_model_destroy(&r);
  cJSON_Delete(doc);
}

START_TEST(round_trips) {
  psim_model m;
  ck_assert_int_eq(load_text(block_model, &m), PSIM_OK);
  round_trip(&m);
  psim_model_destroy(&m);
  psim_gen_net_opts o;
  psim_gen_net_opts_init(&o, "inception");
  o.batch = 2;
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_gen_inception(&o, &doc), PSIM_OK);
  ck_assert_int_eq(psim_model_from_json("inc", doc, &m), PSIM_OK);
  round_trip(&m);
  psim_model_destroy(&m);
  cJSON_Delete(doc);
}
END_TEST

/* Each malformed file fails with bad input and names the path. */
static const struct {
  const char *file, *want;
} bad[] = {
    {"unknown-op-key", "ops[0]: unknown key 'bogus'"},
    {"unknown-top-key", "unknown key 'extra'"},
    {"duplicate-dim", "dims.h: duplicate dim"},
    {"dim-zero", "dims.f:"},
    {"dim-negative", "dims.f.size:"},
    {"dim-fraction", "dims.f: expected an integer"},
    {"dim-huge", "overflows 64 bits"},
    {"unknown-kind", "ops[1].kind: unknown op kind 'conv3d'"},
    {"produced-twice", "ops[2].out[0]: tensor 'y2' is produced twice"},
    {"never-produced", "tensors.y3: activation 'y3' is declared but never produced"},
    {"consumed-never-produced", "ops[1]: op 'fc2' reads 'y3', which no op produces"},
    {"cycle", "cycle"},
    {"matmul-dims", "ops[0].out[0]: dim 'g'"},
    {"unknown-tensor", "ops[0].in[1]: unknown tensor 'w9'"},
    {"weight-unused", "weights.w3: weight 'w3' is never used"},
    {"ops-wrong-type", "ops: expected an array"},
    {"bad-role", "dims.h.role: unknown role"},
    {"broadcast", "ops[2].in[1]: dim 'h'"},
    {"layer-decrease", "layers must not decrease"},
    {"element-overflow", "tensors.big.dims[1]: the element count overflows"},
    {"write-weight", "ops[1].out[0]: 'w2' is a weight"},
    {"bad-dtype", "dtype: unknown dtype 'fp12'"},
    {"repeated-dim", "tensors.y1.dims[1]: dim 'b' appears twice"},
    {"duplicate-op", "ops[1]: duplicate op name 'fc1'"},
    {"in-not-array", "ops[0].in: expected an array"},
    {"unknown-fn", "ops[0].fn: unknown function"},
    {"unknown-dim", "inputs.x.dims[1]: unknown dim 'q'"},
    {"softmax-axis", "ops[1].axis: 'h' is not a dim"},
    {"conv-size", "ops[0].out[0]: dim 'h2'"},
    {"repeat-zero", "ops[0].repeat:"},
    {"repeat-huge", "1000000"},
    {"block-io-mismatch", "ops[0]: \"outputs\" has 2 names but \"inputs\" has 1"},
    {"block-output-undeclared", "ops[0].outputs[0]:"},
    {"block-chain-dims", "ops[0].outputs[0]: 'y' must have the dims of 'x0'"},
    {"too-many-ops", "10000000"},
    {"block-unknown-key", "ops[0]: unknown key 'layer'"},
};

START_TEST(bad_files) {
  char path[512];
  snprintf(path, sizeof path, "%s/tests/data/bad/model-%s.json", PSIM_SOURCE_ROOT, bad[_i].file);
  psim_model m;
  psim_status s = psim_model_load(path, &m);
  ck_assert_msg(s == PSIM_EINPUT, "%s: status %d", bad[_i].file, s);
  ck_assert_msg(strstr(psim_error_message(), bad[_i].want) != NULL, "%s: message '%s' lacks '%s'",
                bad[_i].file, psim_error_message(), bad[_i].want);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), path));
  psim_model_destroy(&m);
}
END_TEST

START_TEST(every_bad_model_file_fails) {
  char pat[512];
  snprintf(pat, sizeof pat, "%s/tests/data/bad/model-*.json", PSIM_SOURCE_ROOT);
  glob_t g;
  ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
  ck_assert_uint_ge(g.gl_pathc, 15);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    psim_model m;
    ck_assert_msg(psim_model_load(g.gl_pathv[i], &m) == PSIM_EINPUT, "%s", g.gl_pathv[i]);
    psim_model_destroy(&m);
  }
  globfree(&g);
}
END_TEST

/* Narayanan et al. 2021, eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)), plus the
 * final layer norm's 2h, which the formula leaves out. */
START_TEST(gpt_parameter_counts) {
  static const int64_t cfg[][5] = {{24, 2048, 16, 51200, 2048},
                                   {96, 12288, 96, 51200, 2048},
                                   {2, 64, 4, 1000, 128},
                                   {105, 20480, 128, 51200, 2048},
                                   {40, 5120, 40, 50257, 1024}};
  for (int i = 0; i < 5; i++) {
    psim_gen_tf_opts o;
    psim_gen_gpt_opts_init(&o);
    o.layers = cfg[i][0], o.hidden = cfg[i][1], o.heads = cfg[i][2], o.vocab = cfg[i][3];
    o.seq = cfg[i][4], o.batch = 1, o.flash = i % 2;
    cJSON *doc = NULL;
    ck_assert_int_eq(psim_gen_gpt(&o, &doc), PSIM_OK);
    psim_model m;
    ck_assert_int_eq(psim_model_from_json("gpt", doc, &m), PSIM_OK);
    double l = (double)o.layers, h = (double)o.hidden, V = (double)o.vocab, s = (double)o.seq;
    double p = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
    ck_assert_double_eq_tol(m.n_params, p + 2 * h, 1e-6 * p);
    ck_assert_int_eq(m.n_layers, o.layers);
    psim_model_destroy(&m);
    cJSON_Delete(doc);
  }
}
END_TEST

static double params_of(psim_status (*gen)(const psim_gen_tf_opts *, cJSON **),
                        const psim_gen_tf_opts *o) {
  cJSON *doc = NULL;
  ck_assert_int_eq(gen(o, &doc), PSIM_OK);
  psim_model m;
  ck_assert_int_eq(psim_model_from_json("g", doc, &m), PSIM_OK);
  double p = m.n_params;
  psim_model_destroy(&m);
  cJSON_Delete(doc);
  return p;
}

START_TEST(llama_and_bert_parameter_counts) {
  psim_gen_tf_opts o;
  psim_gen_llama_opts_init(&o);
  o.batch = 1;
  ck_assert_double_eq_tol(params_of(psim_gen_llama, &o), 6.74e9, 0.005 * 6.74e9);
  o.layers = 80, o.hidden = 8192, o.heads = 64, o.kv_heads = 8, o.ffn = 28672;
  /* LLaMA-2 70B: 68.98e9 (Touvron et al. 2023, Hugging Face model card) */
  ck_assert_double_eq_tol(params_of(psim_gen_llama, &o), 68.98e9, 0.005 * 68.98e9);
  psim_gen_bert_opts_init(&o);
  o.batch = 1;
  /* BERT-large 335M without the pooler/NSP head and token-type embeddings */
  ck_assert_double_eq_tol(params_of(psim_gen_bert, &o), 335e6, 0.01 * 335e6);
}
END_TEST

static double net_params(psim_status (*gen)(const psim_gen_net_opts *, cJSON **), const char *fam) {
  psim_gen_net_opts o;
  psim_gen_net_opts_init(&o, fam);
  o.batch = 2;
  cJSON *doc = NULL;
  ck_assert_int_eq(gen(&o, &doc), PSIM_OK);
  psim_model m;
  ck_assert_msg(psim_model_from_json(fam, doc, &m) == PSIM_OK, "%s", psim_error_message());
  double p = m.n_params;
  psim_model_destroy(&m);
  cJSON_Delete(doc);
  return p;
}

/* torchvision counts minus BatchNorm's 2 parameters per channel (folded). */
START_TEST(vision_parameter_counts) {
  ck_assert_double_eq_tol(net_params(psim_gen_alexnet, "alexnet"), 61100840, 61100840 * 1e-3);
  ck_assert_double_eq(net_params(psim_gen_resnet, "resnet"), 25557032 - 53120);
  ck_assert_double_eq_tol(net_params(psim_gen_inception, "inception"), 23.83e6, 0.01 * 23.83e6);
  ck_assert_double_eq(net_params(psim_gen_mlp, "mlp"), 4 * (1024.0 * 1024 + 1024) + 10240);
  ck_assert_double_eq_tol(net_params(psim_gen_dlrm, "dlrm"), 26 * 1e6 * 128, 0.01 * 26e6 * 128);
}
END_TEST

START_TEST(generator_rejects_bad_options) {
  psim_gen_tf_opts o;
  psim_gen_gpt_opts_init(&o);
  o.heads = 3;
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_gen_gpt(&o, &doc), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "--heads"));
  psim_gen_net_opts n;
  psim_gen_net_opts_init(&n, "resnet");
  n.depth = 34;
  ck_assert_int_eq(psim_gen_resnet(&n, &doc), PSIM_EINPUT);
  /* each option in range, together a tensor of over 2^64 elements: the
   * generator refuses what the loader would refuse, instead of writing it */
  psim_gen_gpt_opts_init(&o);
  o.seq = 1099511627776LL;
  ck_assert_int_eq(psim_gen_gpt(&o, &doc), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "overflows 64 bits"));
  psim_error_clear();
}
END_TEST

/* The family registry (models/registry.c) that `plansim model` and sweeps read:
 * every family generates with its defaults; options apply only to the
 * families that take them (experts: moe, not gpt); ranges refuse 0. */
START_TEST(family_registry) {
  int n = 0;
  for (const psim_gen_family *f = psim_gen_families(); f->name; f++, n++) {
    ck_assert_ptr_eq(psim_gen_family_find(f->name), f);
    ck_assert_ptr_nonnull(strstr(psim_gen_family_list(), f->name));
    ck_assert_ptr_nonnull(psim_gen_option_find(f, "name"));
    ck_assert_ptr_nonnull(psim_gen_option_find(f, "batch"));
    psim_gen_opts o;
    psim_gen_opts_init(f, &o);
    cJSON *doc = NULL;
    if (strcmp(f->name, "dlrm") == 0) { /* 26 x 1e6 rows: fine, but keep the test quick */
      const psim_gen_option *rows = psim_gen_option_find(f, "rows");
      ck_assert_ptr_nonnull(rows);
      psim_gen_set_int(&o, f, rows, 1000);
    }
    ck_assert_int_eq(psim_gen_generate(f, &o, &doc), PSIM_OK);
    cJSON_Delete(doc);
  }
  ck_assert_int_eq(
      n, 17); /* + mpt, llama3 (issue 20); gpt3-mlperf and the decoder families (issues 20, 21) */
  ck_assert_ptr_null(psim_gen_family_find("gpt2"));
  const psim_gen_family *gpt = psim_gen_family_find("gpt"), *moe = psim_gen_family_find("moe");
  ck_assert_ptr_null(psim_gen_option_find(gpt, "experts"));
  ck_assert_ptr_null(psim_gen_option_find(gpt, "kv_heads"));
  ck_assert_ptr_null(psim_gen_option_find(gpt, "kv-heads")); /* keys use '_' */
  ck_assert_ptr_null(psim_gen_option_find(psim_gen_family_find("mlp"), "depth"));
  const psim_gen_option *experts = psim_gen_option_find(moe, "experts");
  const psim_gen_option *cf = psim_gen_option_find(moe, "capacity_factor");
  ck_assert_ptr_nonnull(experts);
  ck_assert(!psim_gen_in_range(experts, 0) && !psim_gen_in_range(experts, 2.5));
  ck_assert(psim_gen_in_range(experts, 16));
  ck_assert(!psim_gen_in_range(cf, 0) && !psim_gen_in_range(cf, INFINITY));
  ck_assert(psim_gen_in_range(cf, 1.25));
  psim_gen_opts o;
  psim_gen_opts_init(moe, &o);
  ck_assert_int_eq(o.tf.experts, 8);
  psim_gen_set_int(&o, moe, experts, 4);
  psim_gen_set_double(&o, moe, cf, 1.25);
  ck_assert_int_eq(o.tf.experts, 4);
  ck_assert(o.tf.capacity_factor == 1.25);
}
END_TEST

START_TEST(shipped_models_load) {
  char pat[512];
  snprintf(pat, sizeof pat, "%s/models/*.json", PSIM_SOURCE_ROOT);
  glob_t g;
  ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
  ck_assert_uint_ge(g.gl_pathc, 15);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    psim_model m;
    ck_assert_msg(psim_model_load(g.gl_pathv[i], &m) == PSIM_OK, "%s", psim_error_message());
    ck_assert_int_gt(m.n_ops, 0);
    psim_model_destroy(&m);
  }
  globfree(&g);
}
END_TEST

/* The first ```json example of docs/model.md (a block whose "out" is the outer 'h'), or NULL;
 * the caller frees it. */
static char *doc_example(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/docs/model.md", PSIM_SOURCE_ROOT);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s", path);
  static char doc[1 << 17];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = 0;
  char *a = strstr(doc, "```json\n"), *b = a ? strstr(a + 8, "\n```") : NULL;
  ck_assert(a && b);
  *b = 0;
  return strdup(a + 8);
}

/* #18 defect 9: docs/model.md says a block's outer "out" names "may be declared in the outer
 * tensors (same dims) or left undeclared". Both forms of the documented example load to the
 * same model: 'h' is produced by the last repeat's 'view' and read by the classifier. */
START_TEST(documented_block_out) {
  char *text = doc_example();
  const char *decl = "\"h\": {\"dims\": [\"batch\", \"hidden\"]},";
  char *at = strstr(text, decl);
  ck_assert_msg(at != NULL, "docs/model.md's example no longer declares 'h'");
  double params[2];
  for (int undeclared = 0; undeclared < 2; undeclared++) {
    if (undeclared) /* drop the outer declaration of 'h' */
      memmove(at, at + strlen(decl), strlen(at + strlen(decl)) + 1);
    psim_model m;
    ck_assert_msg(load_text(text, &m) == PSIM_OK, "%s", psim_error_message());
    int32_t h = psim_model_find_tensor(&m, "h"), cls = psim_model_find_op(&m, "classifier");
    int32_t view = psim_model_find_op(&m, "layer.3.view");
    ck_assert(h >= 0 && cls >= 0 && view >= 0);
    ck_assert_int_eq(m.tensors[h].producer, view);
    ck_assert_int_eq(m.ops[view].out[0], h);
    ck_assert_int_eq(m.ops[cls].in[0], h);
    ck_assert_int_lt(psim_model_find_tensor(&m, "layer.3.y"), 0); /* the outer name replaces it */
    ck_assert_int_eq(m.n_ops, 4 * 3 + 2);
    params[undeclared] = m.n_params;
    psim_model_destroy(&m);
  }
  /* 4 x (1024 x 1024 + 1024) + 1024 x 10 */
  ck_assert(params[0] == 4.0 * (1024 * 1024 + 1024) + 1024 * 10 && params[1] == params[0]);
  free(text);
}
END_TEST

/* Every allocation failure is reported as PSIM_ENOMEM, never a crash. */
START_TEST(allocation_failures) {
  cJSON *root = NULL;
  ck_assert_int_eq(psim_json_parse("t.json", block_model, strlen(block_model), &root), PSIM_OK);
  for (long n = 1; n < 400; n++) {
    psim_model m;
    psim_alloc_fail_at(n);
    psim_status s = psim_model_from_json("t.json", root, &m);
    psim_alloc_fail_at(0);
    ck_assert(s == PSIM_OK || s == PSIM_ENOMEM);
    psim_model_destroy(&m);
    if (s == PSIM_OK)
      break;
  }
  cJSON_Delete(root);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, matmul_flops_2mnk);
  tcase_add_test(tc, matmul_backward_and_order);
  tcase_add_test(tc, shard_work_scales_by_tensor);
  tcase_add_test(tc, conv_flops_closed_form);
  tcase_add_test(tc, attention_flops);
  tcase_add_test(tc, block_expansion);
  tcase_add_test(tc, round_trips);
  tcase_add_loop_test(tc, bad_files, 0, (int)(sizeof bad / sizeof bad[0]));
  tcase_add_test(tc, every_bad_model_file_fails);
  tcase_add_test(tc, gpt_parameter_counts);
  tcase_add_test(tc, llama_and_bert_parameter_counts);
  tcase_add_test(tc, vision_parameter_counts);
  tcase_add_test(tc, generator_rejects_bad_options);
  tcase_add_test(tc, family_registry);
  tcase_add_test(tc, shipped_models_load);
  tcase_add_test(tc, documented_block_out);
  tcase_add_test(tc, allocation_failures);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  psim_json_init_hooks();
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
