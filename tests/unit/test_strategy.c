/* test_strategy.c - strategy templates (Megatron-LM, data parallel, ZeRO), the
 * explicit mesh/layout form, per-op overrides, every validation rule, the
 * to_json round trip and the structure check of shipped and bad files.
 *
 * The model and cluster are built in memory (a small GPT with the op dims
 * docs/model.md gives its ops), so the expected degrees and devices below
 * follow from Megatron-LM's rules, not from this code's output. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/strategy/constraints.h"
#include "sim/strategy/strategy.h"

/* ---- a tiny GPT: embedding (layer 0), L blocks (layers 1..L), head (L+1) ---- */

enum { B, S, H, N, D, F, V, N_DIMS };

static void add_dim(psim_model *m, const char *name, int64_t size, psim_role r) {
  psim_dim *d = &m->dims[m->n_dims++];
  d->name = psim_strdup(name);
  d->size = size;
  d->role = r;
  if (m->role_dim[r] < 0)
    m->role_dim[r] = m->n_dims - 1;
}

/* dims: list of dim ids ending with -1; contracted: bitmask over dim ids. */
static void add_op(psim_model *m, const char *name, psim_op_kind k, int layer, int block,
                   const int *dims, int contracted) {
  psim_op *o = &m->ops[m->n_ops];
  o->name = psim_strdup(name);
  o->kind = k;
  o->layer = layer;
  o->block = block;
  o->proto = m->n_ops;
  for (int i = 0; dims[i] >= 0; i++) {
    o->dims[o->n_dims].dim = dims[i];
    o->dims[o->n_dims].use = (contracted >> dims[i]) & 1 ? PSIM_USE_CONTRACTED : PSIM_USE_OUTPUT;
    o->n_dims++;
  }
  m->n_ops++;
  if (layer + 1 > m->n_layers)
    m->n_layers = layer + 1;
}

static const int D_BSH[] = {B, S, H, -1}, D_QKV[] = {B, S, H, N, D, -1}, D_ATT[] = {B, N, S, D, -1},
                 D_PROJ[] = {B, S, N, D, H, -1}, D_FC1[] = {B, S, H, F, -1},
                 D_BSF[] = {B, S, F, -1}, D_FC2[] = {B, S, F, H, -1}, D_EMB[] = {B, S, V, H, -1},
                 D_LOG[] = {B, S, H, V, -1}, D_BSV[] = {B, S, V, -1};

static void gpt_layer(psim_model *m, int i) {
  char n[64];
  int l = i + 1;
#define OP(suffix, kind, dims, c)                                                                  \
  snprintf(n, sizeof n, "layer.%d." suffix, i);                                                    \
  add_op(m, n, kind, l, 0, dims, c)
  OP("ln1", PSIM_OP_LAYERNORM, D_BSH, 0);
  OP("qkv", PSIM_OP_MATMUL, D_QKV, 1 << H);
  OP("attn", PSIM_OP_ATTENTION, D_ATT, 0);
  OP("proj", PSIM_OP_MATMUL, D_PROJ, (1 << N) | (1 << D));
  OP("drop1", PSIM_OP_DROPOUT, D_BSH, 0);
  OP("add1", PSIM_OP_ELEMENTWISE, D_BSH, 0);
  OP("ln2", PSIM_OP_LAYERNORM, D_BSH, 0);
  OP("fc1", PSIM_OP_MATMUL, D_FC1, 1 << H);
  OP("gelu", PSIM_OP_ELEMENTWISE, D_BSF, 0);
  OP("fc2", PSIM_OP_MATMUL, D_FC2, 1 << F);
  OP("add2", PSIM_OP_ELEMENTWISE, D_BSH, 0);
#undef OP
}

static void make_gpt(psim_model *m, int layers, int64_t batch) {
  memset(m, 0, sizeof *m);
  for (int r = 0; r < PSIM_ROLE_COUNT; r++)
    m->role_dim[r] = -1;
  m->name = psim_strdup("tiny-gpt");
  m->dims = psim_calloc(N_DIMS, sizeof *m->dims);
  m->ops = psim_calloc((size_t)(layers * 11 + 4), sizeof *m->ops);
  add_dim(m, "b", batch, PSIM_ROLE_BATCH);
  add_dim(m, "s", 16, PSIM_ROLE_SEQUENCE);
  add_dim(m, "h", 32, PSIM_ROLE_HIDDEN);
  add_dim(m, "n", 4, PSIM_ROLE_HEADS);
  add_dim(m, "d", 8, PSIM_ROLE_HEAD_DIM);
  add_dim(m, "f", 128, PSIM_ROLE_FFN);
  add_dim(m, "v", 100, PSIM_ROLE_VOCAB);
  add_op(m, "embed", PSIM_OP_EMBEDDING, 0, -1, D_EMB, 1 << V);
  for (int i = 0; i < layers; i++)
    gpt_layer(m, i);
  add_op(m, "ln_f", PSIM_OP_LAYERNORM, layers + 1, -1, D_BSH, 0);
  add_op(m, "logits", PSIM_OP_MATMUL, layers + 1, -1, D_LOG, 1 << H);
  add_op(m, "loss", PSIM_OP_CROSS_ENTROPY, layers + 1, -1, D_BSV, 0);
}

static void free_gpt(psim_model *m) {
  for (int i = 0; i < m->n_dims; i++)
    psim_free(m->dims[i].name);
  for (int i = 0; i < m->n_ops; i++)
    psim_free(m->ops[i].name);
  psim_free(m->dims);
  psim_free(m->ops);
  psim_free(m->name);
}

static void make_cluster(psim_cluster *c, int n) {
  memset(c, 0, sizeof *c);
  c->n_devices = n;
  c->devices = psim_calloc((size_t)n, sizeof *c->devices);
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "gpu%d", i);
    c->devices[i].name = psim_strdup(name);
  }
}

static void free_cluster(psim_cluster *c) {
  for (int i = 0; i < c->n_devices; i++)
    psim_free(c->devices[i].name);
  psim_free(c->devices);
}

static psim_model M;
static psim_cluster C;

static void setup4(void) {
  make_gpt(&M, 4, 8);
  make_cluster(&C, 16);
}
static void teardown(void) {
  free_gpt(&M);
  free_cluster(&C);
}

static int op_of(const char *name) {
  for (int i = 0; i < M.n_ops; i++)
    if (strcmp(M.ops[i].name, name) == 0)
      return i;
  ck_abort_msg("no op %s", name);
  return -1;
}

/* Degree of model dim `dim` in op `name`. */
static int deg(const psim_strategy *s, const char *name, int dim) {
  int i = op_of(name);
  for (int j = 0; j < M.ops[i].n_dims; j++)
    if (M.ops[i].dims[j].dim == dim)
      return s->ops[i].degree[j];
  return -1;
}

static const psim_op_config *cfg(const psim_strategy *s, const char *name) {
  return &s->ops[op_of(name)];
}

static psim_status load_text(const char *text, psim_strategy *s) {
  cJSON *root = NULL;
  psim_status st = psim_json_parse("t.json", text, strlen(text), &root);
  if (st != PSIM_OK)
    return st;
  st = psim_strategy_from_json("t.json", root, &M, &C, s);
  cJSON_Delete(root);
  return st;
}

static void expect_error(const char *text, const char *needle) {
  psim_strategy s;
  ck_assert_int_eq(load_text(text, &s), PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), needle) != NULL, "message '%s' lacks '%s'",
                psim_error_message(), needle);
  ck_assert_msg(strstr(psim_error_message(), "t.json") != NULL, "no file in '%s'",
                psim_error_message());
  psim_strategy_destroy(&s);
}

/* ---- helpers ---- */

START_TEST(shard_sizes) {
  /* 10 split 4 ways: 3, 3, 2, 2 (ceil for j < n % d). */
  ck_assert_int_eq(psim_shard_size(10, 4, 0), 3);
  ck_assert_int_eq(psim_shard_size(10, 4, 1), 3);
  ck_assert_int_eq(psim_shard_size(10, 4, 2), 2);
  ck_assert_int_eq(psim_shard_size(10, 4, 3), 2);
  ck_assert_int_eq(psim_shard_max(10, 4), 3);
  ck_assert_int_eq(psim_shard_max(12, 4), 3);
  ck_assert_int_eq(psim_shard_size(7, 1, 0), 7);
  int64_t sum = 0;
  for (int j = 0; j < 7; j++)
    sum += psim_shard_size(100, 7, j);
  ck_assert_int_eq(sum, 100);
}
END_TEST

START_TEST(names_round_trip) {
  for (int i = 0; i <= PSIM_SCHED_INTERLEAVED; i++) {
    psim_schedule x;
    ck_assert_int_eq(psim_schedule_parse(psim_schedule_name(i), &x), PSIM_OK);
    ck_assert_int_eq(x, i);
  }
  for (int i = 0; i <= PSIM_AR_HIERARCHICAL; i++) {
    psim_allreduce_algo x;
    ck_assert_int_eq(psim_allreduce_algo_parse(psim_allreduce_algo_name(i), &x), PSIM_OK);
    ck_assert_int_eq(x, i);
  }
  psim_recompute r;
  ck_assert_int_eq(psim_recompute_parse("selective", &r), PSIM_OK);
  ck_assert_int_eq(r, PSIM_RECOMPUTE_SELECTIVE);
  ck_assert_int_eq(psim_recompute_parse("some", &r), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "none, selective, full"));
}
END_TEST

/* ---- Megatron ---- */

static void megatron(int tp, int pp, int dp, int mb, int v, bool sp, psim_strategy *s) {
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = tp;
  o.pp = pp;
  o.dp = dp;
  o.micro_batch = mb;
  o.virtual_stages = v;
  o.sequence_parallel = sp;
  ck_assert_msg(psim_strategy_megatron(&M, &C, &o, s) == PSIM_OK, "%s", psim_error_message());
}

START_TEST(megatron_column_and_row_parallel) {
  psim_strategy s;
  megatron(2, 2, 2, 1, 1, false, &s);
  /* Column-parallel: QKV splits heads, fc1 splits ffn; batch over dp. */
  ck_assert_int_eq(deg(&s, "layer.0.qkv", N), 2);
  ck_assert_int_eq(deg(&s, "layer.0.qkv", B), 2);
  ck_assert_int_eq(deg(&s, "layer.0.qkv", H), 1);
  ck_assert_int_eq(deg(&s, "layer.0.fc1", F), 2);
  ck_assert_int_eq(deg(&s, "layer.0.attn", N), 2);
  /* Row-parallel: the contracted heads (out-proj) and ffn (fc2) dims split. */
  ck_assert_int_eq(deg(&s, "layer.0.proj", N), 2);
  ck_assert_int_eq(deg(&s, "layer.0.proj", H), 1);
  ck_assert_int_eq(deg(&s, "layer.0.fc2", F), 2);
  ck_assert_int_eq(deg(&s, "layer.0.fc2", H), 1);
  /* Vocab-parallel embedding, logits and cross entropy. */
  ck_assert_int_eq(deg(&s, "embed", V), 2);
  ck_assert_int_eq(deg(&s, "logits", V), 2);
  ck_assert_int_eq(deg(&s, "loss", V), 2);
  /* LayerNorm and dropout replicated over the tp group. */
  ck_assert_int_eq(cfg(&s, "layer.0.ln1")->replicas, 2);
  ck_assert_int_eq(deg(&s, "layer.0.ln1", S), 1);
  ck_assert_int_eq(cfg(&s, "layer.1.drop1")->replicas, 2);
  ck_assert_int_eq(cfg(&s, "layer.0.qkv")->replicas, 1);
  ck_assert_int_eq(cfg(&s, "layer.0.qkv")->n_devices, 4);
  ck_assert_int_eq(s.n_micro, 4);     /* 8 / (1 * 2) */
  ck_assert_int_eq(s.micro_batch, 2); /* samples per micro-batch over all dp ranks */
  ck_assert_int_eq(s.schedule, PSIM_SCHED_1F1B);
  ck_assert_str_eq(s.tmpl.name, "megatron");
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(megatron_device_order) {
  /* device(pp_i, dp_j, tp_k) = pp_i*dp*tp + dp_j*tp + tp_k (tp fastest). */
  psim_strategy s;
  megatron(2, 2, 2, 1, 1, false, &s);
  const psim_op_config *q = cfg(&s, "layer.0.qkv");
  /* shards row-major over (b, s, h, n, d): shard (b=1, n=1) is number 3. */
  ck_assert_int_eq(q->devices[3], 0 * 4 + 1 * 2 + 1);
  ck_assert_int_eq(q->devices[1], 0 * 4 + 0 * 2 + 1);
  const psim_op_config *f = cfg(&s, "layer.3.fc1"); /* layer 4: stage 1 */
  ck_assert_int_eq(f->stage, 1);
  ck_assert_int_eq(f->devices[2], 1 * 4 + 1 * 2 + 0); /* (b=1, f=0) */
  const psim_op_config *ln = cfg(&s, "layer.0.ln1");
  /* shard b=1, replica (tp rank) 1 */
  ck_assert_int_eq(ln->devices[1 * 2 + 1], 0 * 4 + 1 * 2 + 1);
  ck_assert_int_eq(ln->devices[1 * 2 + 0], 2);
  /* Stages: 4 blocks in 2 chunks, the embedding first, the head last. */
  ck_assert_int_eq(s.n_stages, 2);
  ck_assert_int_eq(s.stages[0].first_layer, 0);
  ck_assert_int_eq(s.stages[0].last_layer, 2);
  ck_assert_int_eq(s.stages[1].first_layer, 3);
  ck_assert_int_eq(s.stages[1].last_layer, 5);
  ck_assert_int_eq(s.stages[1].n_devices, 4);
  ck_assert_int_eq(s.stages[1].devices[0], 4);
  ck_assert_int_eq(cfg(&s, "embed")->stage, 0);
  ck_assert_int_eq(cfg(&s, "loss")->stage, 1);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(megatron_interleaved_stages) {
  psim_strategy s;
  megatron(1, 2, 1, 1, 2, false, &s);
  ck_assert_int_eq(s.schedule, PSIM_SCHED_INTERLEAVED);
  ck_assert_int_eq(s.n_stages, 2);
  ck_assert_int_eq(s.virtual_stages, 2);
  int first[] = {0, 2, 3, 4}, last[] = {1, 2, 3, 5};
  for (int c = 0; c < 4; c++) {
    ck_assert_int_eq(s.stages[c].first_layer, first[c]);
    ck_assert_int_eq(s.stages[c].last_layer, last[c]);
    ck_assert_int_eq(s.stages[c].devices[0], c % 2); /* chunk c on stage c % pp */
  }
  ck_assert_int_eq(cfg(&s, "layer.1.fc1")->stage, 1);
  ck_assert_int_eq(cfg(&s, "layer.2.fc1")->stage, 2);
  ck_assert_int_eq(cfg(&s, "layer.2.fc1")->devices[0], 0);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(megatron_uneven_layers) {
  free_gpt(&M);
  make_gpt(&M, 5, 8);
  psim_strategy s;
  megatron(1, 2, 1, 1, 1, false, &s);
  /* 5 blocks in 2 chunks: the first gets 3. */
  ck_assert_int_eq(s.stages[0].last_layer, 3);
  ck_assert_int_eq(s.stages[1].first_layer, 4);
  ck_assert_int_eq(s.stages[1].last_layer, 6);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(megatron_sequence_parallel) {
  psim_strategy s;
  megatron(2, 1, 2, 1, 1, true, &s);
  ck_assert_int_eq(cfg(&s, "layer.0.ln1")->replicas, 1);
  ck_assert_int_eq(deg(&s, "layer.0.ln1", S), 2);
  ck_assert_int_eq(deg(&s, "layer.0.add2", S), 2);
  ck_assert_int_eq(deg(&s, "layer.0.qkv", S), 1); /* tensor-parallel region unchanged */
  ck_assert_int_eq(deg(&s, "layer.0.qkv", N), 2);
  ck_assert(s.sequence_parallel);
  psim_strategy_destroy(&s);
}
END_TEST

static void megatron_fails(int tp, int pp, int dp, int mb, int v, const char *needle) {
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = tp;
  o.pp = pp;
  o.dp = dp;
  o.micro_batch = mb;
  o.virtual_stages = v;
  psim_strategy s;
  ck_assert_int_eq(psim_strategy_megatron(&M, &C, &o, &s), PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), needle) != NULL, "'%s' lacks '%s'",
                psim_error_message(), needle);
}

START_TEST(megatron_validation) {
  megatron_fails(3, 1, 1, 1, 1, "tp: 3 does not divide the 4 heads");
  megatron_fails(4, 4, 2, 1, 1, "cluster has 16");
  megatron_fails(1, 5, 1, 1, 1, "4 layers");       /* pp > layers */
  megatron_fails(1, 1, 2, 3, 1, "micro_batch");    /* 8 % (3*2) */
  megatron_fails(1, 2, 1, 8, 2, "multiple of pp"); /* 1 micro-batch, pp 2 */
  free_gpt(&M);
  make_gpt(&M, 6, 8);
  megatron_fails(1, 2, 1, 1, 2, "do not divide"); /* 6 blocks in 4 chunks */
}
END_TEST

/* ---- data parallel / zero ---- */

START_TEST(data_parallel_template) {
  psim_strategy s;
  ck_assert_int_eq(psim_strategy_data_parallel(&M, &C, 4, 2, &s), PSIM_OK);
  ck_assert_int_eq(s.n_micro, 2);
  ck_assert_int_eq(s.micro_batch, 4);
  ck_assert_int_eq(s.n_stages, 1);
  for (int i = 0; i < M.n_ops; i++) {
    ck_assert_int_eq(s.ops[i].n_devices, 4);
    ck_assert_int_eq(s.ops[i].replicas, 1);
    ck_assert_int_eq(s.ops[i].degree[0], 4); /* b is every op's first dim */
    for (int d = 0; d < 4; d++)
      ck_assert_int_eq(s.ops[i].devices[d], d);
  }
  psim_strategy_destroy(&s);
  ck_assert_int_eq(psim_strategy_data_parallel(&M, &C, 8, 2, &s), PSIM_EINPUT); /* 4 samples */
  ck_assert_int_eq(psim_strategy_zero(&M, &C, 4, 3, &s), PSIM_OK);
  ck_assert_int_eq(s.zero_stage, 3);
  ck_assert_str_eq(s.tmpl.name, "zero");
  psim_strategy_destroy(&s);
  ck_assert_int_eq(
      load_text("{\"format\":\"plansim.strategy/1\",\"template\":\"data_parallel\"}", &s),
      PSIM_EINPUT); /* 16 devices, batch 8 */
  ck_assert_int_eq(load_text("{\"format\":\"plansim.strategy/1\",\"template\":\"zero\","
                             "\"stage\":2,\"dp\":8}",
                             &s),
                   PSIM_OK);
  ck_assert_int_eq(s.zero_stage, 2);
  ck_assert_int_eq(s.ops[0].n_devices, 8);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(template_json) {
  psim_strategy s;
  ck_assert_int_eq(load_text("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                             "\"tp\":2,\"pp\":2,\"dp\":2,\"recompute\":\"full\",\"zero\":1,"
                             "\"allreduce\":\"ring\",\"bucket_size\":\"40 MiB\"}",
                             &s),
                   PSIM_OK);
  ck_assert_int_eq(s.recompute, PSIM_RECOMPUTE_FULL);
  ck_assert_int_eq(s.zero_stage, 1);
  ck_assert_int_eq(s.allreduce, PSIM_AR_RING);
  ck_assert(s.bucket_bytes == 40.0 * 1048576.0);
  ck_assert_int_eq(s.tmpl.tp, 2);
  psim_strategy_destroy(&s);
  /* dp defaults to the devices left: 16 / (2 * 1). */
  ck_assert_int_eq(load_text("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                             "\"tp\":2,\"micro_batch\":1}",
                             &s),
                   PSIM_OK);
  ck_assert_int_eq(s.tmpl.dp, 8);
  ck_assert_int_eq(s.n_micro, 1);
  ck_assert(s.zero_prefetch == PSIM_ZERO_PREFETCH_DEFAULT); /* DeepSpeed's 5e7 */
  psim_strategy_destroy(&s);
  /* ZeRO-3's prefetch, a parameter count */
  ck_assert_int_eq(load_text("{\"format\":\"plansim.strategy/1\",\"template\":\"zero\","
                             "\"stage\":3,\"dp\":2,\"zero_prefetch\":\"20M\"}",
                             &s),
                   PSIM_OK);
  ck_assert(s.zero_prefetch == 2e7);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(template_json_errors) {
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":3}",
               "tp: 3 does not divide");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,"
               "\"zero\":4}",
               "zero");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
               "\"schedule\":\"zigzag\"}",
               "schedule");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
               "\"recompute\":\"most\"}",
               "recompute");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"pp\":2,"
               "\"virtual_stages\":2,\"schedule\":\"1f1b\"}",
               "interleaved");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tpp\":2}",
               "unknown key 'tpp'");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"alpa\"}", "unknown template");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"zero\",\"stage\":3,"
               "\"zero_prefetch\":-1}",
               "prefetch");
  expect_error("{\"format\":\"plansim.strategy/2\",\"template\":\"megatron\"}", "format");
  expect_error("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"dp\":2,"
               "\"tp\":4,\"pp\":4}",
               "cluster has 16");
}
END_TEST

/* ---- explicit form ---- */

#define HDR "{\"format\":\"plansim.strategy/1\","

START_TEST(explicit_mesh_layout) {
  psim_strategy s;
  ck_assert_msg(load_text(HDR "\"mesh\":{\"axes\":{\"x\":2,\"y\":2},\"devices\":[8,9,10,11]},"
                              "\"layout\":{\"batch\":\"x\",\"f\":\"y\"}}",
                          &s) == PSIM_OK,
                "%s", psim_error_message());
  ck_assert_int_eq(deg(&s, "layer.0.fc1", B), 2);
  ck_assert_int_eq(deg(&s, "layer.0.fc1", F), 2);
  ck_assert_int_eq(cfg(&s, "layer.0.fc1")->replicas, 1);
  ck_assert_int_eq(cfg(&s, "layer.0.fc1")->devices[3], 11);
  ck_assert_int_eq(cfg(&s, "layer.0.qkv")->replicas, 2); /* no dim on y */
  /* shard b=1 replicas along y: mesh (1,0), (1,1) -> devices 10, 11 */
  ck_assert_int_eq(cfg(&s, "layer.0.qkv")->devices[2], 10);
  ck_assert_int_eq(cfg(&s, "layer.0.qkv")->devices[3], 11);
  ck_assert_int_eq(s.n_stages, 1);
  ck_assert_int_eq(s.stages[0].last_layer, M.n_layers - 1);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(explicit_override_and_glob) {
  psim_strategy s;
  ck_assert_msg(load_text(HDR "\"mesh\":{\"axes\":{\"x\":4}},\"layout\":{\"b\":\"x\"},"
                              "\"ops\":{\"layer.0.fc1\":{\"split\":{\"f\":4},"
                              "\"devices\":[3,2,1,0]},"
                              "\"layer.*.fc2\":{\"split\":{\"h\":2}},"
                              "\"loss\":{\"split\":{\"v\":2},\"replicas\":1}}}",
                          &s) == PSIM_OK,
                "%s", psim_error_message());
  const psim_op_config *f = cfg(&s, "layer.0.fc1");
  ck_assert_int_eq(deg(&s, "layer.0.fc1", F), 4);
  ck_assert_int_eq(deg(&s, "layer.0.fc1", B), 1);
  ck_assert_int_eq(f->devices[0], 3);
  ck_assert_int_eq(f->devices[3], 0);
  for (int l = 0; l < 4; l++) {
    char n[32];
    snprintf(n, sizeof n, "layer.%d.fc2", l);
    ck_assert_int_eq(deg(&s, n, H), 2);
    ck_assert_int_eq(deg(&s, n, B), 1);
    ck_assert_int_eq(cfg(&s, n)->replicas, 2);
  }
  ck_assert_int_eq(cfg(&s, "loss")->n_devices, 2); /* first 2 devices of the stage */
  ck_assert_int_eq(deg(&s, "layer.1.fc1", B), 4);  /* untouched op keeps the layout */
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(explicit_pipeline_and_ps) {
  psim_strategy s;
  ck_assert_msg(load_text(HDR "\"mesh\":{\"axes\":{\"dp\":2}},\"layout\":{\"batch\":\"dp\"},"
                              "\"pipeline\":{\"micro_batches\":4,\"schedule\":\"gpipe\","
                              "\"stages\":[{\"layers\":[0,2],\"devices\":[\"gpu0\",\"gpu1\"]},"
                              "{\"layers\":[3,5],\"devices\":{\"first\":4,\"count\":2}}]},"
                              "\"gradient_sync\":{\"parameter_server\":{\"servers\":[6,7],"
                              "\"mode\":\"backup\",\"backup_k\":1}}}",
                          &s) == PSIM_OK,
                "%s", psim_error_message());
  ck_assert_int_eq(s.n_stages, 2);
  ck_assert_int_eq(s.schedule, PSIM_SCHED_GPIPE);
  ck_assert_int_eq(s.n_micro, 4);
  ck_assert_int_eq(s.micro_batch, 2);
  ck_assert_int_eq(cfg(&s, "loss")->devices[1], 5);
  ck_assert_int_eq(s.sync, PSIM_SYNC_PS);
  ck_assert_int_eq(s.ps.mode, PSIM_PS_BACKUP);
  ck_assert_int_eq(s.ps.n_servers, 2);
  ck_assert_int_eq(s.ps.servers[1], 7);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(explicit_validation) {
  const char *st2 = "\"pipeline\":{\"stages\":[{\"layers\":[0,3],\"devices\":[0]},"
                    "{\"layers\":[3,5],\"devices\":[1]}]}}";
  char buf[512];
  snprintf(buf, sizeof buf, HDR "%s", st2);
  expect_error(buf, "layer 3 is assigned to two stages");
  expect_error(HDR "\"pipeline\":{\"stages\":[{\"layers\":[0,2],\"devices\":[0]},"
                   "{\"layers\":[4,5],\"devices\":[1]}]}}",
               "layer 3 is in no stage");
  expect_error(HDR "\"pipeline\":{\"stages\":[{\"layers\":[0,2],\"devices\":[0,1]},"
                   "{\"layers\":[3,5],\"devices\":[1,2]}]}}",
               "overlap");
  expect_error(HDR "\"mesh\":{\"devices\":[0,16]}}", "mesh.devices[1]: device 16 out of range");
  expect_error(HDR "\"mesh\":{\"devices\":[\"gpu0\",\"tpu1\"]}}", "unknown device 'tpu1'");
  expect_error(HDR "\"mesh\":{\"devices\":[1,1]}}", "listed twice");
  expect_error(HDR "\"mesh\":{\"devices\":[0]},\"ops\":{\"embed\":{\"split\":{\"h\":0}}}}",
               "ops.embed.split.h");
  expect_error(HDR "\"mesh\":{\"devices\":[0,1]},\"ops\":{\"embed\":{\"split\":{\"h\":64}}}}",
               "larger than the dim");
  expect_error(HDR "\"mesh\":{\"devices\":[0,1,2]},\"ops\":{\"embed\":{\"split\":{\"h\":2},"
                   "\"devices\":[0,1,2]}}}",
               "do not fit 2 shards");
  expect_error(HDR "\"mesh\":{\"devices\":[0,1]},\"ops\":{\"layer.0.gelu\":{\"split\":"
                   "{\"v\":2}}}}",
               "op 'layer.0.gelu' has no dim 'v' (its dims: b, s, f)");
  expect_error(HDR "\"ops\":{\"fc9\":{\"replicas\":1}}}", "ops.fc9: unknown op");
  expect_error(HDR "\"ops\":{\"zz.*\":{\"replicas\":1}}}", "matches no op");
  expect_error(HDR "\"mesh\":{\"axes\":{\"x\":2}},\"layout\":{\"batch\":\"y\"}}",
               "layout.batch: 'y' is not an axis");
  expect_error(HDR "\"mesh\":{\"axes\":{\"x\":2}},\"layout\":{\"nosuch\":\"x\"}}",
               "no dim named 'nosuch'");
  expect_error(HDR "\"mesh\":{\"axes\":{\"x\":32}}}", "the mesh has 32 devices");
  expect_error(HDR "\"pipeline\":{\"micro_batches\":3}}", "does not divide the global batch");
  expect_error(HDR "\"zero\":5}", "zero");
  expect_error(HDR "\"mesh\":{\"axes\":{\"x\":2},\"devices\":[0,1,2]}}", "mesh has 2");
  expect_error(HDR "\"pipeline\":{\"stages\":[{\"layers\":[0,9],\"devices\":[0]}]}}",
               "layer 9 out of range");
}
END_TEST

/* ---- round trip ---- */

static void round_trip(const psim_strategy *s) {
  cJSON *j = NULL;
  ck_assert_int_eq(psim_strategy_to_json(s, &M, &C, &j), PSIM_OK);
  char *text = cJSON_Print(j);
  psim_strategy t;
  psim_status st = load_text(text, &t);
  ck_assert_msg(st == PSIM_OK, "%s\n%s", psim_error_message(), text);
  ck_assert_msg(psim_strategy_equal(s, &t), "round trip differs:\n%s", text);
  cJSON_free(text);
  cJSON_Delete(j);
  psim_strategy_destroy(&t);
}

/* recompute_method / recompute_num_layers: read, defaulted (uniform 1: full as before), refused
 * without full recomputation and for block without a count, written only when not the default,
 * and round-tripped through the explicit form. */
START_TEST(recompute_method_keys) {
  psim_strategy s, d;
  const char *head = "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,"
                     "\"pp\":2,\"dp\":2,";
  char text[512];
  snprintf(text, sizeof text,
           "%s\"recompute\":\"full\",\"recompute_method\":\"block\","
           "\"recompute_num_layers\":0}",
           head);
  ck_assert_int_eq(load_text(text, &s), PSIM_OK);
  ck_assert_int_eq(s.recompute_method, PSIM_RCM_BLOCK);
  ck_assert_int_eq(s.recompute_layers, 0);
  ck_assert(psim_strategy_partial_recompute(&s));
  round_trip(&s);
  snprintf(text, sizeof text, "%s\"recompute\":\"full\"}", head);
  ck_assert_int_eq(load_text(text, &d), PSIM_OK);
  ck_assert_int_eq(d.recompute_method, PSIM_RCM_UNIFORM);
  ck_assert_int_eq(d.recompute_layers, 1);
  ck_assert(!psim_strategy_partial_recompute(&d));
  ck_assert(!psim_strategy_equal(&s, &d));
  cJSON *j = NULL;
  ck_assert_int_eq(psim_strategy_to_json(&d, &M, &C, &j), PSIM_OK);
  ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "recompute_method"));
  cJSON_Delete(j);
  psim_strategy_destroy(&d);
  s.recompute_method = PSIM_RCM_UNIFORM;
  s.recompute_layers = 3;
  round_trip(&s);
  psim_strategy_destroy(&s);
  snprintf(text, sizeof text, "%s\"recompute\":\"selective\",\"recompute_num_layers\":2}", head);
  expect_error(text, "needs \"recompute\": \"full\"");
  snprintf(text, sizeof text, "%s\"recompute\":\"full\",\"recompute_method\":\"block\"}", head);
  expect_error(text, "block needs recompute_num_layers");
  snprintf(text, sizeof text, "%s\"recompute\":\"full\",\"recompute_method\":\"every\"}", head);
  expect_error(text, "unknown recompute method");
  snprintf(text, sizeof text, "%s\"recompute\":\"full\",\"recompute_num_layers\":0}", head);
  expect_error(text, "uniform groups at least 1 layer");
}
END_TEST

START_TEST(to_json_round_trip) {
  psim_strategy s, c;
  megatron(2, 2, 2, 1, 1, true, &s);
  round_trip(&s);
  ck_assert_int_eq(psim_strategy_copy(&s, &c), PSIM_OK);
  ck_assert(psim_strategy_equal(&s, &c));
  int32_t *dv;
  ck_assert(psim_op_config_writable(&c.ops[3], c.ops[3].n_devices, &dv) == PSIM_OK);
  dv[0] = 15;
  ck_assert(!psim_strategy_equal(&s, &c));
  round_trip(&c); /* a changed op comes back through an override */
  psim_strategy_destroy(&c);
  psim_strategy_destroy(&s);
  megatron(1, 2, 1, 1, 2, false, &s);
  round_trip(&s);
  psim_strategy_destroy(&s);
  ck_assert_int_eq(psim_strategy_data_parallel(&M, &C, 8, 1, &s), PSIM_OK);
  round_trip(&s);
  psim_strategy_destroy(&s);
  ck_assert_int_eq(load_text(HDR "\"mesh\":{\"axes\":{\"x\":4}},\"layout\":{\"b\":\"x\"},"
                                 "\"ops\":{\"layer.0.fc1\":{\"split\":{\"f\":4},"
                                 "\"devices\":[3,2,1,0]}},\"gradient_sync\":{"
                                 "\"parameter_server\":{\"servers\":[5],\"mode\":\"async\"}}}",
                             &s),
                   PSIM_OK);
  round_trip(&s);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(to_json_compresses_devices) {
  psim_strategy s;
  megatron(2, 2, 2, 1, 1, false, &s);
  cJSON *j = NULL;
  ck_assert_int_eq(psim_strategy_to_json(&s, &M, &C, &j), PSIM_OK);
  /* Every op follows mesh+layout: no per-op entries at all. */
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "ops"));
  cJSON *st1 =
      cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pipeline"), "stages"), 1);
  cJSON *devs = cJSON_GetObjectItem(st1, "devices");
  ck_assert(cJSON_IsObject(devs));
  ck_assert_int_eq(cJSON_GetObjectItem(devs, "first")->valueint, 4);
  ck_assert_int_eq(cJSON_GetObjectItem(devs, "count")->valueint, 4);
  cJSON_Delete(j);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(alloc_failures_are_clean) {
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = o.pp = o.dp = 2;
  o.sequence_parallel = true;
  psim_strategy s;
  int failures = 0;
  for (long n = 1; n < 100000; n++) {
    psim_alloc_fail_at(n);
    psim_status st = psim_strategy_megatron(&M, &C, &o, &s);
    psim_alloc_fail_at(0);
    if (st == PSIM_OK) {
      psim_strategy_destroy(&s);
      break;
    }
    ck_assert_int_eq(st, PSIM_ENOMEM);
    failures++;
  }
  ck_assert_int_gt(failures, 10);
}
END_TEST

/* ---- the one reader of overrides and partial strategies ---- */

/* Every key a user reads comes back typed, in document order; what a user
 * refuses is read all the same (each user refuses it with its own message). */
START_TEST(constraints_read_once) {
  cJSON *j = cJSON_Parse("{\"ops\": {\"layer.*.fc1\": {\"split\": {\"ffn\": 4, \"b\": 2.5}, "
                         "\"devices\": [3, 1]}, \"head\": {\"devices\": [\"gpu0\"], "
                         "\"replicas\": 2, \"other\": 1}, \"x\": 7}, "
                         "\"split\": {\"batch\": 2}, \"layout\": {\"heads\": \"tp\"}, "
                         "\"mesh\": {\"axes\": {\"dp\": 2, \"tp\": 4}}, \"recompute\": \"full\"}");
  ck_assert_ptr_nonnull(j);
  psim_constraints k;
  ck_assert_int_eq(psim_constraints_read(j, "f.json", &k), PSIM_OK);
  ck_assert_int_eq(k.n_ops, 3);
  const psim_constraint_op *fc1 = &k.ops[0], *head = &k.ops[1];
  ck_assert_str_eq(fc1->pattern, "layer.*.fc1");
  ck_assert(fc1->star && !head->star);
  ck_assert(psim_constraint_op_matches(fc1, "layer.3.fc1"));
  ck_assert(!psim_constraint_op_matches(fc1, "layer.3.fc2"));
  ck_assert_int_eq(fc1->split.n, 2);
  ck_assert_str_eq(fc1->split.entry[0].key, "ffn");
  ck_assert(fc1->split.entry[0].is_number && fc1->split.entry[0].number == 4);
  ck_assert(fc1->split.entry[1].number == 2.5); /* as written: each user checks */
  ck_assert_int_eq(fc1->n_indices, 2);
  ck_assert_int_eq(fc1->indices[0], 3);
  ck_assert_ptr_null(fc1->replicas);
  ck_assert_ptr_null(head->indices); /* names are not indices */
  ck_assert_ptr_nonnull(head->devices);
  ck_assert_ptr_nonnull(head->replicas);
  ck_assert_ptr_null(head->split.json);
  ck_assert_ptr_null(k.ops[2].split.json); /* not an object: read, not refused */
  ck_assert_int_eq(k.split.n, 1);
  ck_assert_str_eq(psim_constraint_map_find(&k.layout, "heads")->string, "tp");
  ck_assert_ptr_null(psim_constraint_map_find(&k.layout, "batch"));
  ck_assert_int_eq(k.mesh_axes.n, 2);
  ck_assert(k.mesh_axes.entry[1].number == 4);
  ck_assert_str_eq(k.recompute->valuestring, "full");
  psim_constraints_destroy(&k);
  /* no document, or one that is not an object: nothing to read */
  ck_assert_int_eq(psim_constraints_read(NULL, NULL, &k), PSIM_OK);
  ck_assert_int_eq(k.n_ops, 0);
  psim_constraints_destroy(&k);
  /* out of memory at every allocation: PSIM_ENOMEM, and destroy frees the rest */
  for (long n = 1; n < 100; n++) {
    psim_alloc_fail_at(n);
    psim_status st = psim_constraints_read(j, "f.json", &k);
    psim_alloc_fail_at(0);
    psim_constraints_destroy(&k);
    if (st == PSIM_OK)
      break;
    ck_assert_int_eq(st, PSIM_ENOMEM);
  }
  psim_error_clear();
  cJSON_Delete(j);
}
END_TEST

/* ---- structure check of files ---- */

static int check_dir(const char *dir, const char *prefix, psim_status want) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || !strstr(e->d_name, ".json"))
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    cJSON *root = NULL;
    psim_status st = psim_json_load_file(path, &root);
    if (st == PSIM_OK)
      st = psim_strategy_check_json(path, root);
    cJSON_Delete(root);
    ck_assert_msg(st == want, "%s: got %d (%s)", path, st, psim_error_message());
    if (want != PSIM_OK)
      ck_assert_ptr_nonnull(strstr(psim_error_message(), e->d_name));
    n++;
  }
  closedir(d);
  return n;
}

START_TEST(shipped_files_pass_check) {
  ck_assert_int_ge(check_dir(PSIM_SOURCE_ROOT "/strategies", "", PSIM_OK), 6);
}
END_TEST

START_TEST(bad_files_fail_check) {
  ck_assert_int_ge(check_dir(PSIM_SOURCE_ROOT "/tests/data/bad", "strategy-", PSIM_EINPUT), 10);
}
END_TEST

START_TEST(shipped_files_expand) {
  /* The explicit example targets 16 devices and this model's layer count. */
  psim_strategy s;
  ck_assert_msg(psim_strategy_load(PSIM_SOURCE_ROOT "/strategies/data-parallel.json", &M, &C, &s) ==
                    PSIM_EINPUT,
                "batch 8 over 16 devices must fail");
  free_gpt(&M);
  make_gpt(&M, 4, 64);
  ck_assert_msg(psim_strategy_load(PSIM_SOURCE_ROOT "/strategies/data-parallel.json", &M, &C, &s) ==
                    PSIM_OK,
                "%s", psim_error_message());
  ck_assert_int_eq(s.ops[0].n_devices, 16);
  psim_strategy_destroy(&s);
}
END_TEST

START_TEST(megatron_1t_scale) {
  /* The issue-3 benchmark shape: 128 layers, tp 8 x pp 64 x dp 6 = 3072 devices. */
  free_gpt(&M);
  free_cluster(&C);
  make_gpt(&M, 128, 3072);
  make_cluster(&C, 3072);
  psim_strategy s;
  megatron(4, 64, 6, 1, 1, false, &s); /* tp 4: the tiny model has 4 heads */
  ck_assert_int_eq(s.n_stages, 64);
  ck_assert_int_eq(s.n_micro, 512);                   /* 3072 / (1 * 6) */
  ck_assert_int_eq(s.stages[63].devices[0], 63 * 24); /* pp_i * dp * tp */
  ck_assert_int_eq(s.stages[63].first_layer, 127);    /* 2 blocks per stage: 127..128 */
  ck_assert_int_eq(s.stages[63].last_layer, 129);
  round_trip(&s);
  psim_strategy_destroy(&s);
  ck_assert_int_eq(psim_strategy_data_parallel(&M, &C, 3072, 1, &s), PSIM_OK);
  round_trip(&s);
  psim_strategy_destroy(&s);
}
END_TEST

/* The same rules through the real model loader (tests/data/tiny-gpt.json:
 * separate q/k/v projections, fused attention; the embedding shares layer 0
 * with the first block and the head shares the last). */
START_TEST(megatron_on_loaded_model) {
  psim_model lm;
  psim_model_init(&lm);
  ck_assert_msg(psim_model_load(PSIM_SOURCE_ROOT "/tests/data/tiny-gpt.json", &lm) == PSIM_OK, "%s",
                psim_error_message());
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = o.pp = o.dp = 2;
  psim_strategy s;
  ck_assert_msg(psim_strategy_megatron(&lm, &C, &o, &s) == PSIM_OK, "%s", psim_error_message());
  struct {
    const char *op, *dim;
    int degree;
  } want[] = {{"layer.0.q_proj", "n", 2}, {"layer.0.q_proj", "h", 1}, {"layer.0.proj", "n", 2},
              {"layer.0.proj", "h", 1},   {"layer.0.fc1", "f", 2},    {"layer.0.fc2", "f", 2},
              {"layer.0.fc2", "h", 1},    {"layer.0.attn", "n", 2},   {"embed", "v", 2},
              {"head", "v", 2},           {"xent", "v", 2},           {"layer.3.fc1", "b", 2}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    int i = psim_model_find_op(&lm, want[k].op);
    ck_assert_int_ge(i, 0);
    int j = psim_op_dim_index(&lm.ops[i], psim_model_find_dim(&lm, want[k].dim));
    ck_assert_int_ge(j, 0);
    ck_assert_msg(s.ops[i].degree[j] == want[k].degree, "%s.%s: %d", want[k].op, want[k].dim,
                  s.ops[i].degree[j]);
  }
  int ln = psim_model_find_op(&lm, "layer.2.ln1");
  ck_assert_int_eq(s.ops[ln].replicas, 2);
  ck_assert_int_eq(s.ops[ln].stage, 1);
  ck_assert_int_eq(s.ops[ln].devices[0], 4);
  ck_assert_int_eq(s.stages[0].last_layer, 1);
  ck_assert_int_eq(s.stages[1].first_layer, 2);
  ck_assert_int_eq(s.ops[psim_model_find_op(&lm, "head")].stage, 1);
  psim_strategy_destroy(&s);
  psim_model_destroy(&lm);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("strategy");
  TCase *t = tcase_create("strategy");
  tcase_add_checked_fixture(t, setup4, teardown);
  tcase_add_test(t, shard_sizes);
  tcase_add_test(t, names_round_trip);
  tcase_add_test(t, megatron_column_and_row_parallel);
  tcase_add_test(t, megatron_device_order);
  tcase_add_test(t, megatron_interleaved_stages);
  tcase_add_test(t, megatron_uneven_layers);
  tcase_add_test(t, megatron_sequence_parallel);
  tcase_add_test(t, megatron_validation);
  tcase_add_test(t, data_parallel_template);
  tcase_add_test(t, template_json);
  tcase_add_test(t, template_json_errors);
  tcase_add_test(t, explicit_mesh_layout);
  tcase_add_test(t, explicit_override_and_glob);
  tcase_add_test(t, explicit_pipeline_and_ps);
  tcase_add_test(t, explicit_validation);
  tcase_add_test(t, to_json_round_trip);
  tcase_add_test(t, recompute_method_keys);
  tcase_add_test(t, to_json_compresses_devices);
  tcase_add_test(t, alloc_failures_are_clean);
  tcase_add_test(t, constraints_read_once);
  tcase_add_test(t, megatron_1t_scale);
  tcase_add_test(t, megatron_on_loaded_model);
  tcase_add_test(t, shipped_files_pass_check);
  tcase_add_test(t, bad_files_fail_check);
  tcase_add_test(t, shipped_files_expand);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
