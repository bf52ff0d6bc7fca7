/* test_strategy_moe.c - expert, expert-tensor and context parallelism in the
 * megatron template and the mesh form (issue 21 item 2): Megatron-Core's rank
 * orders (megatron/core/parallel_state.py of core_v0.15.0: dense layers tp x cp
 * x dp, expert layers etp x ep x expert-dp over the same ranks, tp fastest),
 * its argument rules as errors naming the field, expert memory and gradient
 * synchronisation over the expert data-parallel groups against closed forms,
 * the all-to-all of the expert layers, and context parallelism's K/V exchange
 * and causal load balance. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/generators.h"
#include "sim/builder/build.h"
#include "sim/core/json.h"
#include "sim/simulate.h"

#define SRC(p) PSIM_SOURCE_ROOT "/" p

typedef struct fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
} fixture;

/* The model a generator writes for o. */
static void gen_model(psim_model *m, psim_status (*gen)(const psim_gen_tf_opts *, cJSON **),
                      const psim_gen_tf_opts *o) {
  cJSON *doc = NULL;
  ck_assert_msg(gen(o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("gen", doc, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* A small MoE GPT: `layers` layers, h 256, 4 heads, seq `seq`, 8 experts, top-2. */
static void gen_moe(psim_model *m, int64_t layers, int64_t seq, int64_t batch) {
  psim_gen_tf_opts o;
  psim_gen_moe_opts_init(&o);
  o.layers = layers;
  o.hidden = 256;
  o.heads = 4;
  o.seq = seq;
  o.vocab = 1024;
  o.batch = batch;
  gen_model(m, psim_gen_moe, &o);
}

/* A one-layer LLaMA (flash, causal attention; K/V on their own sequence dim). */
static void gen_llama(psim_model *m, int64_t seq) {
  psim_gen_tf_opts o;
  psim_gen_llama_opts_init(&o);
  o.layers = 1;
  o.hidden = 512;
  o.heads = 8;
  o.ffn = 1408;
  o.vocab = 1024;
  o.seq = seq;
  o.batch = 2;
  gen_model(m, psim_gen_llama, &o);
}

static void load_cluster(psim_cluster *c, const char *file) {
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_load(file, c) == PSIM_OK, "%s", psim_error_message());
}

/* The strategy document `json` expanded into f->s; its status. */
static psim_status strategy(fixture *f, const char *json) {
  cJSON *doc = cJSON_Parse(json);
  ck_assert_ptr_nonnull(doc);
  psim_status st = psim_strategy_from_json("s.json", doc, &f->m, &f->c, &f->s);
  cJSON_Delete(doc);
  return st;
}

static void strategy_ok(fixture *f, const char *json) {
  ck_assert_msg(strategy(f, json) == PSIM_OK, "%s: %s", json, psim_error_message());
}

/* A MoE model of `layers` layers (seq 256, batch 16) on cluster file `cluster`
 * under the strategy document `json`. */
static void setup_moe(fixture *f, int64_t layers, const char *cluster, const char *json) {
  gen_moe(&f->m, layers, 256, 16);
  load_cluster(&f->c, cluster);
  strategy_ok(f, json);
}

static void teardown(fixture *f) {
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static int32_t op_named(const psim_model *m, const char *name) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (strcmp(m->ops[o].name, name) == 0)
      return o;
  ck_abort_msg("no op %s", name);
  return -1;
}

/* The shard coordinate, along the op dim named `dim`, of the shard device dev
 * computes (-1 when dev is not among the op's devices; 0 when the op has no
 * such dim). */
static int32_t shard_coord(const psim_model *m, const psim_strategy *s, int32_t o, int32_t dev,
                           const char *dim) {
  const psim_op *op = &m->ops[o];
  const psim_op_config *cfg = &s->ops[o];
  int32_t e = 0;
  while (e < cfg->n_devices && cfg->devices[e] != dev)
    e++;
  if (e == cfg->n_devices)
    return -1;
  int32_t sh = e / cfg->replicas, coord = 0;
  for (int32_t i = op->n_dims - 1; i >= 0; i--) {
    if (strcmp(m->dims[op->dims[i].dim].name, dim) == 0)
      coord = sh % cfg->degree[i];
    sh /= cfg->degree[i];
  }
  return coord;
}

static int32_t degree_of(const psim_model *m, const psim_strategy *s, int32_t o, const char *dim) {
  const psim_op *op = &m->ops[o];
  for (int32_t i = 0; i < op->n_dims; i++)
    if (strcmp(m->dims[op->dims[i].dim].name, dim) == 0)
      return s->ops[o].degree[i];
  return 1;
}

/* Dense layers: rank = tp_i + tp (cp_i + cp dp_i); expert layers, with etp 1:
 * rank = ep_i + ep edp_i (RankGenerator order "tp-cp-ep-dp-pp"). */
START_TEST(rank_orders) {
  fixture f;
  setup_moe(&f, 2, SRC("topologies/dgx-a100-x1.json"),
            "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,\"cp\":2,"
            "\"dp\":2,\"ep\":4,\"etp\":1}");
  int32_t qkv = op_named(&f.m, "layer.0.qkv"), fc1 = op_named(&f.m, "layer.0.fc1");
  int32_t scores = op_named(&f.m, "layer.0.scores");
  ck_assert_int_eq(degree_of(&f.m, &f.s, fc1, "expert"), 4);
  ck_assert_int_eq(degree_of(&f.m, &f.s, fc1, "batch"), 2);
  ck_assert_int_eq(degree_of(&f.m, &f.s, fc1, "ffn"), 1);
  ck_assert_int_eq(degree_of(&f.m, &f.s, scores, "seq"), 2);
  ck_assert_int_eq(degree_of(&f.m, &f.s, scores, "seq_kv"), 1);
  for (int32_t d = 0; d < 8; d++) {
    int32_t tp_i = d % 2, cp_i = d / 2 % 2, dp_i = d / 4, ep_i = d % 4, edp_i = d / 4;
    ck_assert_int_eq(shard_coord(&f.m, &f.s, qkv, d, "heads"), tp_i);
    ck_assert_int_eq(shard_coord(&f.m, &f.s, qkv, d, "seq"), cp_i);
    ck_assert_int_eq(shard_coord(&f.m, &f.s, qkv, d, "batch"), dp_i);
    ck_assert_int_eq(shard_coord(&f.m, &f.s, scores, d, "seq"), cp_i);
    ck_assert_int_eq(shard_coord(&f.m, &f.s, fc1, d, "expert"), ep_i);
    ck_assert_int_eq(shard_coord(&f.m, &f.s, fc1, d, "batch"), edp_i);
  }
  ck_assert_int_eq(f.s.tmpl.ep, 4);
  ck_assert_int_eq(f.s.tmpl.etp, 1);
  ck_assert_int_eq(f.s.tmpl.cp, 2);
  teardown(&f);
}
END_TEST

/* etp defaults to tp (arguments.py: expert_tensor_parallel_size = tp when not
 * given): tp 2, ep 4, dp 4 puts the expert ffn on the tp pair and the experts
 * on the dp ranks (expert-dp 1); the written explicit form reads back equal. */
START_TEST(etp_default_and_round_trip) {
  fixture f;
  setup_moe(&f, 2, SRC("topologies/dgx-a100-x1.json"),
            "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,\"ep\":4,"
            "\"dp\":4,\"sequence_parallel\":true}");
  ck_assert_int_eq(f.s.tmpl.etp, 2);
  int32_t fc1 = op_named(&f.m, "layer.0.fc1");
  ck_assert_int_eq(degree_of(&f.m, &f.s, fc1, "expert"), 4);
  ck_assert_int_eq(degree_of(&f.m, &f.s, fc1, "ffn"), 2);
  ck_assert_int_eq(degree_of(&f.m, &f.s, fc1, "batch"), 1);
  for (int32_t d = 0; d < 8; d++) {
    ck_assert_int_eq(shard_coord(&f.m, &f.s, fc1, d, "expert"), d / 2);
    ck_assert_int_eq(shard_coord(&f.m, &f.s, fc1, d, "ffn"), d % 2);
  }
  cJSON *doc = NULL;
  ck_assert(psim_strategy_to_json(&f.s, &f.m, &f.c, &doc) == PSIM_OK);
  ck_assert_ptr_nonnull(cJSON_GetObjectItem(doc, "expert_layout"));
  psim_strategy back;
  ck_assert_msg(psim_strategy_from_json("back", doc, &f.m, &f.c, &back) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert(psim_strategy_equal(&f.s, &back));
  psim_strategy_destroy(&back);
  cJSON_Delete(doc);
  teardown(&f);
}
END_TEST

/* The explicit form's layout {"batch": "dp", "expert": "dp"} (GShard): the
 * expert GEMMs split the experts over dp (they sharded nothing before: the
 * batch, their first dim, took the axis), the router and dispatch keep the
 * batch split. */
START_TEST(mesh_expert_layout_key) {
  fixture f;
  setup_moe(&f, 1, SRC("topologies/dgx-a100-x1.json"),
            "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":8}},"
            "\"layout\":{\"batch\":\"dp\",\"expert\":\"dp\"}}");
  const char *expert_ops[] = {"layer.0.fc1", "layer.0.gelu", "layer.0.fc2"};
  for (int i = 0; i < 3; i++) {
    int32_t o = op_named(&f.m, expert_ops[i]);
    ck_assert_int_eq(degree_of(&f.m, &f.s, o, "expert"), 8);
    ck_assert_int_eq(degree_of(&f.m, &f.s, o, "batch"), 1);
  }
  const char *token_ops[] = {"layer.0.router", "layer.0.dispatch", "layer.0.combine"};
  for (int i = 0; i < 3; i++) {
    int32_t o = op_named(&f.m, token_ops[i]);
    ck_assert_int_eq(degree_of(&f.m, &f.s, o, "batch"), 8);
    ck_assert_int_eq(degree_of(&f.m, &f.s, o, "expert"), 1);
  }
  teardown(&f);
}
END_TEST

#define MEGA "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","

/* Megatron-LM's rules, each refused naming the field. */
static void refused(fixture *f, const char *json, const char *needle) {
  ck_assert_int_eq(strategy(f, json), PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), needle), "'%s' not in: %s", needle,
                psim_error_message());
}

START_TEST(megatron_rules) {
  fixture f;
  gen_moe(&f.m, 2, 256, 16);
  load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
  refused(&f, MEGA "\"tp\":1,\"dp\":6,\"ep\":3}", "ep: 3 does not divide the 8 experts");
  refused(&f, MEGA "\"tp\":2,\"dp\":2,\"ep\":8}", "etp: etp*ep = 16 does not divide");
  refused(&f, MEGA "\"tp\":1,\"dp\":1,\"cp\":3}", "cp: the sequence of 256 tokens");
  refused(&f, MEGA "\"tp\":2,\"dp\":1,\"cp\":8}", "tp*pp*cp*dp = 16 devices");
  refused(&f, MEGA "\"ep\":0}", "ep");
  refused(&f,
          "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":4,\"tp\":2}},"
          "\"layout\":{\"batch\":\"dp\",\"batch\":\"tp\"}}",
          "layout.batch: duplicate layout key");
  refused(&f,
          "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":4,\"tp\":2}},"
          "\"expert_layout\":{\"expert\":[\"dp\",\"pp\"]}}",
          "expert_layout.expert[1]: 'pp' is not an axis of the mesh");
  teardown(&f);
  psim_model_init(&f.m);
  ck_assert(psim_model_load(SRC("models/mlp.json"), &f.m) == PSIM_OK);
  load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
  refused(&f, MEGA "\"tp\":1,\"dp\":1,\"cp\":2}",
          "cp: 2 but the model has no dim with role "
          "'sequence'");
  refused(&f, MEGA "\"tp\":1,\"dp\":4,\"ep\":2}",
          "ep: 2 but the model has no dim with role "
          "'expert'");
  teardown(&f);
}
END_TEST

/* The experts' ffn is split etp ways, not tp (Megatron-LM: moe_ffn_hidden_size
 * divisible by etp): ffn 1030 takes tp 4 with etp 2 and refuses etp 4. */
START_TEST(expert_ffn_divides_by_etp) {
  psim_gen_tf_opts o;
  psim_gen_moe_opts_init(&o);
  o.layers = 1;
  o.hidden = 256;
  o.heads = 4;
  o.seq = 256;
  o.vocab = 1024;
  o.batch = 16;
  o.ffn = 1030;
  fixture f;
  gen_model(&f.m, psim_gen_moe, &o);
  load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
  strategy_ok(&f, MEGA "\"tp\":4,\"dp\":2,\"ep\":2,\"etp\":2}");
  ck_assert_int_eq(degree_of(&f.m, &f.s, op_named(&f.m, "layer.0.fc1"), "ffn"), 2);
  psim_strategy_destroy(&f.s);
  refused(&f, MEGA "\"tp\":4,\"dp\":2,\"ep\":2,\"etp\":4}", "etp: 4 does not divide the 1030 ffn");
  teardown(&f);
}
END_TEST

/* top_k larger than the experts is refused by the model loader. */
START_TEST(top_k_over_experts) {
  psim_gen_tf_opts o;
  psim_gen_moe_opts_init(&o);
  o.layers = 1;
  cJSON *doc = NULL;
  ck_assert(psim_gen_moe(&o, &doc) == PSIM_OK);
  cJSON *ops = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "ops"), 3), "ops");
  int n = 0;
  for (cJSON *op = ops ? ops->child : NULL; op; op = op->next)
    if (cJSON_GetObjectItem(op, "top_k")) {
      cJSON_ReplaceItemInObject(op, "top_k", cJSON_CreateNumber(9));
      n++;
    }
  ck_assert_int_eq(n, 2);
  psim_model m;
  psim_model_init(&m);
  ck_assert_int_eq(psim_model_from_json("moe", doc, &m), PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), "top_k 9 exceeds the 8 experts"), "%s",
                psim_error_message());
  psim_model_destroy(&m);
  cJSON_Delete(doc);
}
END_TEST

/* Elements of the expert weights (first dim of role expert: w_fc1, b_fc1,
 * w_fc2, b_fc2; not the router's [hidden, expert]). */
static double expert_elems(const psim_model *m) {
  double n = 0;
  for (int32_t t = 0; t < m->n_tensors; t++) {
    const psim_tensor *x = &m->tensors[t];
    if (x->kind != PSIM_TENSOR_WEIGHT || m->dims[x->dims[0]].role != PSIM_ROLE_EXPERT)
      continue;
    double e = 1;
    for (int32_t k = 0; k < x->rank; k++)
      e *= (double)m->dims[x->dims[k]].size;
    n += e;
  }
  return n;
}

static void simulate(fixture *f, bool keep, psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = keep;
  o.fold = false;
  psim_sim_result_init(r);
  ck_assert_msg(psim_simulate(&f->m, &f->c, &f->s, &o, r) == PSIM_OK, "%s", psim_error_message());
}

static bool near(double a, double b) {
  return fabs(a - b) <= 1e-9 * fabs(b);
}

/* f: model m (borrowed) on one DGX A100 under megatron {tp 1, dp 8, ep, zero}. */
static void x8_setup(fixture *f, const psim_model *m, int32_t ep, int zero) {
  f->m = *m;
  load_cluster(&f->c, SRC("topologies/dgx-a100-x1.json"));
  char json[256];
  snprintf(json, sizeof json,
           "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":1,\"dp\":8,"
           "\"ep\":%d,\"zero\":%d}",
           (int)ep, zero);
  strategy_ok(f, json);
}

/* Static memory of device 0 under megatron {tp 1, dp 8, ep, zero}. */
static psim_mem_breakdown moe_memory(const psim_model *m, int32_t ep, int zero) {
  fixture f;
  x8_setup(&f, m, ep, zero);
  psim_sim_result r;
  simulate(&f, false, &r);
  psim_mem_breakdown mem = r.memory;
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&f.s);
  psim_cluster_destroy(&f.c);
  return mem;
}

/* tp 1, dp 8: each device holds 1/ep of the expert parameters (Megatron-Core:
 * experts/ep experts per ep rank), so ep saves E (1 - 1/ep) parameters of
 * weights, gradients and optimizer state against ep 1 (E: the expert
 * parameters). With the distributed optimizer (ZeRO-1) the expert state is
 * sharded over the expert-dp group (dp/ep ranks): E/ep/(dp/ep) = E/dp per
 * device whatever ep, so the optimizer bytes do not change. */
START_TEST(expert_memory_closed_form) {
  psim_model m;
  gen_moe(&m, 2, 256, 16);
  double pb[3], E = expert_elems(&m);
  psim_memory_param_bytes(m.dtype, pb);
  ck_assert(E > 0 && E < m.n_params);
  psim_mem_breakdown one = moe_memory(&m, 1, 0), one_z = moe_memory(&m, 1, 1);
  for (int32_t ep = 2; ep <= 8; ep *= 2) {
    psim_mem_breakdown x = moe_memory(&m, ep, 0), z = moe_memory(&m, ep, 1);
    double saved = E * (1 - 1.0 / ep);
    ck_assert_msg(near(one.weights - x.weights, pb[0] * saved), "ep %d: weights %g -> %g, want -%g",
                  (int)ep, one.weights, x.weights, pb[0] * saved);
    ck_assert(near(one.gradients - x.gradients, pb[1] * saved));
    ck_assert(near(one.optimizer - x.optimizer, pb[2] * saved));
    ck_assert_msg(near(z.optimizer, one_z.optimizer), "ep %d zero 1: optimizer %g, ep 1 %g",
                  (int)ep, z.optimizer, one_z.optimizer);
    ck_assert(near(one_z.weights - z.weights, pb[0] * saved));
  }
  psim_model_destroy(&m);
}
END_TEST

/* Bytes the ranks send in gradient and parameter collectives (ring volume),
 * megatron {tp 1, dp 8, ep, zero}, every device simulated. */
static double moe_dp_bytes(const psim_model *m, int32_t ep, int zero) {
  fixture f;
  x8_setup(&f, m, ep, zero);
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = false;
  psim_build *b = NULL;
  ck_assert_msg(psim_build_graph(&b, &f.m, &f.c, &f.s, &o) == PSIM_OK, "%s", psim_error_message());
  psim_build_summary sum;
  psim_build_summarise(b, &sum);
  psim_build_free(b);
  psim_strategy_destroy(&f.s);
  psim_cluster_destroy(&f.c);
  return sum.dp_bytes;
}

/* Gradient synchronisation over the expert-dp groups: with tp 1 and dp 8 each
 * expert shard's gradients reduce over its dp/ep replicas, not over the 8
 * ranks. Ring volume per group of n (zero.h): all-reduce 2 (n - 1) gradient
 * bytes, ZeRO-1 a reduce-scatter of the gradients and an all-gather of the
 * parameters, (n - 1) bytes each; the ep groups together carry E parameters, so
 * ep saves E (7 - (8/ep - 1)) times those bytes against ep 1. */
START_TEST(expert_grad_sync_groups) {
  psim_model m;
  gen_moe(&m, 2, 256, 16);
  double pb[3], E = expert_elems(&m);
  psim_memory_param_bytes(m.dtype, pb);
  for (int zero = 0; zero <= 1; zero++) {
    double one = moe_dp_bytes(&m, 1, zero), per_byte = zero ? pb[1] + pb[0] : 2 * pb[1];
    for (int32_t ep = 2; ep <= 8; ep *= 2) {
      double x = moe_dp_bytes(&m, ep, zero), edp = 8.0 / ep;
      double want = per_byte * E * (7 - (edp - 1));
      ck_assert_msg(near(one - x, want), "ep %d zero %d: %g -> %g bytes, want -%g", (int)ep, zero,
                    one, x, want);
    }
  }
  psim_model_destroy(&m);
}
END_TEST

/* Bytes of the transfers and collectives tagged with op o (the producer whose
 * output they carry), summed over the graph. */
static double op_comm_bytes(const psim_sim_result *r, int32_t o, int32_t *n_transfers) {
  const psim_taskgraph *g = r->graph;
  ck_assert_ptr_nonnull(g->bytes);
  double n = 0;
  int32_t k = 0;
  for (int32_t t = 0; t < g->n_tasks; t++) {
    const psim_task_info *in = &g->info[t];
    if (in->op == o && (in->kind == PSIM_TASK_TRANSFER || in->kind == PSIM_TASK_COLLECTIVE))
      n += g->bytes[t];
    k += in->op == o && in->kind == PSIM_TASK_TRANSFER && g->bytes[t] > 0;
  }
  if (n_transfers)
    *n_transfers = k;
  return n;
}

/* Static weight bytes of device dev (keep_graph). */
static double device_weights(const psim_sim_result *r, int32_t dev) {
  return r->static_bytes[3 * dev];
}

/* megatron {tp 2, ep 4, dp 4, pp 2} on two DGX A100 nodes: the dispatched
 * tokens go to their experts' ranks (an all-to-all within each ep group: each
 * of the stage's 8 ranks receives (ep - 1)/ep of its expert GEMM's input, xe / ep
 * with expert-dp 1; tagged with the dispatch op, whose output they carry), none
 * with ep 1; and device 0's expert weights shrink 4x. */
START_TEST(alltoall_and_expert_memory_dgx) {
  double xe = 0, w[2] = {0, 0}, fc1_bytes[2] = {0, 0}, E1 = 0;
  int32_t pairs = 0, n_micro = 0;
  for (int k = 0; k < 2; k++) {
    fixture f;
    gen_moe(&f.m, 4, 256, 16);
    load_cluster(&f.c, SRC("topologies/dgx-a100-x2.json"));
    strategy_ok(&f, k ? "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,"
                        "\"ep\":4,\"dp\":4,\"pp\":2}"
                      : "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,"
                        "\"dp\":4,\"pp\":2}");
    psim_sim_result r;
    simulate(&f, true, &r);
    int32_t fc1 = op_named(&f.m, "layer.0.fc1"), disp = op_named(&f.m, "layer.0.dispatch");
    xe = psim_tensor_bytes(&f.m, &f.m.tensors[f.m.ops[fc1].in[0]]);
    fc1_bytes[k] = op_comm_bytes(&r, disp, &pairs);
    n_micro = f.s.n_micro;
    w[k] = device_weights(&r, 0);
    /* device 0's expert weights at ep 1: stage 0's layers, the ffn split tp ways */
    double pb[3];
    psim_memory_param_bytes(f.m.dtype, pb);
    E1 = 0;
    for (int32_t t = 0; t < f.m.n_tensors; t++) {
      const psim_tensor *x = &f.m.tensors[t];
      if (x->kind != PSIM_TENSOR_WEIGHT || f.m.dims[x->dims[0]].role != PSIM_ROLE_EXPERT ||
          x->layer > f.s.stages[0].last_layer)
        continue;
      double e = pb[0];
      for (int32_t d = 0; d < x->rank; d++)
        e *= (double)f.m.dims[x->dims[d]].size /
             (f.m.dims[x->dims[d]].role == PSIM_ROLE_FFN ? 2 : 1);
      E1 += e;
    }
    psim_sim_result_destroy(&r);
    teardown(&f);
  }
  ck_assert_msg(fc1_bytes[0] == 0, "ep 1: %g bytes into fc1", fc1_bytes[0]);
  double want = 8 * (4 - 1.0) / 4 * xe / 4;
  ck_assert_msg(near(fc1_bytes[1], want), "ep 4: %g bytes into fc1, want %g", fc1_bytes[1], want);
  /* pairwise: per micro-batch each of the 8 ranks receives from its 3 ep peers */
  ck_assert_int_eq(pairs, n_micro * 8 * 3);
  ck_assert(E1 > 0);
  ck_assert_msg(near(w[0] - w[1], E1 * 3 / 4), "weights %g -> %g, expert part %g", w[0], w[1], E1);
}
END_TEST

/* Context parallelism through the template, cp 8 and cp 4 x dp 2: every rank
 * receives (cp - 1)/cp of its K and V in the forward pass (the ring's traffic;
 * tagged with the K/V projections whose output it carries): dp cp ranks x
 * (cp - 1)/cp x K/dp = (cp - 1) K summed over the graph (K: the whole batch). */
START_TEST(cp_kv_exchange) {
  for (int dp = 1; dp <= 2; dp++) {
    int32_t cp = 8 / dp;
    fixture f;
    gen_llama(&f.m, 4096);
    load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
    char json[160];
    snprintf(json, sizeof json,
             "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":1,"
             "\"cp\":%d,\"dp\":%d}",
             (int)cp, dp);
    strategy_ok(&f, json);
    psim_sim_result r;
    simulate(&f, true, &r);
    int32_t a = op_named(&f.m, "layer.0.attention");
    int32_t kv[2] = {op_named(&f.m, "layer.0.k"), op_named(&f.m, "layer.0.v")};
    for (int j = 0; j < 2; j++) {
      double K = psim_tensor_bytes(&f.m, &f.m.tensors[f.m.ops[a].in[1 + j]]);
      double want = (cp - 1) * K, got = op_comm_bytes(&r, kv[j], NULL);
      ck_assert_msg(near(got, want), "cp %d %s: %g bytes, want %g", (int)cp, j ? "v" : "k", got,
                    want);
    }
    psim_sim_result_destroy(&r);
    teardown(&f);
  }
}
END_TEST

/* Causal (query i, key j <= i) pairs of the rows of chunk c of n chunks of seq. */
static double causal_pairs(int64_t seq, int64_t c, int64_t n) {
  double s = 0;
  for (int64_t i = c * (seq / n); i < (c + 1) * (seq / n); i++)
    s += (double)(i + 1);
  return s;
}

/* Megatron-Core's load balancing (get_batch_on_this_cp_rank: rank r holds
 * chunks r and 2cp-1-r of 2cp): each rank's causal pairs, counted by brute
 * force, are the same, and the simulator's attention shard of every rank has
 * that share of the FLOPs (over the tp head shard), to 1e-9. */
START_TEST(cp_causal_balance) {
  const int64_t seq = 4096;
  const int32_t cp = 4, tp = 2;
  fixture f;
  gen_llama(&f.m, seq);
  load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
  strategy_ok(&f, "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,"
                  "\"cp\":4,\"dp\":1}");
  int32_t a = op_named(&f.m, "layer.0.attention");
  const psim_op *op = &f.m.ops[a];
  const psim_op_config *cfg = &f.s.ops[a];
  double total = (double)seq * (seq + 1) / 2, full = op->flops[PSIM_PASS_FWD];
  for (int32_t d = 0; d < tp * cp; d++) {
    int64_t ext[PSIM_MAX_OP_DIMS];
    for (int32_t i = 0; i < op->n_dims; i++) {
      const char *name = f.m.dims[op->dims[i].dim].name;
      int64_t n = psim_strategy_dim_extent(&f.s, &f.m, op->dims[i].dim);
      ext[i] = psim_shard_size(n, cfg->degree[i], shard_coord(&f.m, &f.s, a, d, name));
    }
    double flops, bytes;
    psim_op_shard_work(&f.m, op, ext, PSIM_PASS_FWD, &flops, &bytes);
    int32_t r = shard_coord(&f.m, &f.s, a, d, "seq");
    double share =
        (causal_pairs(seq, r, 2 * cp) + causal_pairs(seq, 2 * cp - 1 - r, 2 * cp)) / total;
    double got = flops * f.s.n_micro / full; /* the shard is of one micro-batch */
    ck_assert_msg(fabs(got - share / tp) <= 1e-9 * share,
                  "device %d (cp rank %d): %.12g of the FLOPs, balanced %.12g", (int)d, (int)r, got,
                  share / tp);
  }
  ck_assert(causal_pairs(seq, cp - 1, cp) > (2 * cp - 2) * causal_pairs(seq, 0, cp));
  teardown(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("strategy_moe");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, rank_orders);
  tcase_add_test(tc, etp_default_and_round_trip);
  tcase_add_test(tc, mesh_expert_layout_key);
  tcase_add_test(tc, megatron_rules);
  tcase_add_test(tc, top_k_over_experts);
  tcase_add_test(tc, expert_ffn_divides_by_etp);
  tcase_add_test(tc, expert_memory_closed_form);
  tcase_add_test(tc, expert_grad_sync_groups);
  tcase_add_test(tc, alltoall_and_expert_memory_dgx);
  tcase_add_test(tc, cp_kv_exchange);
  tcase_add_test(tc, cp_causal_balance);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
