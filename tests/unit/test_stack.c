/* test_stack.c - software stack profiles (sim/ir/stack.h, docs/stacks.md) and
 * the kernels they select (costdb/kernels.h): closed forms of the flash
 * kernel, wave quantisation, FP8 casts and optimizer traffic; megatron-lm-2021
 * costs exactly the calibrated roofline; the shipped stacks/NAME.json equal the
 * built-ins; bad profiles fail naming file and JSON path. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "costdb/cost.h"
#include "costdb/kernels.h"
#include "include/plansim/plansim.h"
#include "models/generators.h"
#include "sim/core/json.h"
#include "sim/ir/cluster.h"
#include "sim/ir/stack.h"
#include "topologies/presets.h"

static psim_model model;
static psim_cluster cluster;

/* One-layer Llama-style model (flash attention, causal, seq 4096) on one DGX H100. */
static void setup(void) {
  psim_model_init(&model);
  psim_cluster_init(&cluster);
  psim_gen_tf_opts o;
  psim_gen_llama_opts_init(&o);
  o.layers = 1, o.hidden = 1024, o.heads = 8, o.kv_heads = 8, o.ffn = 4096, o.seq = 4096;
  o.vocab = 32000, o.batch = 8, o.flash = true, o.linear_dtype = "fp8";
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_gen_llama(&o, &doc), PSIM_OK);
  ck_assert_int_eq(psim_model_from_json("gen", doc, &model), PSIM_OK);
  cJSON_Delete(doc);
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = "dgx-h100";
  po.nodes = 1;
  ck_assert_int_eq(psim_preset_cluster(&po, &doc), PSIM_OK);
  ck_assert_int_eq(psim_cluster_from_json("dgx-h100", doc, &cluster), PSIM_OK);
  cJSON_Delete(doc);
}

static void teardown(void) {
  psim_cluster_destroy(&cluster);
  psim_model_destroy(&model);
}

static const psim_op *find_op(psim_op_kind kind, psim_dtype out_dtype) {
  for (int32_t i = 0; i < model.n_ops; i++) {
    const psim_op *op = &model.ops[i];
    bool fp8 = op->kind == PSIM_OP_MATMUL && op->attrs.fp8; /* FP8 GEMMs write BF16 */
    if (op->kind == kind && (fp8 ? PSIM_DTYPE_FP8 : model.tensors[op->out[0]].dtype) == out_dtype)
      return op;
  }
  ck_abort_msg("no such op");
  return NULL;
}

static void full_shard(const psim_op *op, int64_t *ext) {
  for (int32_t i = 0; i < op->n_dims; i++)
    ext[i] = model.dims[op->dims[i].dim].size;
}

static double cost(const psim_op *op, psim_pass pass) {
  int64_t ext[PSIM_MAX_OP_DIMS];
  full_shard(op, ext);
  psim_cost_origin origin;
  return psim_cost_compute(&cluster, 0, &model, op, ext, pass, NULL, &origin);
}

/* megatron-lm-2021 (built-in or zero value) costs the roofline of cost.h: the
 * calibrated stack is unchanged. */
START_TEST(base_is_roofline) {
  ck_assert_int_eq(psim_stack_builtin("megatron-lm-2021", &cluster.stack), PSIM_OK);
  ck_assert(!psim_cost_stack_active(&cluster.stack));
  const psim_device_type *t = &cluster.types[0];
  const psim_op *att = find_op(PSIM_OP_ATTENTION, PSIM_DTYPE_BF16);
  int64_t ext[PSIM_MAX_OP_DIMS];
  full_shard(att, ext);
  double f, b;
  psim_op_shard_work(&model, att, ext, PSIM_PASS_FWD, &f, &b);
  ck_assert_double_eq(cost(att, PSIM_PASS_FWD),
                      psim_cost_roofline(t, NULL, PSIM_DTYPE_BF16, true, f, b));
  for (const char *const *n = psim_stack_builtin_names(); *n; n++) {
    psim_stack s;
    ck_assert_int_eq(psim_stack_builtin(*n, &s), PSIM_OK);
    ck_assert(psim_cost_stack_active(&s) == (strcmp(*n, "megatron-lm-2021") != 0));
  }
}
END_TEST

/* The flash kernel: FLOPs at peak x published efficiency x the fitted scale,
 * plus the stack's launch overhead (FlashAttention-3 on Hopper, seq_kv 4096). */
START_TEST(flash_closed_form) {
  ck_assert_int_eq(psim_stack_builtin("megatron-core", &cluster.stack), PSIM_OK);
  const psim_device_type *t = &cluster.types[0];
  const psim_op *att = find_op(PSIM_OP_ATTENTION, PSIM_DTYPE_BF16);
  double attn, gemm;
  psim_stack_scales(&cluster.stack, t->name, &attn, &gemm);
  ck_assert_double_eq(attn, 1.00); /* the h100 fit, not the stack's 0.40 */
  psim_gpu_arch a = psim_kernels_arch(t->name);
  ck_assert_int_eq(a.sm, 90);
  int64_t ext[PSIM_MAX_OP_DIMS];
  full_shard(att, ext);
  for (int p = 0; p < PSIM_PASS_COUNT; p++) {
    double f, b;
    psim_op_shard_work(&model, att, ext, (psim_pass)p, &f, &b);
    double eff = (p == 0 ? 0.64 : 0.50) * 4096 / (4096 + 240.0) * attn;
    double want = f / (989e12 * eff) + (p == 0 ? 1 : 2) * 5e-6;
    ck_assert_double_eq_tol(cost(att, (psim_pass)p), want, want * 1e-12);
  }
  /* FA3 needs Hopper: version 3 on Ampere is FlashAttention-2 */
  psim_gpu_arch amp = psim_kernels_arch("a100-80g");
  ck_assert_double_eq(psim_kernels_flash_eff(3, &amp, PSIM_PASS_FWD, 1e9),
                      psim_kernels_flash_eff(2, &amp, PSIM_PASS_FWD, 1e9));
  ck_assert_double_eq(psim_kernels_flash_eff(0, &a, PSIM_PASS_FWD, 4096), 0);
}
END_TEST

/* Waves: tiles / (ceil(tiles / SMs) SMs) once a GEMM fills a wave. */
START_TEST(wave_quantisation) {
  psim_gpu_arch h = psim_kernels_arch("h100");
  double tile = 128.0 * 256.0;
  ck_assert_double_eq(psim_kernels_wave_eff(&h, 132 * tile), 1.0);
  ck_assert_double_eq(psim_kernels_wave_eff(&h, 133 * tile), 133.0 / 264.0);
  ck_assert_double_eq(psim_kernels_wave_eff(&h, 100 * tile), 1.0); /* split-K */
  ck_assert_double_eq(psim_kernels_wave_eff(&h, 264 * tile + 1), 265.0 / 396.0);
  psim_gpu_arch none = psim_kernels_arch("k80");
  ck_assert_double_eq(psim_kernels_wave_eff(&none, 133 * tile), 1.0);
  ck_assert_int_eq(psim_kernels_arch("gb300").n_sms, 160);
}
END_TEST

/* An FP8 GEMM pays its casts: forward both inputs, backward the output
 * gradient, fp8_cast_bytes per element at the memory roofline, one launch each. */
START_TEST(fp8_casts) {
  ck_assert_int_eq(psim_stack_builtin("megatron-core", &cluster.stack), PSIM_OK);
  const psim_device_type *t = &cluster.types[0];
  const psim_op *mm = find_op(PSIM_OP_MATMUL, PSIM_DTYPE_FP8);
  double with[2] = {cost(mm, PSIM_PASS_FWD), cost(mm, PSIM_PASS_BWD)};
  cluster.stack.fp8_cast_bytes = 0;
  double without[2] = {cost(mm, PSIM_PASS_FWD), cost(mm, PSIM_PASS_BWD)};
  double in = psim_tensor_elems(&model, &model.tensors[mm->in[0]]) +
              psim_tensor_elems(&model, &model.tensors[mm->in[1]]);
  double out = psim_tensor_elems(&model, &model.tensors[mm->out[0]]);
  double bw = t->mem_bw * t->eff.mem;
  ck_assert_double_eq_tol(with[0] - without[0], in * 4 / bw + 2 * 5e-6, 1e-12);
  ck_assert_double_eq_tol(with[1] - without[1], out * 4 / bw + 5e-6, 1e-12);
  cluster.stack.fp8_scale_s = 1e-5; /* casts off, scaling kernels on: 2 launches fwd */
  ck_assert_double_eq_tol(cost(mm, PSIM_PASS_FWD) - without[0], 1e-5 + 2 * 5e-6, 1e-12);
}
END_TEST

/* Rowwise scaling recasts in the backward: 2 out + in elements, 4 launches (the
 * forward casts are tensorwise's: both inputs, 2 launches). */
START_TEST(fp8_rowwise_casts) {
  ck_assert_int_eq(psim_stack_builtin("megatron-core", &cluster.stack), PSIM_OK);
  const psim_device_type *t = &cluster.types[0];
  const psim_op *mm = find_op(PSIM_OP_MATMUL, PSIM_DTYPE_FP8);
  cluster.stack.fp8_rowwise = true;
  double with[2] = {cost(mm, PSIM_PASS_FWD), cost(mm, PSIM_PASS_BWD)};
  cluster.stack.fp8_cast_bytes = 0;
  double without[2] = {cost(mm, PSIM_PASS_FWD), cost(mm, PSIM_PASS_BWD)};
  double in = psim_tensor_elems(&model, &model.tensors[mm->in[0]]) +
              psim_tensor_elems(&model, &model.tensors[mm->in[1]]);
  double out = psim_tensor_elems(&model, &model.tensors[mm->out[0]]);
  double bw = t->mem_bw * t->eff.mem;
  ck_assert_double_eq_tol(with[0] - without[0], in * 4 / bw + 2 * 5e-6, 1e-12);
  ck_assert_double_eq_tol(with[1] - without[1], (2 * out + in) * 4 / bw + 4 * 5e-6, 1e-12);
}
END_TEST

/* The rowwise-scaled GEMM itself runs at psim_kernels_fp8_rowwise_rate of the
 * tensorwise one (0.81 on H100: torchao's published Llama3-8B runs,
 * costdb/kernels.c): casts off, a compute-bound FP8 GEMM's time less its one
 * launch is tensorwise's divided by the rate, forward and backward. */
START_TEST(fp8_rowwise_gemm_rate) {
  ck_assert_int_eq(psim_stack_builtin("pytorch-fsdp2", &cluster.stack), PSIM_OK);
  cluster.stack.fp8_cast_bytes = 0;
  cluster.stack.fp8_scale_s = 0;
  double launch = cluster.stack.launch_s;
  const psim_op *mm = find_op(PSIM_OP_MATMUL, PSIM_DTYPE_FP8);
  psim_gpu_arch a = psim_kernels_arch(cluster.types[0].name);
  double rate = psim_kernels_fp8_rowwise_rate(&a);
  ck_assert_double_eq_tol(rate, 0.81, 1e-12);
  double tw[2] = {cost(mm, PSIM_PASS_FWD), cost(mm, PSIM_PASS_BWD)};
  cluster.stack.fp8_rowwise = true;
  double rw[2] = {cost(mm, PSIM_PASS_FWD), cost(mm, PSIM_PASS_BWD)};
  int32_t k[2] = {psim_cost_kernels(&model, mm, PSIM_PASS_FWD),
                  psim_cost_kernels(&model, mm, PSIM_PASS_BWD)};
  for (int p = 0; p < 2; p++)
    ck_assert_double_eq_tol(rw[p] - k[p] * launch, (tw[p] - k[p] * launch) / rate, 1e-9 * tw[p]);
  cluster.stack.fp8_rowwise = false;
  ck_assert_double_eq(cost(mm, PSIM_PASS_FWD), tw[0]); /* tensorwise: no rate */
}
END_TEST

/* Eager PyTorch (no compile, no fused kernel): RMSNorm 36 / 76 bytes per element
 * in 8 / 12 kernels, SwiGLU 10 / 18 bytes in 2 / 3 (torchtitan's Python modules,
 * costdb/cost.c); compile or the fused flags give the model op's one kernel. */
START_TEST(eager_norm_and_swiglu) {
  ck_assert_int_eq(psim_stack_builtin("pytorch-fsdp2", &cluster.stack), PSIM_OK);
  cluster.stack.launch_s = 5e-6;
  const psim_device_type *t = &cluster.types[0];
  double bw = t->mem_bw * t->eff.mem;
  const psim_op *ops[2] = {find_op(PSIM_OP_RMSNORM, PSIM_DTYPE_BF16), NULL};
  for (int32_t i = 0; i < model.n_ops; i++)
    if (model.ops[i].fn && strcmp(model.ops[i].fn, "swiglu") == 0)
      ops[1] = &model.ops[i];
  ck_assert_ptr_nonnull(ops[1]);
  static const double bytes[2][2] = {{36, 76}, {10, 18}}, kernels[2][2] = {{8, 12}, {2, 3}};
  for (int k = 0; k < 2; k++) {
    double elems = psim_tensor_elems(&model, &model.tensors[ops[k]->out[0]]);
    for (int p = 0; p < PSIM_PASS_COUNT; p++) {
      cluster.stack.compile = true;
      double fused = cost(ops[k], (psim_pass)p);
      cluster.stack.compile = false;
      double want = elems * bytes[k][p] / bw + kernels[k][p] * 5e-6;
      ck_assert_double_eq_tol(cost(ops[k], (psim_pass)p), want, want * 1e-12);
      ck_assert(fused < want);
      cluster.stack.fused_norm = cluster.stack.fused_act = true;
      ck_assert_double_eq(cost(ops[k], (psim_pass)p), fused);
      cluster.stack.fused_norm = cluster.stack.fused_act = false;
    }
  }
}
END_TEST

/* Optimizer traffic per implementation: 46 (Megatron), 32 (torch fused), 84
 * (foreach) bytes per parameter at the memory roofline. */
START_TEST(optimizer_bytes) {
  const psim_device_type *t = &cluster.types[0];
  double n = 1e9, bw = t->mem_bw * t->eff.mem;
  static const double bytes[] = {46, 32, 84};
  for (int i = 0; i < 3; i++) {
    memset(&cluster.stack, 0, sizeof cluster.stack);
    cluster.stack.optimizer = (psim_optim_impl)i;
    double want = fmax(10 * n / t->peak_flops[PSIM_DTYPE_FP32], bytes[i] * n / bw) + t->launch_s +
                  t->rt.iteration_s;
    ck_assert_double_eq_tol(psim_cost_optimizer(&cluster, 0, n, NULL), want, want * 1e-12);
  }
}
END_TEST

static void same_stack(const psim_stack *a, const psim_stack *b) {
  ck_assert_int_eq(a->fp8_tp_all_gather, b->fp8_tp_all_gather);
  ck_assert_str_eq(a->name, b->name);
  ck_assert_double_eq(a->launch_s, b->launch_s);
  ck_assert_int_eq(a->flash_version, b->flash_version);
  ck_assert_double_eq(a->attn_scale, b->attn_scale);
  ck_assert_double_eq(a->gemm_scale, b->gemm_scale);
  ck_assert(a->fused_norm == b->fused_norm && a->fused_act == b->fused_act);
  ck_assert_double_eq(a->fp8_cast_bytes, b->fp8_cast_bytes);
  ck_assert_double_eq(a->fp8_scale_s, b->fp8_scale_s);
  ck_assert_int_eq(a->optimizer, b->optimizer);
  ck_assert(a->wave_quant == b->wave_quant && a->dp_overlap == b->dp_overlap);
  ck_assert(a->tp_overlap == b->tp_overlap && a->pp_overlap == b->pp_overlap);
  ck_assert_int_eq(a->comm_sms, b->comm_sms);
  ck_assert(a->cuda_graphs == b->cuda_graphs && a->compile == b->compile);
  ck_assert_int_eq(a->n_fit, b->n_fit);
  for (int32_t i = 0; i < a->n_fit; i++) {
    ck_assert_str_eq(a->fit[i].type, b->fit[i].type);
    ck_assert_double_eq(a->fit[i].attn_scale, b->fit[i].attn_scale);
    ck_assert_double_eq(a->fit[i].gemm_scale, b->fit[i].gemm_scale);
  }
}

/* The shipped profiles are the built-ins, written out for users to copy. */
START_TEST(shipped_files) {
  for (const char *const *n = psim_stack_builtin_names(); *n; n++) {
    char path[512];
    snprintf(path, sizeof path, "%s/stacks/%s.json", PSIM_SOURCE_ROOT, *n);
    psim_stack a, b;
    ck_assert_int_eq(psim_stack_builtin(*n, &a), PSIM_OK);
    ck_assert_msg(psim_stack_select(path, &b) == PSIM_OK, "%s", psim_error_message());
    same_stack(&a, &b);
  }
}
END_TEST

static const char *load_error(const char *text) {
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_json_parse("p.json", text, strlen(text), &doc), PSIM_OK);
  psim_stack s;
  psim_status st = psim_stack_from_json("p.json", doc, &s);
  cJSON_Delete(doc);
  ck_assert_int_eq(st, PSIM_EINPUT);
  return psim_error_message();
}

START_TEST(bad_profiles) {
  ck_assert_ptr_nonnull(strstr(load_error("{\"format\":\"plansim.stack/1\",\"name\":\"x\","
                                          "\"flash\":2}"),
                               "flash"));
  ck_assert_ptr_nonnull(strstr(load_error("{\"format\":\"plansim.stack/1\",\"name\":\"x\","
                                          "\"optimizer\":\"adam\"}"),
                               "optimizer"));
  ck_assert_ptr_nonnull(strstr(load_error("{\"format\":\"plansim.stack/1\",\"name\":\"x\","
                                          "\"base\":\"nope\"}"),
                               "base"));
  ck_assert_ptr_nonnull(strstr(load_error("{\"format\":\"plansim.stack/1\",\"name\":\"x\","
                                          "\"fit\":{\"h100\":{\"gemm_scale\":0}}}"),
                               "fit.h100"));
  ck_assert_ptr_nonnull(strstr(load_error("{\"format\":\"plansim.stack/1\",\"name\":\"x\","
                                          "\"fp8_scaling\":\"blockwise\"}"),
                               "fp8_scaling"));
  ck_assert_ptr_nonnull(
      strstr(load_error("{\"format\":\"plansim.stack/2\",\"name\":\"x\"}"), "plansim.stack/1"));
  psim_stack s;
  ck_assert_int_eq(psim_stack_select("no-such-stack", &s), PSIM_EINPUT);
  /* a cluster file's "stack" names its path */
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = "dgx-h100";
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_preset_cluster(&po, &doc), PSIM_OK);
  cJSON_AddStringToObject(doc, "stack", "nope");
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_int_eq(psim_cluster_from_json("c.json", doc, &c), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "stack"));
  cJSON_ReplaceItemInObject(doc, "stack", cJSON_CreateString("pytorch-fsdp2"));
  ck_assert_int_eq(psim_cluster_from_json("c.json", doc, &c), PSIM_OK);
  ck_assert_str_eq(psim_stack_name(&c.stack), "pytorch-fsdp2");
  psim_cluster_destroy(&c);
  cJSON_Delete(doc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("stack");
  TCase *tc = tcase_create("stack");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, base_is_roofline);
  tcase_add_test(tc, flash_closed_form);
  tcase_add_test(tc, wave_quantisation);
  tcase_add_test(tc, fp8_casts);
  tcase_add_test(tc, fp8_rowwise_casts);
  tcase_add_test(tc, fp8_rowwise_gemm_rate);
  tcase_add_test(tc, eager_norm_and_swiglu);
  tcase_add_test(tc, optimizer_bytes);
  tcase_add_test(tc, shipped_files);
  tcase_add_test(tc, bad_profiles);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
