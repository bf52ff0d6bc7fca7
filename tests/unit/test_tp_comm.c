/* test_tp_comm.c - tensor-parallel collectives of a Llama layer against the
 * runtimes' counts (issue 20): with sequence parallelism torchtitan's
 * PrepareModuleInput/SequenceParallel all-gather the input of wq, wk, wv (and
 * of w1, w3) once forward and reduce-scatter its gradient once backward, the
 * consumers' gradients summed locally first (torchtitan v0.2.2
 * torchtitan/models/llama3/infra/parallelize.py apply_tp; Korthikanti et al.
 * 2022, section 4.2.2: two all-gathers and two reduce-scatters per layer
 * forward, as many backward). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "costdb/cost.h"
#include "costdb/kernels.h"
#include "models/generators.h"
#include "sim/core/json.h"
#include "sim/ir/stack.h"
#include "sim/simulate.h"
#include "topologies/presets.h"

#define TP    8
#define MICRO 2 /* micro-batches: the builder's per-edge memo serves the second */

typedef struct fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
} fixture;

/* One Llama layer with heads query and kv_heads key/value heads, linear
 * outputs in linear_dtype (NULL: bf16). */
static void load_model(psim_model *m, const char *linear_dtype, int64_t heads, int64_t kv_heads) {
  psim_gen_tf_opts o;
  psim_gen_llama_opts_init(&o);
  o.layers = 1, o.hidden = 512, o.heads = heads, o.kv_heads = kv_heads, o.ffn = 1536;
  o.seq = 1024, o.vocab = 4096, o.batch = MICRO, o.flash = true;
  o.linear_dtype = linear_dtype;
  cJSON *doc = NULL;
  ck_assert_msg(psim_gen_llama(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("llama", doc, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* One DGX H100, no rank skew (every collective task is a collective); no
 * grouped-query attention unless kv_heads < heads. */
static void setup_heads(fixture *f, const char *linear_dtype, int64_t heads, int64_t kv_heads) {
  load_model(&f->m, linear_dtype, heads, kv_heads);
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = "dgx-h100";
  cJSON *doc = NULL;
  ck_assert_msg(psim_preset_cluster(&po, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_cluster_init(&f->c);
  ck_assert_msg(psim_cluster_from_json("h100", doc, &f->c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
  for (int32_t i = 0; i < f->c.n_types; i++)
    f->c.types[i].rt.coll_sync_s = 0;
  doc = cJSON_Parse("{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":8,"
                    "\"pp\":1,\"dp\":1,\"micro_batch\":1,\"sequence_parallel\":true}");
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_from_json("s", doc, &f->m, &f->c, &f->s) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(doc);
}

static void setup(fixture *f, const char *linear_dtype) {
  setup_heads(f, linear_dtype, 8, 8);
}

static void teardown(fixture *f) {
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static void simulate(fixture *f, psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  psim_sim_result_init(r);
  ck_assert_msg(psim_simulate(&f->m, &f->c, &f->s, &o, r) == PSIM_OK, "%s", psim_error_message());
}

/* Tensor-parallel collectives attributed to ops whose name ends in one of
 * the space-separated suffixes. */
static int count_colls(const fixture *f, const psim_sim_result *r, const char *suffixes) {
  const psim_taskgraph *g = r->graph;
  int n = 0;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    if (g->info[i].kind != PSIM_TASK_COLLECTIVE || g->info[i].pass != PSIM_TP_COMM_TP ||
        g->info[i].op < 0)
      continue;
    const char *name = f->m.ops[g->info[i].op].name, *dot = strrchr(name, '.');
    char want[64];
    snprintf(want, sizeof want, " %s ", dot ? dot + 1 : name);
    char list[128];
    snprintf(list, sizeof list, " %s ", suffixes);
    n += strstr(list, want) != NULL;
  }
  return n;
}

/* Bytes over links of the tensor-parallel collectives of ops named as in
 * count_colls (all of them: NULL). */
static double coll_bytes(const fixture *f, const psim_sim_result *r, const char *suffixes) {
  const psim_taskgraph *g = r->graph;
  ck_assert_ptr_nonnull(g->bytes);
  double sum = 0;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    if (g->info[i].kind != PSIM_TASK_COLLECTIVE || g->info[i].pass != PSIM_TP_COMM_TP)
      continue;
    if (suffixes) {
      const char *name = f->m.ops[g->info[i].op].name, *dot = strrchr(name, '.');
      char want[64], list[128];
      snprintf(want, sizeof want, " %s ", dot ? dot + 1 : name);
      snprintf(list, sizeof list, " %s ", suffixes);
      if (!strstr(list, want))
        continue;
    }
    sum += g->bytes[i];
  }
  return sum;
}

/* Tensor-parallel bytes of one iteration: linear outputs in the model's dtype
 * (linear_dtype "fp8": FP8 GEMMs), the stack's FP8 scaling. */
static double tp_bytes(const char *linear_dtype, bool tp_fp8_gather, bool rowwise,
                       double *ln2_bytes) {
  fixture f;
  setup(&f, linear_dtype);
  f.c.stack.fp8_tp_all_gather = tp_fp8_gather;
  f.c.stack.fp8_rowwise = rowwise;
  psim_sim_result r;
  simulate(&f, &r);
  double all = coll_bytes(&f, &r, NULL);
  if (ln2_bytes)
    *ln2_bytes = coll_bytes(&f, &r, "ln2");
  psim_sim_result_destroy(&r);
  teardown(&f);
  return all;
}

/* FP8 linears write BF16 (torchao Float8Linear, Transformer Engine): their
 * reduce-scatters and all-gathers move 2 bytes per element, as the BF16
 * model's (before: 1, the outputs were fp8). Under tensorwise scaling with
 * fp8_tp_all_gather the inputs of the FP8 GEMMs are cast before their
 * forward all-gather (torchao PrepareFloat8ModuleInput): the attention and
 * FFN norms' all-gathers (the same size; ln2's is its only collective) move
 * half, nothing else changes; rowwise gathers in BF16. */
START_TEST(fp8_linears_communicate_high_precision) {
  double ln2 = 0, bf16 = tp_bytes(NULL, true, false, &ln2);
  ck_assert(ln2 > 0 && bf16 > 4 * ln2);
  double rowwise = tp_bytes("fp8", true, true, NULL);
  ck_assert_msg(fabs(rowwise / bf16 - 1) < 1e-12, "rowwise %g bytes, bf16 %g", rowwise, bf16);
  double plain = tp_bytes("fp8", false, false, NULL);
  ck_assert_msg(fabs(plain / bf16 - 1) < 1e-12, "no fp8 gather %g bytes, bf16 %g", plain, bf16);
  double tensorwise = tp_bytes("fp8", true, false, NULL);
  ck_assert_msg(fabs(tensorwise / (bf16 - ln2) - 1) < 1e-12, "tensorwise %g bytes, closed form %g",
                tensorwise, bf16 - ln2);
}
END_TEST

/* torchtitan's profile casts tensorwise Float8 inputs before the TP
 * all-gather (torchtitan apply_tp with Float8ColwiseParallel /
 * PrepareFloat8ModuleInput at the benchmark commits 3faaa1a0d, 9dec370,
 * 820504e): on pytorch-fsdp2 the FP8 layer's TP bytes are the closed form
 * above, BF16's less the norms' halved gathers (before: the BF16 bytes). */
START_TEST(pytorch_fsdp2_gathers_fp8) {
  double ln2 = 0, bf16 = tp_bytes(NULL, false, false, &ln2);
  psim_stack st;
  ck_assert(psim_stack_builtin("pytorch-fsdp2", &st) == PSIM_OK);
  double fp8 = tp_bytes("fp8", st.fp8_tp_all_gather, st.fp8_rowwise, NULL);
  ck_assert_msg(fabs(fp8 / (bf16 - ln2) - 1) < 1e-12, "pytorch-fsdp2 %g bytes, closed form %g", fp8,
                bf16 - ln2);
}
END_TEST

/* Forward time of the FP8 GEMMs (the linears) of one simulation. */
static double fp8_fwd_gemm_s(const fixture *f, const psim_sim_result *r) {
  const psim_taskgraph *g = r->graph;
  double sum = 0;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    const psim_task_info *in = &g->info[i];
    if (in->kind == PSIM_TASK_COMPUTE && in->pass == PSIM_TP_FWD && in->op >= 0 &&
        f->m.ops[in->op].kind == PSIM_OP_MATMUL && f->m.ops[in->op].attrs.fp8)
      sum += g->duration_s[i];
  }
  return sum;
}

/* Tensorwise Float8 TP (fp8_tp_all_gather): PrepareFloat8ModuleInput casts the
 * sequence-sharded norm output once before the FP8 all-gather and wq, wk, wv (w1,
 * w3) take the FP8 tensor (torchao float8_tensor_parallel.py at eab345c), so of the
 * five whole-input casts per layer (3 + 2, each M x h elements at fp8_cast_bytes)
 * the forward spends two shard casts (M x h / tp): saves (5 - 2 / tp) M h casts per
 * simulated device and micro-batch. Rowwise (regular TP, cast after the gather) saves none.
 * Failed before the saving (equal times). */
START_TEST(tensorwise_tp_casts_the_shard_once) {
  double t[3];
  double cast_s = 0, devices = 0;
  for (int k = 0; k < 3; k++) {
    fixture f;
    setup(&f, "fp8");
    ck_assert(psim_stack_builtin("pytorch-fsdp2", &f.c.stack) == PSIM_OK);
    f.c.stack.fp8_tp_all_gather = k != 0;
    f.c.stack.fp8_rowwise = k == 2;
    const psim_device_type *dt = &f.c.types[f.c.devices[0].type];
    double mem_eff = dt->eff.mem > 0 ? dt->eff.mem : 1.0;
    cast_s = f.c.stack.fp8_cast_bytes / (dt->mem_bw * mem_eff);
    psim_sim_result r;
    simulate(&f, &r);
    t[k] = fp8_fwd_gemm_s(&f, &r);
    devices = r.simulated_devices; /* the ranks a folded build keeps */
    psim_sim_result_destroy(&r);
    teardown(&f);
  }
  double M = 1024, h = 512; /* tokens per micro-batch, hidden (load_model) */
  double saved = devices * MICRO * (5 - 2.0 / TP) * M * h * cast_s;
  ck_assert_msg(fabs((t[0] - t[1]) / saved - 1) < 1e-6, "saved %.9g s, closed form %.9g s",
                t[0] - t[1], saved);
  ck_assert_msg(t[2] > t[0], "rowwise %.9g s, no FP8 gather %.9g s", t[2], t[0]);
}
END_TEST

/* Backward: one reduce-scatter of the attention norm's output gradient for
 * wq, wk, wv together and one of the FFN norm's for w1, w3 (before: one per
 * consumer, 3 + 2), and one all-gather of the embedding output's gradient
 * summed over its consumers ln1 and residual1 (before: one each). The
 * layer's own collectives are Korthikanti's 8, plus that all-gather. */
START_TEST(one_collective_per_tensor) {
  fixture f;
  setup(&f, NULL);
  psim_sim_result r;
  simulate(&f, &r);
  ck_assert_int_eq(count_colls(&f, &r, "q k v"), MICRO);
  ck_assert_int_eq(count_colls(&f, &r, "gate up"), MICRO);
  ck_assert_int_eq(count_colls(&f, &r, "ln1 residual1"), 3 * MICRO);
  ck_assert_int_eq(count_colls(&f, &r,
                               "ln1 q k v attention proj residual1 ln2 gate up swiglu "
                               "down residual2"),
                   (8 + 1) * MICRO);
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* Grouped-query attention under tp 8 (16 query heads, 8 kv heads: one kv
 * head per rank): each rank computes and keeps its own kv heads, as
 * Megatron-Core (num_query_groups_per_partition) and torchtitan (wk, wv
 * ColwiseParallel) do, so the layer's tensor-parallel traffic is the
 * closed form of multi-head attention: the same collectives and bytes as
 * with 16 kv heads, nothing for K, V or their gradients (before: K and V
 * gathered whole over tp forward and their gradients all-reduced backward,
 * 4 more collectives per micro-batch). */
START_TEST(gqa_keeps_kv_heads_local) {
  double bytes[2];
  int kv_colls[2], all[2];
  const int64_t kv[2] = {8, 16};
  for (int i = 0; i < 2; i++) {
    fixture f;
    setup_heads(&f, NULL, 16, kv[i]);
    psim_sim_result r;
    simulate(&f, &r);
    bytes[i] = coll_bytes(&f, &r, NULL);
    kv_colls[i] = count_colls(&f, &r, "k v k_view v_view attention");
    all[i] = count_colls(&f, &r,
                         "ln1 q k v k_view v_view attention proj residual1 ln2 gate up swiglu "
                         "down residual2");
    psim_sim_result_destroy(&r);
    teardown(&f);
  }
  ck_assert_int_eq(kv_colls[0], 0); /* ln1's all-gather serves q, k, v: attributed to ln1 */
  ck_assert_int_eq(kv_colls[1], 0);
  ck_assert_int_eq(all[0], (8 + 1) * MICRO);
  ck_assert_msg(fabs(bytes[0] / bytes[1] - 1) < 1e-12, "GQA %g bytes, MHA %g", bytes[0], bytes[1]);
}
END_TEST

/* Exposed tensor-parallel time of one iteration with tp_overlap off or on
 * (torch's async TP), and the time of the device-0 forward matmul kernels
 * that overlap can hide the collectives behind. */
static double exposed_tp(bool overlap, double *matmul_s) {
  fixture f;
  setup_heads(&f, NULL, 16, 8);
  f.c.stack.tp_overlap = overlap;
  psim_sim_result r;
  simulate(&f, &r);
  const psim_taskgraph *g = r.graph;
  *matmul_s = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass != PSIM_TP_BWD &&
        g->info[i].device == 0 && g->info[i].op >= 0 &&
        f.m.ops[g->info[i].op].kind == PSIM_OP_MATMUL)
      *matmul_s += g->duration_s[i];
  double t = r.exposed_comm_s[0];
  psim_sim_result_destroy(&r);
  teardown(&f);
  return t;
}

/* Async TP (torch fused_all_gather_matmul / fused_matmul_reduce_scatter,
 * which torchtitan's enable_async_tensor_parallel turns on): the forward
 * all-gathers and reduce-scatters overlap their matmuls, so less TP time is
 * exposed than without, but no less than the collectives' time beyond the
 * matmuls they can hide behind (before: tp_overlap was not read, the same
 * exposed time). The chunked matmuls take no less than the unsplit ones. */
START_TEST(async_tp_overlaps_forward_matmuls) {
  double mm_sync = 0, mm_async = 0;
  double sync = exposed_tp(false, &mm_sync), async = exposed_tp(true, &mm_async);
  ck_assert_msg(mm_async >= mm_sync * (1 - 1e-12), "chunked matmuls %g s, unsplit %g s", mm_async,
                mm_sync);
  ck_assert_msg(async < 0.95 * sync, "exposed TP %g s with async TP, %g s without", async, sync);
  ck_assert_msg(async >= fmax(0, sync - mm_sync) - 1e-12, "exposed %g below %g - %g", async, sync,
                mm_sync);
}
END_TEST

/* Durations of the forward kernels of op o on device 0, micro-batch 0, in
 * issue order (at most 2); their count. */
static int fwd_kernels(const psim_sim_result *r, int32_t o, double *d) {
  const psim_taskgraph *g = r->graph;
  int n = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass == PSIM_TP_FWD &&
        g->info[i].device == 0 && g->info[i].micro == 0 && g->info[i].op == o && n < 2)
      d[n++] = g->duration_s[i];
  return n;
}

/* The cost model's time of device 0's shard of matmul o (one micro-batch) in
 * pass `pass`, with its rows (the sequence dim) cut to 1/rows_div. */
static double pass_cost(const fixture *f, int32_t o, int64_t rows_div, psim_pass pass) {
  const psim_op *op = &f->m.ops[o];
  int64_t ext[PSIM_MAX_OP_DIMS];
  for (int32_t i = 0; i < op->n_dims; i++) {
    int64_t size = f->m.dims[op->dims[i].dim].size, deg = f->s.ops[o].degree[i];
    if (f->m.dims[op->dims[i].dim].role == PSIM_ROLE_BATCH)
      deg *= MICRO; /* a micro-batch's rows */
    ck_assert(size % deg == 0);
    ext[i] = size / deg / (f->m.dims[op->dims[i].dim].role == PSIM_ROLE_SEQUENCE ? rows_div : 1);
  }
  psim_cost_origin origin;
  return psim_cost_compute(&f->c, 0, &f->m, op, ext, pass, NULL, &origin);
}

static double shard_cost(const fixture *f, int32_t o, int64_t rows_div) {
  return pass_cost(f, o, rows_div, PSIM_PASS_FWD);
}

/* Async TP's chunked GEMMs (torch fused_all_gather_matmul and
 * fused_matmul_reduce_scatter run one matmul per shard of the rows): a split
 * forward matmul's kernels last TP times the cost model's time of a GEMM with
 * 1/TP of the rows, no less than the unsplit shard (before: the unsplit time,
 * cut in two). With comm_sms set, the chunks that overlap the reduce-scatter
 * run on the SMs it leaves: n_sms / (n_sms - comm_sms) slower; the
 * all-gather's (copy engines) are unchanged. */
START_TEST(async_tp_chunks_are_small_gemms) {
  fixture f;
  setup(&f, NULL);
  psim_sim_result sync, async, sms;
  simulate(&f, &sync);
  f.c.stack.tp_overlap = true;
  simulate(&f, &async);
  f.c.stack.comm_sms = 16; /* TE userbuffers' "pipeline" reduce-scatter default num_sm */
  simulate(&f, &sms);
  int32_t n_sms = psim_kernels_arch(f.c.types[f.c.devices[0].type].name).n_sms;
  ck_assert_int_gt(n_sms, 16);
  int split = 0, scatters = 0;
  for (int32_t o = 0; o < f.m.n_ops; o++) {
    double d0[2], d1[2], d2[2];
    if (f.m.ops[o].kind != PSIM_OP_MATMUL || fwd_kernels(&async, o, d1) != 2)
      continue;
    ck_assert_int_eq(fwd_kernels(&sync, o, d0), 1);
    ck_assert_int_eq(fwd_kernels(&sms, o, d2), 2);
    double whole = shard_cost(&f, o, 1), chunk = shard_cost(&f, o, TP);
    ck_assert_msg(fabs(d0[0] / whole - 1) < 1e-9, "%s: %g s, cost %g s", f.m.ops[o].name, d0[0],
                  whole);
    ck_assert_msg(fabs((d1[0] + d1[1]) / (TP * chunk) - 1) < 1e-9, "%s: %g + %g s, %d x %g s",
                  f.m.ops[o].name, d1[0], d1[1], TP, chunk);
    ck_assert(d1[0] + d1[1] >= whole);
    bool scatter = d1[0] < d1[1]; /* the first chunk feeds the reduce-scatter */
    double slow = scatter ? (double)n_sms / (n_sms - 16) : 1.0;
    ck_assert_msg(fabs(d2[0] / d1[0] - 1) < 1e-9 && fabs(d2[1] / (d1[1] * slow) - 1) < 1e-9,
                  "%s: %g, %g s with comm_sms", f.m.ops[o].name, d2[0], d2[1]);
    split++, scatters += scatter;
  }
  ck_assert_int_eq(split, 8); /* wq wk wv w1 w3 output after gathers, wo w2 before scatters */
  ck_assert_int_eq(scatters, 2);
  psim_sim_result_destroy(&sync);
  psim_sim_result_destroy(&async);
  psim_sim_result_destroy(&sms);
  teardown(&f);
}
END_TEST

/* Megatron-Core runs Transformer Engine's userbuffers TP overlap (tp_comm_overlap:
 * every Megatron-Bridge Llama-3-70B recipe and MLPerf GPT-3 config), so the built-in
 * megatron-core profile turns tp_overlap on, with TE's 16 SMs for the pipelined
 * reduce-scatter (transformer_engine/pytorch/module/base.py initialize_ub
 * get_default_config @ d0067d0d): the same layer on that profile exposes less TP time
 * than with the flag off, no less than the forward matmuls leave (before: the flag
 * was off and both runs were the same). */
START_TEST(megatron_core_overlaps_tp) {
  fixture f;
  setup_heads(&f, NULL, 16, 8);
  ck_assert_int_eq(psim_stack_builtin("megatron-core", &f.c.stack), PSIM_OK);
  ck_assert(f.c.stack.tp_overlap);
  ck_assert_int_eq(f.c.stack.comm_sms, 16);
  psim_sim_result on, off;
  simulate(&f, &on);
  f.c.stack.tp_overlap = false;
  simulate(&f, &off);
  ck_assert_msg(on.exposed_comm_s[0] < 0.95 * off.exposed_comm_s[0],
                "exposed TP %g s with the profile's overlap, %g s without", on.exposed_comm_s[0],
                off.exposed_comm_s[0]);
  ck_assert(on.exposed_comm_s[0] > 0); /* not every collective hides behind a GEMM */
  psim_sim_result_destroy(&on);
  psim_sim_result_destroy(&off);
  teardown(&f);
}
END_TEST

/* Durations of the backward kernels of op o on device 0, micro-batch 0, in issue
 * order (at most 3); their count. */
static int bwd_kernels(const psim_sim_result *r, int32_t o, double *d) {
  const psim_taskgraph *g = r->graph;
  int n = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass == PSIM_TP_BWD &&
        g->info[i].device == 0 && g->info[i].micro == 0 && g->info[i].op == o && n < 3)
      d[n++] = g->duration_s[i];
  return n;
}

/* Exposed TP time and device 0's backward matmul time of the GQA layer on the
 * megatron-core profile with its backward pairs on or off. */
static double exposed_bwd(fixture *f, bool on, double *bwd_mm_s) {
  f->c.stack.tp_overlap_bwd = on;
  psim_sim_result r;
  simulate(f, &r);
  const psim_taskgraph *g = r.graph;
  *bwd_mm_s = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass == PSIM_TP_BWD &&
        g->info[i].device == 0 && g->info[i].op >= 0 &&
        f->m.ops[g->info[i].op].kind == PSIM_OP_MATMUL)
      *bwd_mm_s += g->duration_s[i];
  double t = r.exposed_comm_s[0];
  psim_sim_result_destroy(&r);
  return t;
}

/* Transformer Engine's backward TP overlap (tp_overlap_bwd; linear.py and
 * layernorm_linear.py `backward` @ 3ec87875): a row-parallel matmul (wo, w2) gets
 * its output gradient by a ring-exchange all-gather inside the dgrad GEMM, so its
 * backward is three kernels: the dgrad as TP GEMMs of 1/TP of the rows cut
 * (TP - 1) / TP and 1 / TP (the gather's), then the unsplit wgrad, half the
 * backward's time; a column-parallel one (wq, wk, wv, w1, w3, the output layer)
 * reduce-scatters its input gradient under the wgrad GEMM (ub_bulk_wgrad): the
 * dgrad half, then the wgrad half n_sms / (n_sms - 16) slower. So each pair ends
 * after max(GEMM, collective + GEMM / n) rather than GEMM + collective: less TP
 * time is exposed than without, no less than the backward matmuls can hide
 * (before: one backward kernel per shard, the collectives exposed). */
START_TEST(te_backward_pairs_overlap) {
  fixture f;
  setup(&f, NULL);
  ck_assert_int_eq(psim_stack_builtin("megatron-core", &f.c.stack), PSIM_OK);
  ck_assert(f.c.stack.tp_overlap && f.c.stack.tp_overlap_bwd);
  psim_sim_result off, on;
  f.c.stack.tp_overlap_bwd = false;
  simulate(&f, &off);
  f.c.stack.tp_overlap_bwd = true;
  simulate(&f, &on);
  int32_t n_sms = psim_kernels_arch(f.c.types[f.c.devices[0].type].name).n_sms;
  double slow = (double)n_sms / (n_sms - 16);
  int rows = 0, cols = 0;
  for (int32_t o = 0; o < f.m.n_ops; o++) {
    double d0[3], d1[3];
    if (f.m.ops[o].kind != PSIM_OP_MATMUL || bwd_kernels(&on, o, d1) < 2)
      continue;
    const char *name = f.m.ops[o].name;
    ck_assert_int_eq(bwd_kernels(&off, o, d0), 1);
    double whole = pass_cost(&f, o, 1, PSIM_PASS_BWD), chunk = pass_cost(&f, o, TP, PSIM_PASS_BWD);
    ck_assert_msg(fabs(d0[0] / whole - 1) < 1e-9, "%s: %g s, cost %g s", name, d0[0], whole);
    if (bwd_kernels(&on, o, d1) == 3) { /* dgrad ring exchange, then wgrad */
      ck_assert_msg(fabs((d1[0] + d1[1]) / (TP * chunk / 2) - 1) < 1e-9, "%s: %g + %g s", name,
                    d1[0], d1[1]);
      ck_assert_msg(fabs(d1[0] / ((TP - 1) * d1[1]) - 1) < 1e-9, "%s: %g, %g s", name, d1[0],
                    d1[1]);
      ck_assert_msg(fabs(d1[2] / (whole / 2) - 1) < 1e-9, "%s: wgrad %g s", name, d1[2]);
      rows++;
    } else { /* dgrad, then the wgrad under the bulk reduce-scatter */
      ck_assert_msg(fabs(d1[0] / (whole / 2) - 1) < 1e-9, "%s: dgrad %g s", name, d1[0]);
      ck_assert_msg(fabs(d1[1] / (slow * whole / 2) - 1) < 1e-9, "%s: wgrad %g s", name, d1[1]);
      cols++;
    }
  }
  ck_assert_int_eq(rows, 2); /* wo, w2 */
  ck_assert_int_eq(cols, 6); /* wq, wk, wv, w1, w3, output */
  psim_sim_result_destroy(&off);
  psim_sim_result_destroy(&on);
  double mm_off, mm_on;
  double e_off = exposed_bwd(&f, false, &mm_off), e_on = exposed_bwd(&f, true, &mm_on);
  ck_assert_msg(mm_on >= mm_off * (1 - 1e-12), "split %g s, unsplit %g s", mm_on, mm_off);
  ck_assert_msg(e_on < 0.95 * e_off, "exposed TP %g s with the backward pairs, %g s without", e_on,
                e_off);
  ck_assert_msg(e_on >= fmax(0, e_off - mm_off) - 1e-12, "exposed %g below %g - %g", e_on, e_off,
                mm_off);
  teardown(&f);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("tp_comm");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, one_collective_per_tensor);
  tcase_add_test(tc, tensorwise_tp_casts_the_shard_once);
  tcase_add_test(tc, fp8_linears_communicate_high_precision);
  tcase_add_test(tc, gqa_keeps_kv_heads_local);
  tcase_add_test(tc, pytorch_fsdp2_gathers_fp8);
  tcase_add_test(tc, async_tp_overlaps_forward_matmuls);
  tcase_add_test(tc, async_tp_chunks_are_small_gemms);
  tcase_add_test(tc, megatron_core_overlaps_tp);
  tcase_add_test(tc, te_backward_pairs_overlap);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
