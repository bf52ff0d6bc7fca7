/* test_precision.c - the strategy's "fp8" (psim_strategy.fp8, sim/builder/precision.c): FP8
 * linear layers as a property of the run, not of the model file. On with a BF16 model is the
 * model generated with linear_dtype "fp8" (the same GEMMs marked, the same figure to the
 * bit); off with the FP8 model is the BF16 model; the setting round-trips through the
 * strategy writer. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/generators.h"
#include "sim/core/json.h"
#include "sim/simulate.h"
#include "topologies/presets.h"

typedef struct fixture {
  psim_model m;
  psim_cluster c;
} fixture;

/* A two-layer Llama (GQA, SwiGLU) or a Qwen3-style MoE decoder, linears in linear_dtype. */
static void load_model(psim_model *m, const char *linear_dtype, bool moe) {
  cJSON *doc = NULL;
  if (moe) {
    psim_gen_tf_opts o;
    psim_gen_qwen3_moe_opts_init(&o);
    o.layers = 2, o.hidden = 512, o.heads = 8, o.kv_heads = 4, o.head_dim = 64;
    o.experts = 8, o.top_k = 2, o.moe_ffn = 256, o.seq = 512, o.vocab = 4096, o.batch = 8;
    o.linear_dtype = linear_dtype;
    ck_assert_msg(psim_gen_decoder(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  } else {
    psim_gen_tf_opts o;
    psim_gen_llama_opts_init(&o);
    o.layers = 2, o.hidden = 1024, o.heads = 8, o.kv_heads = 4, o.ffn = 3072;
    o.seq = 1024, o.vocab = 8192, o.batch = 8, o.flash = true;
    o.linear_dtype = linear_dtype;
    ck_assert_msg(psim_gen_llama(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  }
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("m", doc, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

static void setup(fixture *f, const char *linear_dtype, bool moe) {
  load_model(&f->m, linear_dtype, moe);
  psim_preset_opts po;
  psim_preset_opts_init(&po);
  po.preset = "dgx-h100";
  cJSON *doc = NULL;
  ck_assert_msg(psim_preset_cluster(&po, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_cluster_init(&f->c);
  ck_assert_msg(psim_cluster_from_json("h100", doc, &f->c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

static void teardown(fixture *f) {
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

/* tp 2, dp 4 with sequence parallelism and ZeRO 1 (ep 4 on the MoE); fp8: NULL (absent),
 * "true" or "false". */
static void strategy(fixture *f, const char *fp8, bool moe, psim_strategy *s) {
  char text[320];
  snprintf(text, sizeof text,
           "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"tp\":2,\"pp\":1,"
           "\"dp\":4,%s\"micro_batch\":1,\"sequence_parallel\":true,\"zero\":1%s%s}",
           moe ? "\"ep\":4,\"etp\":1," : "", fp8 ? ",\"fp8\":" : "", fp8 ? fp8 : "");
  cJSON *doc = cJSON_Parse(text);
  ck_assert(doc);
  psim_strategy_init(s);
  ck_assert_msg(psim_strategy_from_json("s", doc, &f->m, &f->c, s) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(doc);
}

static double simulate(fixture *f, const char *fp8, bool moe) {
  psim_strategy s;
  strategy(f, fp8, moe, &s);
  psim_sim_result r;
  psim_sim_result_init(&r);
  ck_assert_msg(psim_simulate(&f->m, &f->c, &s, NULL, &r) == PSIM_OK, "%s", psim_error_message());
  double t = r.iteration_time_s;
  psim_sim_result_destroy(&r);
  psim_strategy_destroy(&s);
  return t;
}

/* "fp8": true marks exactly the GEMMs linear_dtype "fp8" marks (op for op: the generators
 * emit the same ops either way), on the dense and the MoE decoder, and none outside the
 * blocks (the LM head stays BF16). Fails if the rule takes the head or misses a linear. */
static void same_gemms(bool moe) {
  fixture bf, f8;
  setup(&bf, NULL, moe);
  setup(&f8, "fp8", moe);
  ck_assert_int_eq(bf.m.n_ops, f8.m.n_ops);
  psim_strategy on;
  strategy(&bf, "true", moe, &on);
  int marked = 0;
  for (int32_t o = 0; o < bf.m.n_ops; o++) {
    ck_assert_str_eq(bf.m.ops[o].name, f8.m.ops[o].name);
    ck_assert_msg(psim_strategy_op_fp8(&on, &bf.m, o) == f8.m.ops[o].attrs.fp8, "op %s",
                  bf.m.ops[o].name);
    ck_assert(!bf.m.ops[o].attrs.fp8);
    marked += f8.m.ops[o].attrs.fp8;
  }
  ck_assert_int_gt(marked, 8);
  psim_strategy_destroy(&on);
  teardown(&bf);
  teardown(&f8);
}

START_TEST(fp8_on_marks_the_generators_linears) {
  same_gemms(false);
  same_gemms(true);
}
END_TEST

/* The figures: on over BF16 == the FP8 model as it is, off over FP8 == the BF16 model, to the
 * bit; and FP8 GEMMs (twice the dense rate on H100) make the run faster. */
static void same_figures(bool moe) {
  fixture bf, f8;
  setup(&bf, NULL, moe);
  setup(&f8, "fp8", moe);
  double t_bf = simulate(&bf, NULL, moe), t_f8 = simulate(&f8, NULL, moe);
  ck_assert_msg(t_f8 < t_bf, "fp8 %.9g s, bf16 %.9g s", t_f8, t_bf);
  ck_assert_msg(simulate(&bf, "true", moe) == t_f8, "on %.17g s, fp8 model %.17g s",
                simulate(&bf, "true", moe), t_f8);
  ck_assert_msg(simulate(&f8, "false", moe) == t_bf, "off %.17g s, bf16 model %.17g s",
                simulate(&f8, "false", moe), t_bf);
  ck_assert(simulate(&bf, "false", moe) == t_bf && simulate(&f8, "true", moe) == t_f8);
  teardown(&bf);
  teardown(&f8);
}

START_TEST(fp8_setting_equals_the_generated_model) {
  same_figures(false);
  same_figures(true);
}
END_TEST

/* The writer keeps the setting (absent stays absent: older files byte-identical). */
START_TEST(fp8_round_trips) {
  fixture f;
  setup(&f, NULL, false);
  const char *vals[] = {NULL, "true", "false"};
  const int8_t want[] = {PSIM_FP8_MODEL, PSIM_FP8_ON, PSIM_FP8_OFF};
  for (int i = 0; i < 3; i++) {
    psim_strategy s, back;
    strategy(&f, vals[i], false, &s);
    ck_assert_int_eq(s.fp8, want[i]);
    cJSON *doc = NULL;
    ck_assert(psim_strategy_to_json(&s, &f.m, &f.c, &doc) == PSIM_OK);
    ck_assert((cJSON_GetObjectItemCaseSensitive(doc, "fp8") != NULL) == (vals[i] != NULL));
    psim_strategy_init(&back);
    ck_assert_msg(psim_strategy_from_json("w", doc, &f.m, &f.c, &back) == PSIM_OK, "%s",
                  psim_error_message());
    ck_assert(psim_strategy_equal(&s, &back));
    cJSON_Delete(doc);
    psim_strategy_destroy(&s);
    psim_strategy_destroy(&back);
  }
  teardown(&f);
}
END_TEST

int main(void) {
  Suite *su = suite_create("precision");
  TCase *tc = tcase_create("fp8");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, fp8_on_marks_the_generators_linears);
  tcase_add_test(tc, fp8_setting_equals_the_generated_model);
  tcase_add_test(tc, fp8_round_trips);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
