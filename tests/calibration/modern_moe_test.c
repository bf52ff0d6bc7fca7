/* modern_moe_test.c - Megatron-Bridge's MoE rows as modern_moe.c reads them:
 * the model built from the CSV's architecture columns has the published
 * parameter count, the expert degrees come from the row, and the interleaved
 * uneven DeepSeek-V3 layouts are refused with the reason. Skipped (77) when
 * ../shared/calibration/modern is absent. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "modern.h"
#include "sim/core/alloc.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

static modern_rows rows;

static const modern_row *first(const char *model, bool supported) {
  for (int i = 0; i < rows.n; i++)
    if (strcmp(rows.v[i].model, model) == 0 && (rows.v[i].unsupported[0] == '\0') == supported)
      return &rows.v[i];
  return NULL;
}

static double params_of(const modern_row *r) {
  cJSON *doc = NULL;
  ck_assert_int_eq(modern_moe_model(r, &doc), PSIM_OK);
  psim_model m;
  psim_model_init(&m);
  ck_assert_int_eq(psim_model_from_json("moe", doc, &m), PSIM_OK);
  double n = m.n_params;
  psim_model_destroy(&m);
  cJSON_Delete(doc);
  return n;
}

START_TEST(qwen3_30b_a3b_from_columns) {
  /* huggingface.co/Qwen/Qwen3-30B-A3B model card: 30.5 B parameters in total */
  const modern_row *r = first("Qwen3_30B_a3B", true);
  ck_assert_ptr_nonnull(r);
  ck_assert_str_eq(r->source, "megatron-bridge-moe");
  ck_assert_int_eq(r->moe.experts, 128);
  ck_assert_int_eq(r->moe.ep, 8);
  int with_etp = 0; /* recipe_preset_overrides' expert_tensor_parallel_size 1, else 0 = tp */
  for (int i = 0; i < rows.n; i++)
    if (rows.v[i].moe.experts == 128) {
      ck_assert(rows.v[i].moe.etp == 0 || rows.v[i].moe.etp == 1);
      with_etp += rows.v[i].moe.etp == 1;
    }
  ck_assert_int_gt(with_etp, 0);
  ck_assert(r->moe.qk_norm && r->moe.kv_lora == 0);
  double n = params_of(r);
  ck_assert_msg(fabs(n / 30.5e9 - 1) < 0.01, "%g", n);
}
END_TEST

START_TEST(deepseek_v3_from_columns) {
  /* huggingface.co/deepseek-ai/DeepSeek-V3 model card: 685 B = 671 B main model + 14 B
   * multi-token prediction module (the 26.x rows train with one MTP layer) */
  const modern_row *r = first("DeepSeekV3", true);
  ck_assert_ptr_nonnull(r);
  ck_assert_int_eq(r->moe.q_lora, 1536);
  ck_assert_int_eq(r->moe.kv_lora, 512);
  ck_assert_int_eq(r->moe.qk_rope, 64);
  ck_assert_int_eq(r->moe.head_dim, 128);
  ck_assert_int_eq(r->moe.dense_layers, 3);
  ck_assert_int_eq(r->moe.mtp, 1);
  double n = params_of(r);
  ck_assert_msg(fabs(n / 685e9 - 1) < 0.01, "%g", n);
}
END_TEST

START_TEST(deepseek_v3_recipe_layouts) {
  /* Megatron-Bridge's layout for 16 chunks, "Et*4|(t*4|)*14tmL": the chunks hold the 61
   * decoder layers and the MTP layer, 4 in the first chunk, 1 + MTP in the last; no layout
   * for 32 chunks (pp 8 x vp 4): those interleaved rows stay refused */
  int with_layout = 0, refused = 0;
  for (int i = 0; i < rows.n; i++) {
    const modern_row *r = &rows.v[i];
    if (r->moe.kv_lora == 0)
      continue;
    char text[64];
    if (!modern_moe_layout(r, text, sizeof text)) {
      ck_assert_int_eq(r->pp * r->vp, 32);
      ck_assert_ptr_nonnull(strstr(r->unsupported, "no recipe layout"));
      refused++;
      continue;
    }
    int32_t n = 0, *sizes = NULL, n_t = 0, n_m = 0;
    ck_assert_msg(psim_pipeline_layout_parse(text, r->pp, &n, &sizes, &n_t, &n_m) == PSIM_OK,
                  "%s: %s", text, psim_error_message());
    ck_assert_int_eq(n, r->pp * (r->vp > 1 ? r->vp : 1));
    ck_assert_int_eq(n_t, r->layers);
    ck_assert_int_eq(n_m, r->moe.mtp);
    ck_assert_int_eq(sizes[n - 1], 64 / n - 3 + r->moe.mtp);
    ck_assert_int_eq(sizes[0], 64 / n);
    psim_free(sizes);
    ck_assert(strstr(r->unsupported, "uneven") == NULL); /* opt-in: PSIM_MODERN_MOE_INTERLEAVED */
    with_layout++;
  }
  ck_assert_int_gt(with_layout, 20);
  ck_assert_int_gt(refused, 0);
}
END_TEST

START_TEST(benchmark_routing_forced_balanced) {
  /* Megatron-Bridge scripts/performance/utils/overrides.py (set_user_overrides): dropless
   * benchmarks set moe_router_force_load_balancing = True, token-drop ones False; so every
   * dropless row routes uniformly and every token-drop row keeps its capacity */
  int dropless = 0, tokendrop = 0;
  for (int i = 0; i < rows.n; i++) {
    const modern_moe *e = &rows.v[i].moe;
    if (e->experts == 0)
      continue;
    ck_assert(e->balanced == !e->tokendrop);
    dropless += !e->tokendrop;
    tokendrop += e->tokendrop;
  }
  ck_assert_int_gt(dropless, 0);
  ck_assert_int_gt(tokendrop, 0);
  /* B300 rows are simulated on the dgx-b300 preset (no longer refused) */
  ck_assert_str_eq(modern_preset_of("B300"), "dgx-b300");
}
END_TEST

int main(void) {
  if (modern_read_all(PSIM_SOURCE_ROOT "/../shared/calibration/modern", &rows) == 4)
    return 77;
  Suite *s = suite_create("modern_moe");
  TCase *t = tcase_create("all");
  tcase_add_test(t, qwen3_30b_a3b_from_columns);
  tcase_add_test(t, deepseek_v3_from_columns);
  tcase_add_test(t, benchmark_routing_forced_balanced);
  tcase_add_test(t, deepseek_v3_recipe_layouts);
  suite_add_tcase(s, t);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  modern_rows_destroy(&rows);
  return failed ? 1 : 0;
}
