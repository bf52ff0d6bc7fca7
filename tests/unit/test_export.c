/* test_export.c - exporters (search/plan/export.c) and sweep rows (search/sweep/sweep_row.c).
 *
 * The Megatron matcher is checked against every Megatron layout of a small GPT on 8 GPUs: it
 * must recover tp, pp, dp and the micro-batch from the explicit strategy alone (template info
 * cleared), and refuse a strategy with one op moved, naming that op. GSPMD specs are checked
 * against Megatron-LM's layer rules (column-parallel QKV and fc1, row-parallel projection and
 * fc2, vocab-parallel embedding). Sweep rows must survive JSON Lines round trips and quote
 * CSV fields. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "search/plan/export.h"
#include "search/sweep/sweep.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

#define ROOT PSIM_SOURCE_ROOT "/"

static psim_model M;
static psim_cluster C;

static void setup(void) {
  psim_json_init_hooks();
  psim_model_init(&M);
  psim_cluster_init(&C);
  ck_assert_msg(psim_model_load(ROOT "tests/data/tiny-gpt.json", &M) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert_msg(psim_cluster_load(ROOT "topologies/dgx-a100-x1.json", &C) == PSIM_OK, "%s",
                psim_error_message());
}

static void teardown(void) {
  psim_cluster_destroy(&C);
  psim_model_destroy(&M);
}

/* Every valid (tp, pp, dp, micro_batch) of tiny-gpt (4 heads, 4 layers, batch 8) on 8 GPUs. */
START_TEST(megatron_matcher_recovers_every_layout) {
  int tried = 0;
  for (int tp = 1; tp <= 4; tp *= 2)
    for (int pp = 1; pp <= 4; pp *= 2)
      for (int dp = 1; tp * pp * dp <= 8; dp *= 2)
        for (int mb = 1; mb * dp <= 8; mb *= 2) {
          psim_megatron_opts o;
          psim_megatron_opts_init(&o);
          o.tp = tp, o.pp = pp, o.dp = dp, o.micro_batch = mb;
          psim_strategy s;
          if (psim_strategy_megatron(&M, &C, &o, &s) != PSIM_OK) {
            psim_strategy_destroy(&s);
            psim_error_clear();
            continue;
          }
          memset(&s.tmpl, 0, sizeof s.tmpl); /* the matcher must infer the layout */
          psim_megatron_opts got;
          ck_assert_msg(psim_export_match_megatron(&M, &C, &s, &got) == PSIM_OK,
                        "tp %d pp %d dp %d mb %d: %s", tp, pp, dp, mb, psim_error_message());
          ck_assert_int_eq(got.tp, tp);
          ck_assert_int_eq(got.pp, pp);
          ck_assert_int_eq(got.dp, dp);
          ck_assert_int_eq(got.micro_batch, mb);
          psim_strategy_destroy(&s);
          tried++;
        }
  ck_assert_int_ge(tried, 20);
}
END_TEST

START_TEST(megatron_refuses_a_moved_op) {
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 2, o.pp = 1, o.dp = 4;
  psim_strategy s;
  ck_assert(psim_strategy_megatron(&M, &C, &o, &s) == PSIM_OK);
  int32_t op = psim_model_find_op(&M, "layer.2.fc2");
  ck_assert_int_ge(op, 0);
  int32_t *dv; /* swap two devices of one op: a per-op placement */
  ck_assert(psim_op_config_writable(&s.ops[op], s.ops[op].n_devices, &dv) == PSIM_OK);
  int32_t t = dv[0];
  dv[0] = dv[1];
  dv[1] = t;
  psim_megatron_opts got;
  ck_assert_int_eq(psim_export_match_megatron(&M, &C, &s, &got), PSIM_EFAILED);
  ck_assert_msg(strstr(psim_error_message(), "'layer.2.fc2'"), "%s", psim_error_message());
  psim_strategy_destroy(&s);
}
END_TEST

/* Exports the strategy of d (model and cluster borrowed from M and C) in format f. */
static cJSON *export_doc(psim_plan_doc *d, psim_export_format f) {
  d->root = cJSON_CreateObject();
  d->model = M; /* borrowed: not destroyed below */
  d->cluster = C;
  char *text = NULL;
  size_t len = 0;
  ck_assert_msg(psim_export(d, f, &text, &len) == PSIM_OK, "%s", psim_error_message());
  cJSON *j = cJSON_Parse(text);
  ck_assert_ptr_nonnull(j);
  psim_free(text);
  cJSON_Delete(d->root);
  psim_strategy_destroy(&d->strategy);
  return j;
}

/* Exports a Megatron tp x dp strategy of tiny-gpt in format f. */
static cJSON *export_json(int tp, int dp, psim_export_format f) {
  psim_plan_doc d;
  psim_plan_doc_init(&d);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = tp, o.dp = dp;
  ck_assert(psim_strategy_megatron(&M, &C, &o, &d.strategy) == PSIM_OK);
  return export_doc(&d, f);
}

static void assert_spec(const cJSON *specs, const char *tensor, const char *want) {
  char *got = cJSON_PrintUnformatted(cJSON_GetObjectItem(specs, tensor));
  ck_assert_msg(got && strcmp(got, want) == 0, "%s: %s, want %s", tensor, got, want);
  cJSON_free(got);
}

/* The specs of Megatron-LM's layer rules for tp 4 x dp 2 on tiny-gpt. */
static void assert_megatron_specs(const cJSON *specs) {
  assert_spec(specs, "layer.0.wq", "[null,\"tp\",null]");  /* [h, n, d] column-parallel */
  assert_spec(specs, "layer.3.wo", "[\"tp\",null,null]");  /* [n, d, h] row-parallel */
  assert_spec(specs, "layer.1.w1", "[null,\"tp\"]");       /* [h, f] column-parallel */
  assert_spec(specs, "layer.1.w2", "[\"tp\",null]");       /* [f, h] row-parallel */
  assert_spec(specs, "wte", "[\"tp\",null]");              /* vocab-parallel */
  assert_spec(specs, "layer.0.ln1_g", "[null]");           /* replicated */
  assert_spec(specs, "layer.0.u", "[\"dp\",null,\"tp\"]"); /* fc1 output, ffn split */
  assert_spec(specs, "layer.0.p", "[\"dp\",null,null]");   /* after the all-reduce */
  assert_spec(specs, "logits", "[\"dp\",null,\"tp\"]");
}

START_TEST(gspmd_follows_megatron_layer_rules) {
  cJSON *j = export_json(4, 2, PSIM_EXPORT_GSPMD);
  assert_spec(cJSON_GetObjectItem(j, "mesh"), "shape", "[2,4]");
  assert_megatron_specs(cJSON_GetObjectItem(j, "partition_specs"));
  cJSON_Delete(j);
}
END_TEST

/* Megatron tp 4 x dp 2 given per op (its mesh dropped, as Alpa and MCMC plans
 * hold their strategies), the devices relabelled by perm, into d. */
static void per_op_megatron(const int32_t *perm, psim_plan_doc *d) {
  psim_plan_doc_init(d);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 4, o.dp = 2;
  ck_assert(psim_strategy_megatron(&M, &C, &o, &d->strategy) == PSIM_OK);
  memset(&d->strategy.mesh, 0, sizeof d->strategy.mesh);
  for (int32_t i = 0; i < d->strategy.n_ops; i++) {
    psim_op_config *cfg = &d->strategy.ops[i];
    int32_t *dv;
    ck_assert(psim_op_config_writable(cfg, cfg->n_devices, &dv) == PSIM_OK);
    for (int32_t j = 0; j < cfg->n_devices; j++)
      dv[j] = perm[dv[j]];
  }
}

/* The inferred mesh must give every tensor the spec the template's mesh gives it. */
static cJSON *export_per_op_megatron(const int32_t *perm) {
  psim_plan_doc d;
  per_op_megatron(perm, &d);
  return export_doc(&d, PSIM_EXPORT_GSPMD);
}

START_TEST(gspmd_infers_the_mesh_of_a_per_op_strategy) {
  static const int32_t same[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  cJSON *j = export_per_op_megatron(same);
  const cJSON *mesh = cJSON_GetObjectItem(j, "mesh");
  assert_spec(mesh, "axis_names", "[\"dp\",\"tp\"]");
  assert_spec(mesh, "shape", "[2,4]");
  assert_spec(mesh, "device_ids", "[0,1,2,3,4,5,6,7]");
  assert_megatron_specs(cJSON_GetObjectItem(j, "partition_specs"));
  cJSON_Delete(j);
  /* Device d of the template now sits at (d % 4) * 2 + d / 4: in device order
   * the tp coordinate is the slow one, so the mesh is tp 4 x dp 2. */
  static const int32_t transposed[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  j = export_per_op_megatron(transposed);
  mesh = cJSON_GetObjectItem(j, "mesh");
  assert_spec(mesh, "axis_names", "[\"tp\",\"dp\"]");
  assert_spec(mesh, "shape", "[4,2]");
  assert_spec(mesh, "device_ids", "[0,1,2,3,4,5,6,7]");
  assert_megatron_specs(cJSON_GetObjectItem(j, "partition_specs"));
  cJSON_Delete(j);
}
END_TEST

/* Every allocation of a gspmd export that infers the mesh may fail: the
 * export returns PSIM_ENOMEM (no crash, no leak under the sanitizers), or the
 * same text when the failure was recovered from (test_allocfail's method). */
START_TEST(gspmd_inference_survives_allocation_failures) {
  static const int32_t transposed[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  psim_plan_doc d;
  per_op_megatron(transposed, &d);
  d.model = M; /* borrowed */
  d.cluster = C;
  char *want = NULL, *got = NULL;
  size_t len = 0;
  ck_assert(psim_export(&d, PSIM_EXPORT_GSPMD, &want, &len) == PSIM_OK);
  long n = 1, enomem = 0;
  for (;; n++) {
    psim_alloc_fail_at(n);
    psim_status st = psim_export(&d, PSIM_EXPORT_GSPMD, &got, &len);
    bool reached = psim_alloc_fail_pending() == 0;
    psim_alloc_fail_at(0);
    if (st == PSIM_OK) {
      ck_assert_msg(strcmp(got, want) == 0, "allocation %ld failed: a different export", n);
      psim_free(got);
      if (!reached)
        break;
      continue;
    }
    ck_assert_msg(st == PSIM_ENOMEM && reached, "allocation %ld: %s", n, psim_error_message());
    enomem++;
    psim_error_clear();
  }
  ck_assert_int_gt(enomem, 10);
  psim_free(want);
  psim_strategy_destroy(&d.strategy);
}
END_TEST

/* Exports the strategy document `json` of tiny-gpt on 8 GPUs as gspmd. */
static cJSON *export_strategy(const char *json) {
  psim_plan_doc d;
  psim_plan_doc_init(&d);
  cJSON *root = cJSON_Parse(json);
  ck_assert_ptr_nonnull(root);
  ck_assert_msg(psim_strategy_from_json("test", root, &M, &C, &d.strategy) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(root);
  return export_doc(&d, PSIM_EXPORT_GSPMD);
}

/* Six devices where the sequence coordinate is the slow one: the prime
 * factors 2 x 3 in ascending order do not hold the ops, 3 x 2 does; a batch
 * split 6 ways over that mesh takes both axes, the batch's (dp) as the major. */
START_TEST(gspmd_tries_each_factorization_and_splits_over_several_axes) {
  cJSON *j = export_strategy(
      "{\"format\": \"plansim.strategy/1\", \"mesh\": {\"devices\": [0, 1, 2, 3, 4, 5]},"
      " \"ops\": {\"*\": {\"split\": {\"b\": 2, \"s\": 3}, \"devices\": [0, 2, 4, 1, 3, 5]},"
      " \"layer.1.*\": {\"split\": {\"b\": 2}, \"replicas\": 3, \"devices\": [0, 2, 4, 1, 3, 5]},"
      " \"layer.2.fc1\": {\"split\": {\"b\": 6}, \"devices\": [0, 2, 4, 1, 3, 5]}}}");
  const cJSON *mesh = cJSON_GetObjectItem(j, "mesh"),
              *specs = cJSON_GetObjectItem(j, "partition_specs");
  assert_spec(mesh, "axis_names", "[\"tp\",\"dp\"]");
  assert_spec(mesh, "shape", "[3,2]");
  assert_spec(mesh, "device_ids", "[0,1,2,3,4,5]");
  assert_spec(specs, "x0", "[\"dp\",\"tp\",null]");
  assert_spec(specs, "layer.1.u", "[\"dp\",null,null]");
  assert_spec(specs, "layer.2.u", "[[\"dp\",\"tp\"],null,null]");
  cJSON_Delete(j);
}
END_TEST

START_TEST(deepspeed_batch_arithmetic) {
  cJSON *j = export_json(1, 8, PSIM_EXPORT_DEEPSPEED);
  double tb = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "train_batch_size"));
  double mb = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "train_micro_batch_size_per_gpu"));
  double ga = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "gradient_accumulation_steps"));
  ck_assert(tb == 8 && tb == mb * ga * 8); /* DeepSpeed's rule: batch = micro x accum x dp */
  cJSON_Delete(j);
}
END_TEST

/* export --check (export_check.c): each format's own export is detected and read back with no
 * difference; a changed value, a missing and an extra setting are one difference each; and an
 * allocation failure anywhere is PSIM_ENOMEM, never a different answer. tiny-gpt, Megatron
 * tp 1 x pp 2 x dp 4 (what megatron and deepspeed-pipeline take; the others refuse it or the
 * model: tests/cli/export_matrix.sh reads every format back). The allocation failures run over
 * the megatron reader, the JSON one and the line reader (TOML, YAML, Python). */
static int32_t check_diff(const psim_plan_doc *d, psim_export_format f, const char *text) {
  char *report = NULL;
  size_t len = 0;
  int32_t diff = -1;
  ck_assert_msg(psim_export_check(d, f, text, &report, &len, &diff) == PSIM_OK, "%s",
                psim_error_message());
  psim_free(report);
  return diff;
}

START_TEST(check_reads_exports_back) {
  psim_plan_doc d;
  psim_plan_doc_init(&d);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 1, o.pp = 2, o.dp = 4;
  ck_assert(psim_strategy_megatron(&M, &C, &o, &d.strategy) == PSIM_OK);
  d.root = cJSON_Parse("{\"format\": \"plansim.plan/1\"}");
  d.model = M; /* borrowed */
  d.cluster = C;
  static const psim_export_format fs[] = {PSIM_EXPORT_MEGATRON, PSIM_EXPORT_DEEPSPEED_PIPELINE,
                                          PSIM_EXPORT_PLANSIM};
  for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) {
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(psim_export(&d, fs[i], &text, &len) == PSIM_OK, "%s", psim_error_message());
    psim_export_format g;
    ck_assert(psim_export_detect(text, &g) == PSIM_OK);
    ck_assert_int_eq(g, fs[i]);
    ck_assert_int_eq(check_diff(&d, fs[i], text), 0);
    psim_free(text);
  }
  static const char *const edited =
      "MEGATRON_ARGS=(\n  --tensor-model-parallel-size 4\n  --extra\n)\n";
  /* 1 value differs, 1 extra, and every other flag of the export missing */
  char *text = NULL;
  size_t len = 0;
  ck_assert(psim_export(&d, PSIM_EXPORT_MEGATRON, &text, &len) == PSIM_OK);
  int32_t flags = 0;
  for (const char *p = strstr(text, "\n  --"); p; p = strstr(p + 1, "\n  --"))
    flags++;
  ck_assert_int_eq(check_diff(&d, PSIM_EXPORT_MEGATRON, edited), 1 + 1 + (flags - 1));
  psim_free(text);
  static const psim_export_format failing[] = {PSIM_EXPORT_MEGATRON, PSIM_EXPORT_PLANSIM,
                                               PSIM_EXPORT_DEEPSPEED_PIPELINE};
  for (size_t k = 0; k < sizeof failing / sizeof *failing; k++) {
    psim_export_format f = failing[k];
    ck_assert(psim_export(&d, f, &text, &len) == PSIM_OK);
    for (long n = 1;; n++) { /* every allocation of the check fails once */
      psim_alloc_fail_at(n);
      char *report = NULL;
      int32_t diff = -1;
      psim_status st = psim_export_check(&d, f, text, &report, &len, &diff);
      bool reached = psim_alloc_fail_pending() == 0;
      psim_alloc_fail_at(0);
      psim_free(report);
      if (!reached) {
        ck_assert_int_eq(st, PSIM_OK);
        ck_assert_int_eq(diff, 0);
        break;
      }
      ck_assert_msg(st == PSIM_ENOMEM, "%s allocation %ld: %s", psim_export_format_name(f), n,
                    psim_error_message());
      psim_error_clear();
    }
    psim_free(text);
  }
  psim_export_format g;
  ck_assert_int_eq(psim_export_detect("hello", &g), PSIM_EINPUT);
  psim_error_clear();
  cJSON_Delete(d.root);
  psim_strategy_destroy(&d.strategy);
}
END_TEST

/* torchtitan's op-level selective AC (recompute "op") exports as its own setting,
 * mode "selective" with selective_ac_option "op" (torchtitan/models/llama3/
 * train_configs/llama3_8b.toml at 820504e), full recompute of every second layer
 * as selective_ac_option "2"; Megatron-LM has neither and refuses both. */
START_TEST(op_level_recompute_exports_to_torchtitan_only) {
  psim_model m;
  ck_assert_msg(psim_model_load(ROOT "models/llama2-7b.json", &m) == PSIM_OK, "%s",
                psim_error_message());
  psim_plan_doc d;
  psim_plan_doc_init(&d);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 1, o.pp = 1, o.dp = 8;
  o.zero_stage = 3;
  o.overlap_grad_reduce = true;
  o.recompute = PSIM_RECOMPUTE_OP;
  ck_assert_msg(psim_strategy_megatron(&m, &C, &o, &d.strategy) == PSIM_OK, "%s",
                psim_error_message());
  d.root = cJSON_Parse("{\"format\": \"plansim.plan/1\"}");
  d.model = m; /* borrowed */
  d.cluster = C;
  char *text = NULL;
  size_t len = 0;
  ck_assert_msg(psim_export(&d, PSIM_EXPORT_TORCHTITAN, &text, &len) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert_msg(strstr(text, "mode = \"selective\"\nselective_ac_option = \"op\"\n"), "%s", text);
  psim_free(text);
  text = NULL;
  ck_assert(psim_export(&d, PSIM_EXPORT_MEGATRON, &text, &len) != PSIM_OK);
  ck_assert_ptr_null(text);
  psim_error_clear();
  /* every second layer fully checkpointed: torchtitan's layer-level option "2" */
  d.strategy.recompute = PSIM_RECOMPUTE_FULL;
  d.strategy.recompute_every = 2;
  ck_assert_msg(psim_export(&d, PSIM_EXPORT_TORCHTITAN, &text, &len) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert_msg(strstr(text, "mode = \"selective\"\nselective_ac_option = \"2\"\n"), "%s", text);
  psim_free(text);
  text = NULL;
  ck_assert(psim_export(&d, PSIM_EXPORT_MEGATRON, &text, &len) != PSIM_OK);
  psim_error_clear();
  cJSON_Delete(d.root);
  psim_strategy_destroy(&d.strategy);
  psim_model_destroy(&m);
}
END_TEST

/* The plan's "fp8" (psim_strategy.fp8) over a BF16 model: Megatron-LM gets --bf16 and
 * --fp8-format hybrid, torchtitan the float8 converter, DeepSpeed refuses (no FP8 setting);
 * without it none of them. Before the strategy key the exports read FP8 from the model's dtype
 * only, so a model of FP8 linears (linear_dtype fp8, dtype bf16) exported as BF16. */
static char *export_text(psim_plan_doc *d, psim_export_format f) {
  char *text = NULL;
  size_t len = 0;
  psim_status st = psim_export(d, f, &text, &len);
  if (st != PSIM_OK)
    fprintf(stderr, "export %d: %s\n", (int)f, psim_error_message());
  psim_error_clear();
  return st == PSIM_OK ? text : NULL;
}

START_TEST(fp8_linears_export_as_fp8_training) {
  psim_model m;
  ck_assert_msg(psim_model_load(ROOT "models/llama2-7b.json", &m) == PSIM_OK, "%s",
                psim_error_message());
  psim_plan_doc d;
  psim_plan_doc_init(&d);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 2, o.pp = 1, o.dp = 4, o.sequence_parallel = true;
  o.zero_stage = 3, o.overlap_grad_reduce = true; /* torchtitan: FSDP2 beside tp (DDP is 1-D) */
  d.root = cJSON_Parse("{\"format\": \"plansim.plan/1\"}");
  d.model = m; /* borrowed */
  d.cluster = C;
  for (int on = 0; on < 2; on++) {
    o.fp8 = on ? PSIM_FP8_ON : PSIM_FP8_MODEL;
    ck_assert_msg(psim_strategy_megatron(&m, &C, &o, &d.strategy) == PSIM_OK, "%s",
                  psim_error_message());
    char *meg = export_text(&d, PSIM_EXPORT_MEGATRON),
         *tt = export_text(&d, PSIM_EXPORT_TORCHTITAN);
    ck_assert(meg && tt && strstr(meg, "--bf16\n"));
    ck_assert_msg((strstr(meg, "--fp8-format hybrid\n") != NULL) == on, "%s", meg);
    ck_assert_msg((strstr(tt, "quantize.linear.float8") != NULL) == on, "%s", tt);
    psim_free(meg);
    psim_free(tt);
    psim_strategy_destroy(&d.strategy);
  }
  /* DeepSpeed: plain data parallelism exports in BF16, refuses with FP8 linears */
  o.tp = 1, o.dp = 8, o.sequence_parallel = false;
  for (int on = 0; on < 2; on++) {
    o.fp8 = on ? PSIM_FP8_ON : PSIM_FP8_MODEL;
    ck_assert(psim_strategy_megatron(&m, &C, &o, &d.strategy) == PSIM_OK);
    char *ds = export_text(&d, PSIM_EXPORT_DEEPSPEED);
    ck_assert_msg((ds != NULL) == !on, "deepspeed %s with fp8 %d", ds ? "exported" : "refused", on);
    psim_free(ds);
    psim_strategy_destroy(&d.strategy);
  }
  cJSON_Delete(d.root);
  psim_model_destroy(&m);
}
END_TEST

START_TEST(format_names) {
  for (int f = 0; f < PSIM_EXPORT_COUNT; f++) {
    psim_export_format g;
    ck_assert(psim_export_format_parse(psim_export_format_name(f), &g) == PSIM_OK);
    ck_assert_int_eq(g, f);
  }
  psim_export_format g;
  ck_assert_int_eq(psim_export_format_parse("onnx", &g), PSIM_EINPUT);
}
END_TEST

static char *quote_with(void (*quote)(psim_sb *, const char *), const char *name) {
  psim_sb b = {0};
  quote(&b, name);
  char *text = NULL;
  size_t len = 0;
  ck_assert_int_eq(psim_sb_finish(&b, "test", &text, &len), PSIM_OK);
  return text;
}

/* issue 24: "x\necho INJECTED; #" as a model name put a command into the
 * Megatron script; op names went raw into FlexFlow's quoted strings. */
START_TEST(names_are_checked_and_quoted) {
  static const char *const refused[] = {"x\necho INJECTED; #",
                                        "a\rb",
                                        "esc\x1b[2J",
                                        "del\x7f",
                                        "\xff",
                                        "\xc0\xaf" /* overlong '/' */,
                                        "\xed\xa0\x80" /* a surrogate */,
                                        "cut\xe2\x82"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    ck_assert_int_eq(psim_export_check_name("model name", refused[i]), PSIM_EINPUT);
    ck_assert_msg(!strchr(psim_error_message(), '\n') && !strchr(psim_error_message(), 0x1b), "%s",
                  psim_error_message());
    psim_error_clear();
  }
  ck_assert_int_eq(psim_export_check_name("op name", "layer.0.fc1 \xc3\xa9\xf0\x9f\x98\x80"),
                   PSIM_OK);
  static const char *const shell[][2] = {{"tiny-gpt", "tiny-gpt"},
                                         {"it's", "'it'\\''s'"},
                                         {"$(rm -rf ~)", "'$(rm -rf ~)'"},
                                         {"", "''"}};
  for (size_t i = 0; i < sizeof shell / sizeof shell[0]; i++) {
    char *q = quote_with(psim_export_shell_quote, shell[i][0]);
    ck_assert_str_eq(q, shell[i][1]);
    psim_free(q);
  }
  char *q = quote_with(psim_export_proto_quote, "em\"bed\\\t");
  ck_assert_str_eq(q, "\"em\\\"bed\\\\\\011\"");
  psim_free(q);
}
END_TEST

START_TEST(sweep_row_round_trip) {
  psim_sweep_row r, back;
  memset(&r, 0, sizeof r);
  r.index = 7;
  snprintf(r.key, sizeof r.key, "model=a \"b\" cluster=c,d");
  snprintf(r.model, sizeof r.model, "a \"b\"");
  snprintf(r.cluster, sizeof r.cluster, "c,d");
  snprintf(r.searcher, sizeof r.searcher, "grid");
  snprintf(r.status, sizeof r.status, "failed");
  snprintf(r.error, sizeof r.error, "line one\nline \\two");
  r.seed = 12345678901ULL;
  r.iteration_time_s = 0.0123456789012;
  r.mfu = NAN;
  r.fits = true;
  char line[8192];
  ck_assert(psim_sweep_row_jsonl(&r, line, sizeof line) == PSIM_OK);
  ck_assert_ptr_eq(strchr(line, '\n'), line + strlen(line) - 1); /* one line */
  ck_assert(psim_sweep_row_parse(line, &back) == PSIM_OK);
  ck_assert_str_eq(back.key, r.key);
  ck_assert_str_eq(back.error, r.error);
  ck_assert(back.seed == r.seed && back.index == 7 && back.fits);
  ck_assert(isnan(back.mfu));
  ck_assert(fabs(back.iteration_time_s - 0.0123456789) < 1e-18); /* 9 significant digits */
  psim_sweep_row_csv(&r, line, sizeof line);
  ck_assert_msg(strstr(line, ",\"a \"\"b\"\"\",\"c,d\",") != NULL, "%s", line);
  /* #24 item 8: a name a spreadsheet would run as a formula is neutralised */
  snprintf(r.model, sizeof r.model, "=HYPERLINK(\"x\")");
  snprintf(r.cluster, sizeof r.cluster, "@c");
  psim_sweep_row_csv(&r, line, sizeof line);
  ck_assert_msg(strstr(line, ",\"'=HYPERLINK(\"\"x\"\")\",\"'@c\",") != NULL, "%s", line);
  ck_assert_ptr_null(strstr(line, ",=HYPERLINK"));
  ck_assert_int_eq(psim_sweep_row_parse("{\"case\": 1, \"key\": \"x\"", &back), PSIM_EINPUT);
  psim_error_clear();
}
END_TEST

/* fuzz_sweep's finding (build-fuzzc/artifacts, 2026-11-22): an integer column
 * beyond its type's range reached a double -> int64 cast (undefined; UBSan
 * aborted). Each such column is now refused, under every sanitizer. */
START_TEST(sweep_row_integer_out_of_range) {
  psim_sweep_row r, back;
  memset(&r, 0, sizeof r);
  snprintf(r.status, sizeof r.status, "ok");
  char line[8192];
  ck_assert(psim_sweep_row_jsonl(&r, line, sizeof line) == PSIM_OK);
  ck_assert(psim_sweep_row_parse(line, &back) == PSIM_OK);
  static const char *const column[] = {"\"case\"", "\"devices\"", "\"seed\"", "\"evaluations\""};
  static const char *const bad[] = {"2e47", "-2e47", "null", "1e300", "-5"};
  for (size_t c = 0; c < sizeof column / sizeof *column; c++)
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
      char *at = strstr(line, column[c]), edited[8192];
      ck_assert_ptr_nonnull(at);
      char *colon = strchr(at, ':'), *end = strpbrk(colon, ",}");
      snprintf(edited, sizeof edited, "%.*s %s%s", (int)(colon + 1 - line), line, bad[k], end);
      ck_assert_msg(psim_sweep_row_parse(edited, &back) == PSIM_EINPUT, "accepted %s", edited);
      char name[32];
      snprintf(name, sizeof name, "column %s", column[c]);
      ck_assert_msg(strstr(psim_error_message(), name), "%s", psim_error_message());
      psim_error_clear();
    }
  ck_assert_int_eq(psim_sweep_row_parse("{\"evaluations\":199999999999999999999999999999999999"
                                        "999999999999}",
                                        &back),
                   PSIM_EINPUT);
  psim_error_clear();
}
END_TEST

/* Issue 24 item 1: the case count of a sweep is checked before anything is
 * allocated, in 64-bit arithmetic that cannot wrap (8,192^5 = 2^65 wrapped to 2). */
static cJSON *lists_of(int n) {
  cJSON *root = cJSON_CreateObject();
  const char *keys[] = {"models", "clusters", "searchers", "seeds", "budgets"};
  for (int k = 0; k < 5; k++) {
    cJSON *a = cJSON_AddArrayToObject(root, keys[k]);
    for (int i = 0; i < n; i++)
      cJSON_AddItemToArray(a, cJSON_CreateNumber(i));
  }
  return root;
}

START_TEST(sweep_case_count_is_checked) {
  cJSON *small = lists_of(15), *over = lists_of(16), *wraps = lists_of(8192);
  ck_assert_int_eq(psim_sweep_check_size("small.json", small), PSIM_OK); /* 759,375 */
  ck_assert_int_eq(psim_sweep_check_size("over.json", over), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "over.json"));
  psim_error_clear();
  ck_assert_int_eq(psim_sweep_check_size("wraps.json", wraps), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "8192 x 8192 x 8192 x 8192 x 8192"));
  psim_error_clear();
  cJSON_Delete(small);
  cJSON_Delete(over);
  cJSON_Delete(wraps);
}
END_TEST

int main(void) {
  Suite *s = suite_create("export");
  TCase *tc = tcase_create("export");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, megatron_matcher_recovers_every_layout);
  tcase_add_test(tc, megatron_refuses_a_moved_op);
  tcase_add_test(tc, op_level_recompute_exports_to_torchtitan_only);
  tcase_add_test(tc, fp8_linears_export_as_fp8_training);
  tcase_add_test(tc, gspmd_follows_megatron_layer_rules);
  tcase_add_test(tc, gspmd_infers_the_mesh_of_a_per_op_strategy);
  tcase_add_test(tc, gspmd_tries_each_factorization_and_splits_over_several_axes);
  tcase_add_test(tc, gspmd_inference_survives_allocation_failures);
  tcase_add_test(tc, deepspeed_batch_arithmetic);
  tcase_add_test(tc, format_names);
  tcase_add_test(tc, check_reads_exports_back);
  tcase_add_test(tc, names_are_checked_and_quoted);
  tcase_add_test(tc, sweep_row_round_trip);
  tcase_add_test(tc, sweep_row_integer_out_of_range);
  tcase_add_test(tc, sweep_case_count_is_checked);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
