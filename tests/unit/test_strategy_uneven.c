/* test_strategy_uneven.c - uneven pipeline stages in the megatron template (issue 23
 * item 1): Megatron-Core's --decoder-first/last-pipeline-num-layers against its rules
 * re-derived here from megatron/core/transformer/transformer_layer.py
 * (get_transformer_layer_offset) and transformer_block.py (get_num_layers_to_build) of
 * core_v0.15.0, the template's stages and ops, errors naming the key, a 126-layer model
 * on pp 16 (Llama 3 405B's layer count), and the first stage's memory. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/generators.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/simulate.h"

#define SRC(p) PSIM_SOURCE_ROOT "/" p

typedef struct fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
} fixture;

/* A small LLaMA of `layers` layers (hidden 256, seq 128, batch `batch`). */
static void gen_llama(psim_model *m, int64_t layers, int64_t batch) {
  psim_gen_tf_opts o;
  psim_gen_llama_opts_init(&o);
  o.layers = layers;
  o.hidden = 256;
  o.heads = 4;
  o.ffn = 512;
  o.vocab = 1024;
  o.seq = 128;
  o.batch = batch;
  cJSON *doc = NULL;
  ck_assert_msg(psim_gen_llama(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("gen", doc, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* f->s from the strategy document `json` over f->m and f->c; its status. */
static psim_status strategy(fixture *f, const char *json) {
  cJSON *doc = cJSON_Parse(json);
  ck_assert_ptr_nonnull(doc);
  psim_status st = psim_strategy_from_json("s.json", doc, &f->m, &f->c, &f->s);
  cJSON_Delete(doc);
  return st;
}

static void load_cluster(psim_cluster *c, const char *file) {
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_load(file, c) == PSIM_OK, "%s", psim_error_message());
}

static void teardown(fixture *f) {
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

/* Megatron-Core's layer offset of chunk (vp_stage, pp_rank), get_transformer_layer_offset
 * with num_layers_in_first/last_pipeline_stage (0 = None) and virtual stages v. */
static int32_t mcore_offset(int32_t count, int32_t pp, int32_t v, int32_t first, int32_t last,
                            int32_t vp_stage, int32_t pp_rank) {
  int32_t middle_stages = pp - (first > 0) - (last > 0);
  int32_t middle = count - first - last;
  int32_t mid_rank = first > 0 ? pp_rank - 1 : pp_rank;
  int32_t f_v = first / v, l_v = last / v, m_v = middle / v;
  int32_t total = f_v + m_v + l_v;
  if (pp_rank == 0)
    return vp_stage * total;
  return vp_stage * total + f_v + mid_rank * (middle_stages > 0 ? m_v / middle_stages : 0);
}

/* get_num_layers_to_build of chunk (vp_stage, pp_rank). */
static int32_t mcore_build(int32_t count, int32_t pp, int32_t v, int32_t first, int32_t last,
                           int32_t pp_rank) {
  int32_t left = pp - (first > 0) - (last > 0);
  int32_t per = left > 0 ? (count - first - last) / left : 0;
  if (pp_rank == 0 && first > 0)
    per = first;
  if (pp_rank == pp - 1 && last > 0)
    per = last;
  return per / v;
}

/* Chunk sizes against Megatron-Core's counts, and each chunk starting at Megatron's offset
 * (the prefix sum of the sizes before it in pipeline order). */
START_TEST(chunk_layers_follow_megatron) {
  static const int32_t cases[][5] = {
      /* count, pp, v, first, last */
      {126, 16, 1, 7, 7}, {61, 4, 1, 16, 13}, {61, 4, 1, 0, 13}, {64, 4, 2, 14, 14},
      {30, 4, 3, 6, 6},   {10, 2, 1, 4, 0},   {10, 2, 1, 4, 6},  {10, 3, 2, 2, 0},
      {126, 16, 2, 8, 6}, {14, 4, 2, 0, 2},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int32_t count = cases[k][0], pp = cases[k][1], v = cases[k][2];
    int32_t first = cases[k][3], last = cases[k][4];
    int32_t sizes[64];
    ck_assert_msg(psim_megatron_chunk_layers(count, pp, v, first, last, sizes) == PSIM_OK,
                  "case %zu: %s", k, psim_error_message());
    int32_t start = 0;
    for (int32_t c = 0; c < pp * v; c++) {
      int32_t r = c % pp, vs = c / pp;
      ck_assert_int_eq(sizes[c], mcore_build(count, pp, v, first, last, r));
      ck_assert_int_eq(start, mcore_offset(count, pp, v, first, last, vs, r));
      start += sizes[c];
    }
    ck_assert_int_eq(start, count);
  }
}
END_TEST

/* Splits Megatron-Core refuses (transformer_config.py) or plansim cannot express: an
 * error naming the key. */
START_TEST(chunk_layers_errors) {
  static const int32_t cases[][6] = {
      /* count, pp, v, first, last, key: 0 first, 1 last */
      {10, 4, 1, 2, 3, 0},  /* 5 middle layers over 2 stages */
      {10, 1, 1, 2, 0, 0},  /* pp 1 */
      {12, 4, 2, 3, 0, 0},  /* first not a multiple of v */
      {12, 4, 2, 0, 3, 1},  /* last not a multiple of v */
      {10, 2, 1, 4, 4, 0},  /* pp 2, both given, 2 layers left for no stage */
      {10, 4, 2, 2, 2, 0},  /* 3 layers per middle stage, not a multiple of v 2 */
      {10, 4, 1, 5, 5, 0},  /* nothing left for the middle stages */
      {10, 4, 1, -1, 0, 0}, /* negative */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int32_t sizes[64];
    ck_assert_msg(psim_megatron_chunk_layers(cases[k][0], cases[k][1], cases[k][2], cases[k][3],
                                             cases[k][4], sizes) == PSIM_EINPUT,
                  "case %zu accepted", k);
    const char *key = cases[k][5] ? "last_stage_layers" : "first_stage_layers";
    ck_assert_msg(strstr(psim_error_message(), key), "case %zu: %s", k, psim_error_message());
  }
}
END_TEST

static int32_t op_named(const psim_model *m, const char *name) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (strcmp(m->ops[o].name, name) == 0)
      return o;
  ck_abort_msg("no op %s", name);
  return -1;
}

/* 12 layers, pp 4, v 2, first 2, last 2: chunks of 1, 2, 2, 1 layers in each round; the
 * embedding in chunk 0, the loss in the last chunk, every op on its layer's stage; the
 * explicit form reads back equal and keeps the keys in template_info. */
START_TEST(template_stages) {
  fixture f;
  gen_llama(&f.m, 12, 16);
  load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
  ck_assert_msg(strategy(&f, "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                             "\"pp\":4,\"dp\":2,\"virtual_stages\":2,\"first_stage_layers\":2,"
                             "\"last_stage_layers\":2}") == PSIM_OK,
                "%s", psim_error_message());
  static const int32_t want[8] = {1, 2, 2, 1, 1, 2, 2, 1};
  int32_t next = 0;
  for (int32_t c = 0; c < 8; c++) {
    const psim_stage *st = &f.s.stages[c];
    ck_assert_int_eq(st->first_layer, next);
    ck_assert_int_eq(st->last_layer - st->first_layer + 1, want[c]);
    ck_assert_int_eq(st->devices[0], (c % 4) * 2);
    next = st->last_layer + 1;
  }
  ck_assert_int_eq(next, f.m.n_layers);
  ck_assert_int_eq(f.s.ops[op_named(&f.m, "embed")].stage, 0);
  ck_assert_int_eq(f.s.ops[op_named(&f.m, "loss")].stage, 7);
  ck_assert_int_eq(f.s.tmpl.first_stage_layers, 2);
  cJSON *doc = NULL;
  ck_assert(psim_strategy_to_json(&f.s, &f.m, &f.c, &doc) == PSIM_OK);
  const cJSON *ti = cJSON_GetObjectItem(doc, "template_info");
  ck_assert_int_eq(cJSON_GetObjectItem(ti, "last_stage_layers")->valueint, 2);
  psim_strategy back;
  ck_assert_msg(psim_strategy_from_json("back", doc, &f.m, &f.c, &back) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert(psim_strategy_equal(&f.s, &back));
  ck_assert_int_eq(back.tmpl.last_stage_layers, 2);
  psim_strategy_destroy(&back);
  cJSON_Delete(doc);
  teardown(&f);
}
END_TEST

/* plansim check (no model): the key and its JSON path in the message. */
START_TEST(check_json_errors) {
  static const char *const docs[][2] = {
      {"{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"first_stage_layers\":2}",
       "first_stage_layers"},
      {"{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"pp\":4,"
       "\"virtual_stages\":2,\"last_stage_layers\":3}",
       "last_stage_layers"},
      {"{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"pp\":4,"
       "\"first_stage_layers\":0}",
       "first_stage_layers"},
  };
  for (size_t k = 0; k < sizeof docs / sizeof docs[0]; k++) {
    cJSON *doc = cJSON_Parse(docs[k][0]);
    ck_assert_int_eq(psim_strategy_check_json("s.json", doc), PSIM_EINPUT);
    ck_assert_msg(strstr(psim_error_message(), docs[k][1]), "%s", psim_error_message());
    cJSON_Delete(doc);
  }
}
END_TEST

/* 126 layers (Llama 3 405B's count) do not divide pp 16 x v 2 = 32 chunks: the even split
 * is refused, first 8 / last 6 (middle 112 = 14 x 8, each a multiple of v) simulates. */
START_TEST(layers_126_on_pp16) {
  fixture f;
  gen_llama(&f.m, 126, 32);
  load_cluster(&f.c, SRC("topologies/dgx-a100-x2.json"));
  ck_assert_int_eq(strategy(&f, "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                                "\"pp\":16,\"virtual_stages\":2}"),
                   PSIM_EINPUT);
  ck_assert_msg(strategy(&f, "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                             "\"pp\":16,\"virtual_stages\":2,\"first_stage_layers\":8,"
                             "\"last_stage_layers\":6}") == PSIM_OK,
                "%s", psim_error_message());
  ck_assert_int_eq(f.s.stages[0].last_layer - f.s.stages[0].first_layer + 1, 4);
  ck_assert_int_eq(f.s.stages[1].last_layer - f.s.stages[1].first_layer + 1, 4);
  ck_assert_int_eq(f.s.stages[15].last_layer - f.s.stages[15].first_layer + 1, 3);
  psim_sim_options o;
  psim_sim_options_init(&o);
  psim_sim_result r;
  psim_sim_result_init(&r);
  ck_assert_msg(psim_simulate(&f.m, &f.c, &f.s, &o, &r) == PSIM_OK, "%s", psim_error_message());
  ck_assert(r.iteration_time_s > 0 && isfinite(r.iteration_time_s));
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* Weight elements of the layers [lo, hi]. */
static double layer_params(const psim_model *m, int32_t lo, int32_t hi) {
  double n = 0;
  for (int32_t t = 0; t < m->n_tensors; t++) {
    const psim_tensor *x = &m->tensors[t];
    if (x->kind != PSIM_TENSOR_WEIGHT || x->layer < lo || x->layer > hi)
      continue;
    double e = 1;
    for (int32_t k = 0; k < x->rank; k++)
      e *= (double)m->dims[x->dims[k]].size;
    n += e;
  }
  return n;
}

/* The weights of the first stage's devices under pp 4 (tp 1, dp 2) on 10 layers with
 * first_stage_layers F: the parameters of its layers (the embedding and layers 0..F-1)
 * at the dtype's bytes per parameter; the first stage is the peak device (most layers,
 * most micro-batches in flight under 1F1B). */
START_TEST(first_stage_memory) {
  for (int32_t first = 4; first <= 7; first += 3) {
    fixture f;
    gen_llama(&f.m, 10, 16);
    load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
    char json[256];
    snprintf(json, sizeof json,
             "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",\"pp\":4,\"dp\":2,"
             "\"first_stage_layers\":%d}",
             (int)first);
    ck_assert_msg(strategy(&f, json) == PSIM_OK, "%s", psim_error_message());
    ck_assert_int_eq(f.s.stages[0].last_layer, first - 1);
    psim_sim_options o;
    psim_sim_options_init(&o);
    psim_sim_result r;
    psim_sim_result_init(&r);
    ck_assert_msg(psim_simulate(&f.m, &f.c, &f.s, &o, &r) == PSIM_OK, "%s", psim_error_message());
    ck_assert_int_lt(r.peak_device, 2);
    double pb[3];
    psim_memory_param_bytes(f.m.dtype, pb);
    double want = pb[0] * layer_params(&f.m, 0, first - 1);
    ck_assert_msg(fabs(r.memory.weights - want) <= 1e-9 * want, "first %d: weights %g, want %g",
                  (int)first, r.memory.weights, want);
    psim_sim_result_destroy(&r);
    teardown(&f);
  }
}
END_TEST

/* The layout's chunks against unrolling by hand (parse_str_to_list: commas dropped,
 * "(...)*n" then "x*n" repeated, '|' between chunks): t and m per chunk, their totals. */
START_TEST(layout_parse) {
  static const struct {
    const char *text;
    int32_t pp, n, t, m, sizes[16];
  } cases[] = {
      {"Et*4|(t*4|)*14tmL", 2, 16, 61, 1, {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2}},
      {"Et|tt|(t|)*2tL", 5, 5, 6, 0, {1, 2, 1, 1, 1}},
      {"E(tt)*2|t*3L", 1, 2, 7, 0, {4, 3}},
      {"Ett*10|tL", 2, 2, 12, 0, {11, 1}},
      {"E,t*2,|,t,m,L", 2, 2, 3, 1, {2, 2}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int32_t n = 0, t = 0, m = 0, *sizes = NULL;
    ck_assert_msg(psim_pipeline_layout_parse(cases[k].text, cases[k].pp, &n, &sizes, &t, &m) ==
                      PSIM_OK,
                  "%s: %s", cases[k].text, psim_error_message());
    ck_assert_int_eq(n, cases[k].n);
    ck_assert_int_eq(t, cases[k].t);
    ck_assert_int_eq(m, cases[k].m);
    for (int32_t c = 0; c < n; c++)
      ck_assert_int_eq(sizes[c], cases[k].sizes[c]);
    psim_free(sizes);
  }
}
END_TEST

/* Layouts validate_layer_layout refuses, and chunks without layers (plansim). */
START_TEST(layout_errors) {
  static const char *const bad[][2] = {
      {"tt|tL", "first"},              /* no embedding */
      {"Ett|tLt", "last"},             /* the loss not last */
      {"EEt|tL", "first"},             /* two embeddings */
      {"Etm|tL", "MTP"},               /* an MTP layer before a transformer layer */
      {"Et|mt|mL", "MTP"},             /* an MTP layer outside the last chunk */
      {"Et|tx|L", "invalid"},          /* unknown letter */
      {"Et|t|tL", "divide"},           /* 3 chunks on pp 2 */
      {"E|tt|t|tL", "no transformer"}, /* a standalone embedding chunk */
      {"(t|)*99999999999", "unrolled"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    int32_t n, t, m, *sizes = NULL;
    ck_assert_msg(psim_pipeline_layout_parse(bad[k][0], 2, &n, &sizes, &t, &m) == PSIM_EINPUT,
                  "%s accepted", bad[k][0]);
    ck_assert_msg(strstr(psim_error_message(), bad[k][1]) &&
                      strstr(psim_error_message(), "pipeline_layout"),
                  "%s: %s", bad[k][0], psim_error_message());
    psim_free(sizes);
  }
}
END_TEST

/* A DeepSeek-V3-shaped model (61 layers, one MTP module; small widths). */
static void gen_deepseek(psim_model *m) {
  psim_gen_tf_opts o;
  psim_gen_deepseek_v3_opts_init(&o);
  o.hidden = 128;
  o.heads = 2;
  o.ffn = 256;
  o.moe_ffn = o.shared_ffn = 64;
  o.experts = 8;
  o.top_k = 2;
  o.q_lora = 64;
  o.kv_lora = 32;
  o.head_dim = 32;
  o.qk_rope = 16;
  o.vocab = 1024;
  o.seq = 64;
  o.batch = 16;
  o.mtp = 1;
  cJSON *doc = NULL;
  ck_assert_msg(psim_gen_decoder(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("gen", doc, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* Layers per chunk of f->s. */
static int32_t chunk_len(const fixture *f, int32_t c) {
  return f->s.stages[c].last_layer - f->s.stages[c].first_layer + 1;
}

/* The recipe layout Et*4|(t*4|)*14tmL (Megatron-Bridge's DeepSeek-V3) on pp 2: 8 virtual
 * stages, interleaved, 4 layers a chunk and the last layer, the MTP module and the loss in
 * the last chunk; first 16 / last 13 on pp 4 (Megatron-Bridge's 16/16/16/13): the MTP
 * module joins the last stage. */
START_TEST(layout_deepseek) {
  fixture f;
  gen_deepseek(&f.m);
  load_cluster(&f.c, SRC("topologies/dgx-a100-x1.json"));
  ck_assert_msg(strategy(&f,
                         "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                         "\"pp\":2,\"dp\":4,\"pipeline_layout\":\"Et*4|(t*4|)*14tmL\"}") == PSIM_OK,
                "%s", psim_error_message());
  ck_assert_int_eq(f.s.virtual_stages, 8);
  ck_assert_int_eq(f.s.schedule, PSIM_SCHED_INTERLEAVED);
  for (int32_t c = 0; c < 15; c++)
    ck_assert_int_eq(chunk_len(&f, c), 4);
  ck_assert_int_eq(chunk_len(&f, 15), 2);
  ck_assert_int_eq(f.s.ops[op_named(&f.m, "loss")].stage, 15);
  ck_assert_int_eq(f.s.ops[op_named(&f.m, "mtp.0.mtp_loss")].stage, 15);
  ck_assert_str_eq(f.s.tmpl.pipeline_layout, "Et*4|(t*4|)*14tmL");
  cJSON *doc = NULL;
  ck_assert(psim_strategy_to_json(&f.s, &f.m, &f.c, &doc) == PSIM_OK);
  psim_strategy back;
  ck_assert_msg(psim_strategy_from_json("back", doc, &f.m, &f.c, &back) == PSIM_OK, "%s",
                psim_error_message());
  ck_assert(psim_strategy_equal(&f.s, &back));
  ck_assert_str_eq(back.tmpl.pipeline_layout, "Et*4|(t*4|)*14tmL");
  psim_strategy_destroy(&back);
  cJSON_Delete(doc);
  psim_strategy_destroy(&f.s);
  ck_assert_msg(strategy(&f, "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                             "\"pp\":4,\"dp\":2,\"first_stage_layers\":16,"
                             "\"last_stage_layers\":13}") == PSIM_OK,
                "%s", psim_error_message());
  static const int32_t want[4] = {16, 16, 16, 14};
  for (int32_t c = 0; c < 4; c++)
    ck_assert_int_eq(chunk_len(&f, c), want[c]);
  ck_assert_int_eq(f.s.ops[op_named(&f.m, "mtp.0.mtp_loss")].stage, 3);
  psim_strategy_destroy(&f.s);
  /* the layout's counts must match the model's: no 'm' for its MTP module */
  ck_assert_int_eq(strategy(&f, "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\","
                                "\"pp\":2,\"dp\":4,\"pipeline_layout\":\"Et*4|(t*4|)*14tL\"}"),
                   PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), "pipeline_layout"), "%s", psim_error_message());
  psim_cluster_destroy(&f.c);
  psim_model_destroy(&f.m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("strategy_uneven");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, chunk_layers_follow_megatron);
  tcase_add_test(tc, chunk_layers_errors);
  tcase_add_test(tc, template_stages);
  tcase_add_test(tc, check_json_errors);
  tcase_add_test(tc, layers_126_on_pp16);
  tcase_add_test(tc, first_stage_memory);
  tcase_add_test(tc, layout_parse);
  tcase_add_test(tc, layout_errors);
  tcase_add_test(tc, layout_deepseek);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
