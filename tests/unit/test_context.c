/* test_context.c - context parallelism against closed forms (issue 18,
 * defect 3; issue 21): a split of the query sequence exchanges (cp - 1) / cp
 * of K and V per rank per layer forward, and of dK and dV backward; with slow links it is no
 * cheaper than data parallelism on the same devices; causal load balancing gives every rank the
 * same attention FLOPs (docs/simulator.md, "Context parallelism"). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/generators.h"
#include "sim/core/json.h"
#include "sim/simulate.h"

#define SEQ    131072
#define HIDDEN 1024
#define CP     8

typedef struct fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
} fixture;

/* A one-layer LLaMA (flash, causal) of sequence SEQ and global batch `batch`. */
static void load_model(psim_model *m, int64_t batch) {
  psim_gen_tf_opts o;
  psim_gen_llama_opts_init(&o);
  o.layers = 1;
  o.hidden = HIDDEN;
  o.heads = 8;
  o.ffn = 2816;
  o.vocab = 1024;
  o.seq = SEQ;
  o.batch = batch;
  cJSON *doc = NULL;
  ck_assert_msg(psim_gen_llama(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("llama", doc, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* n GPUs (no runtime overheads) on one switch, links of bw bytes/s, no latency. */
static void load_cluster(psim_cluster *c, int n_gpus, double bw) {
  char buf[4096];
  int n = snprintf(buf, sizeof buf,
                   "{\"format\":\"plansim.cluster/1\",\"name\":\"cp\",\"switches\":[\"sw\"],"
                   "\"device_types\":{\"gpu\":{\"peak_flops\":{\"fp32\":\"19.5 "
                   "TFLOP/s\",\"bf16\":\"312 TFLOP/s\"},"
                   "\"memory\":\"80 GB\",\"memory_bandwidth\":\"2039 GB/s\"}},\"devices\":[");
  for (int i = 0; i < n_gpus; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s{\"name\":\"g%d\",\"type\":\"gpu\"}",
                  i ? "," : "", i);
  n += snprintf(buf + n, sizeof buf - (size_t)n, "],\"links\":[");
  for (int i = 0; i < n_gpus; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n,
                  "%s{\"a\":\"g%d\",\"b\":\"sw\",\"bandwidth\":%.17g,\"latency\":0}", i ? "," : "",
                  i, bw);
  snprintf(buf + n, sizeof buf - (size_t)n, "]}");
  cJSON *doc = cJSON_Parse(buf);
  ck_assert_ptr_nonnull(doc);
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json("cp", doc, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* The mesh axis `axis` (CP devices) given to role `role`. */
static void load_strategy(fixture *f, const char *role, const char *axis) {
  char buf[256];
  snprintf(buf, sizeof buf,
           "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"%s\":%d}},"
           "\"layout\":{\"%s\":\"%s\"}}",
           axis, CP, role, axis);
  cJSON *doc = cJSON_Parse(buf);
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_from_json("s", doc, &f->m, &f->c, &f->s) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(doc);
}

static void setup(fixture *f, int64_t batch, double bw, const char *role, const char *axis) {
  load_model(&f->m, batch);
  load_cluster(&f->c, CP, bw);
  load_strategy(f, role, axis);
}

static void teardown(fixture *f) {
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static void simulate(fixture *f, bool keep, psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = keep;
  o.fold = false;
  ck_assert_msg(psim_simulate(&f->m, &f->c, &f->s, &o, r) == PSIM_OK, "%s", psim_error_message());
}

static int32_t op_named(const psim_model *m, const char *name) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (strcmp(m->ops[o].name, name) == 0)
      return o;
  ck_abort_msg("no op %s", name);
  return -1;
}

/* Bytes of K or V (one layer, the whole batch). */
static double kv_bytes(const psim_model *m) {
  int32_t a = op_named(m, "layer.0.attention");
  return psim_tensor_bytes(m, &m->tensors[m->ops[a].in[1]]);
}

/* Each rank receives (cp - 1) / cp of K and of V in the forward pass: the
 * time of the communication that brings the projections' K and V to the
 * attention, times the link bandwidth (no latency, one link per device). */
START_TEST(kv_exchange_is_cp_minus_one_over_cp) {
  const double bw = 100e9;
  fixture f;
  setup(&f, 1, bw, "sequence", "cp");
  psim_sim_result r;
  simulate(&f, true, &r);
  int32_t k = op_named(&f.m, "layer.0.k"), v = op_named(&f.m, "layer.0.v");
  double seconds[2] = {0, 0};
  const psim_taskgraph *g = r.graph;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    const psim_task_info *in = &g->info[i];
    bool comm = in->kind == PSIM_TASK_COLLECTIVE || in->kind == PSIM_TASK_TRANSFER;
    if (comm && (in->op == k || in->op == v) && (in->device == 0 || in->device < 0))
      seconds[in->op == v] += g->duration_s[i];
  }
  double want = (CP - 1.0) / CP * kv_bytes(&f.m);
  for (int j = 0; j < 2; j++)
    ck_assert_msg(fabs(seconds[j] * bw / want - 1) < 0.01, "%s: %g bytes per rank, want %g",
                  j ? "v" : "k", seconds[j] * bw, want);
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* On slow links the K/V exchange dominates: context parallelism over CP
 * devices is slower than data parallelism over them (the same FLOPs per
 * device; data parallelism moves only the gradients). */
START_TEST(cp_no_faster_than_dp_on_slow_links) {
  const double bw = 1e9;
  fixture cp, dp;
  setup(&cp, CP, bw, "sequence", "cp");
  setup(&dp, CP, bw, "batch", "dp");
  psim_sim_result rc, rd;
  simulate(&cp, false, &rc);
  simulate(&dp, false, &rd);
  /* lower bound: the forward K and V exchange of the layer, exposed at least
   * beyond the attention's compute (here far longer than it) */
  double exchange_s = 2 * (CP - 1.0) / CP * kv_bytes(&cp.m) / bw / CP;
  ck_assert_msg(rc.iteration_time_s > rd.iteration_time_s, "cp %g s, dp %g s", rc.iteration_time_s,
                rd.iteration_time_s);
  ck_assert_msg(rc.iteration_time_s > exchange_s, "cp %g s, exchange alone %g s",
                rc.iteration_time_s, exchange_s);
  psim_sim_result_destroy(&rc);
  psim_sim_result_destroy(&rd);
  teardown(&cp);
  teardown(&dp);
}
END_TEST

/* Causal (query i, key j <= i) pairs of the rows of chunk c of n chunks of SEQ. */
static double causal_pairs(int64_t c, int64_t n) {
  double s = 0;
  for (int64_t i = c * (SEQ / n); i < (c + 1) * (SEQ / n); i++)
    s += (double)(i + 1);
  return s;
}

/* Megatron-Core's load balancing (rank r holds chunks r and 2 cp - 1 - r of
 * 2 cp): every rank's causal pairs, counted by brute force, are 1/cp of the
 * whole, as is the simulator's attention shard; contiguous chunks would give
 * the last rank 2 cp - 1 times the first's. */
START_TEST(causal_load_balance) {
  fixture f;
  setup(&f, 1, 100e9, "sequence", "cp");
  int32_t a = op_named(&f.m, "layer.0.attention");
  const psim_op *op = &f.m.ops[a];
  const psim_op_config *cfg = &f.s.ops[a];
  double total = (double)SEQ * (SEQ + 1) / 2, full_fwd = op->flops[PSIM_PASS_FWD];
  for (int32_t r = 0; r < CP; r++) {
    int64_t ext[PSIM_MAX_OP_DIMS];
    for (int32_t i = 0; i < op->n_dims; i++) {
      int64_t n = f.m.dims[op->dims[i].dim].size;
      ext[i] = n / cfg->degree[i];
    }
    double flops, bytes;
    psim_op_shard_work(&f.m, op, ext, PSIM_PASS_FWD, &flops, &bytes);
    double balanced = (causal_pairs(r, 2 * CP) + causal_pairs(2 * CP - 1 - r, 2 * CP)) / total;
    ck_assert_msg(fabs(flops / full_fwd - balanced) < 0.01 * balanced,
                  "rank %d: %g of the FLOPs, balanced chunks %g", r, flops / full_fwd, balanced);
  }
  ck_assert(causal_pairs(CP - 1, CP) > (2 * CP - 2) * causal_pairs(0, CP));
  teardown(&f);
}
END_TEST

/* Ring attention's exchanged bytes (issue 21, Tests: "ring attention's
 * exchanged bytes = (cp-1)/cp of K/V per step"), as TransformerEngine's
 * AttnFuncWithCPAndKVP2P runs it for Megatron-Core (cp_comm_type "p2p"; read
 * at TE v1.9 transformer_engine/pytorch/attention.py and v2.18
 * transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py):
 * - forward: each rank's K/V block travels cp - 1 steps around the cp ring,
 *   (cp - 1)/cp of K and of V per rank and layer;
 * - backward: the forward keeps only the local K/V block, so the backward's
 *   p2p buffers (shape (2, *kv.shape), K/V and dK/dV side by side) send the
 *   K/V block at steps 0 .. cp - 2 and the dK/dV block at steps 1 .. cp - 1:
 *   (cp - 1)/cp of K/V again plus (cp - 1)/cp of dK/dV, 2 (cp - 1)/cp in all.
 * The simulator's all-reduce of dK/dV over the cp ranks (2 (cp - 1)/cp per
 * rank, ring) moves exactly these bytes; a reduce-scatter of dK/dV alone
 * would drop the re-circulated K/V. Checked on small generated models (GQA
 * llama, GPT with the unfused attention core, Qwen3 with q/k norms) under the
 * megatron template with cp 2 and 4 (no tp, dp 1), from the bytes each
 * communication task moves (the task graph's plan bytes). */
#define RING_SEQ    4096
#define RING_LAYERS 2

typedef enum family { LLAMA, GPT, QWEN3 } family;

typedef struct ring_fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
  double kv_bytes; /* K of one layer, closed form: batch seq kv_heads head_dim bytes */
} ring_fixture;

static void ring_model(ring_fixture *f, family fam) {
  psim_gen_tf_opts o;
  if (fam == QWEN3)
    psim_gen_qwen3_opts_init(&o);
  else
    psim_gen_llama_opts_init(&o);
  o.layers = RING_LAYERS;
  o.hidden = 512;
  o.heads = 8;
  o.kv_heads = fam == GPT ? 0 : 2;
  o.head_dim = fam == QWEN3 ? 64 : 0;
  o.ffn = 1024;
  o.vocab = 1024;
  o.seq = RING_SEQ;
  o.batch = 1;
  o.flash = fam != GPT;
  o.dtype = "bf16";
  cJSON *doc = NULL;
  psim_status st = fam == GPT     ? psim_gen_gpt(&o, &doc)
                   : fam == LLAMA ? psim_gen_llama(&o, &doc)
                                  : psim_gen_decoder(&o, &doc);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  psim_model_init(&f->m);
  ck_assert_msg(psim_model_from_json("m", doc, &f->m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
  int64_t kvh = o.kv_heads ? o.kv_heads : o.heads;
  int64_t head_dim = o.head_dim ? o.head_dim : o.hidden / o.heads;
  f->kv_bytes = (double)o.batch * RING_SEQ * (double)kvh * (double)head_dim * 2; /* bf16 */
}

static void ring_setup(ring_fixture *f, family fam, int cp) {
  ring_model(f, fam);
  load_cluster(&f->c, cp, 100e9);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = o.pp = o.dp = 1;
  o.cp = cp;
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_megatron(&f->m, &f->c, &o, &f->s) == PSIM_OK, "%s",
                psim_error_message());
}

static void ring_teardown(ring_fixture *f) {
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

/* Whether op o produces the input of a K or V view (the forward exchange's
 * source) or consumes a view's output (the backward's dK/dV reduction). */
static bool feeds_view(const psim_model *m, int32_t o) {
  for (int32_t y = 0; y < m->n_ops; y++)
    if (strstr(m->ops[y].name, "k_view") || strstr(m->ops[y].name, "v_view"))
      if (m->tensors[m->ops[y].in[0]].producer == o)
        return true;
  return false;
}

static bool reads_view(const psim_model *m, int32_t o) {
  for (int32_t i = 0; i < m->ops[o].n_in; i++) {
    int32_t p = m->tensors[m->ops[o].in[i]].producer;
    if (p >= 0 && (strstr(m->ops[p].name, "k_view") || strstr(m->ops[p].name, "v_view")))
      return true;
  }
  return false;
}

/* Bytes per rank of the tensor/context-parallel communication (sum over the
 * tasks of each group's messages, over the cp ranks): [0] forward K/V,
 * [1] backward (the dK/dV collective of the K/V consumers), [2] anything else. */
static void exchanged(ring_fixture *f, int cp, double out[3]) {
  psim_sim_options so;
  psim_sim_options_init(&so);
  so.keep_graph = true;
  so.fold = false;
  psim_sim_result r;
  ck_assert_msg(psim_simulate(&f->m, &f->c, &f->s, &so, &r) == PSIM_OK, "%s", psim_error_message());
  const psim_taskgraph *g = r.graph;
  ck_assert_ptr_nonnull(g->bytes);
  out[0] = out[1] = out[2] = 0;
  for (int32_t t = 0; t < g->n_tasks; t++) {
    const psim_task_info *in = &g->info[t];
    bool comm = in->kind == PSIM_TASK_COLLECTIVE || in->kind == PSIM_TASK_TRANSFER;
    if (!comm || in->pass != PSIM_TP_COMM_TP || in->op < 0)
      continue;
    int k = feeds_view(&f->m, in->op) ? 0 : reads_view(&f->m, in->op) ? 1 : 2;
    out[k] += g->bytes[t] / cp;
  }
  psim_sim_result_destroy(&r);
}

static void check_family(family fam) {
  static const char *const names[] = {"llama", "gpt", "qwen3"};
  for (int cp = 2; cp <= 4; cp *= 2) {
    ring_fixture f;
    ring_setup(&f, fam, cp);
    double got[3];
    exchanged(&f, cp, got);
    /* K and V, every layer, (cp - 1)/cp of each per rank */
    double want = 2.0 * RING_LAYERS * (cp - 1.0) / cp * f.kv_bytes;
    ck_assert_msg(fabs(got[0] / want - 1) < 1e-6,
                  "%s cp %d: forward K/V %g bytes per rank, want %g", names[fam], cp, got[0], want);
    ck_assert_msg(fabs(got[1] / (2 * want) - 1) < 1e-6,
                  "%s cp %d: backward K/V and dK/dV %g bytes per rank, want %g (TE's ring: "
                  "(cp-1)/cp of each)",
                  names[fam], cp, got[1], 2 * want);
    ck_assert_msg(got[2] == 0, "%s cp %d: %g bytes of other tp/cp traffic", names[fam], cp, got[2]);
    ring_teardown(&f);
  }
}

START_TEST(ring_bytes_llama) {
  check_family(LLAMA);
}
END_TEST

START_TEST(ring_bytes_gpt) {
  check_family(GPT);
}
END_TEST

START_TEST(ring_bytes_qwen3) {
  check_family(QWEN3);
}
END_TEST

int main(void) {
  Suite *s = suite_create("context");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, kv_exchange_is_cp_minus_one_over_cp);
  tcase_add_test(tc, cp_no_faster_than_dp_on_slow_links);
  tcase_add_test(tc, causal_load_balance);
  tcase_add_test(tc, ring_bytes_llama);
  tcase_add_test(tc, ring_bytes_gpt);
  tcase_add_test(tc, ring_bytes_qwen3);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
