/* modern_test.c - unit tests of the modern calibration (issue 20): the ranking
 * figures against closed forms, the CSV reader, the 2024-2026 device types and
 * presets against their data sheets, and the Llama 3 / MPT generators against
 * published parameter counts. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/generators.h"
#include "modern.h"
#include "sim/ir/cluster.h"
#include "sim/ir/device_types.h"
#include "sim/ir/model.h"
#include "topologies/presets.h"

/* ---- ranking */

START_TEST(spearman_closed_forms) {
  double a[] = {1, 2, 3, 4, 5}, rev[] = {5, 4, 3, 2, 1}, b[] = {2, 1, 4, 3, 5};
  ck_assert_double_eq_tol(modern_spearman(a, a, 5), 1.0, 1e-12);
  ck_assert_double_eq_tol(modern_spearman(a, rev, 5), -1.0, 1e-12);
  /* no ties: 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 6 * 4 / 120 = 0.8 */
  ck_assert_double_eq_tol(modern_spearman(a, b, 5), 0.8, 1e-12);
  /* ties: ranks x = {1, 2.5, 2.5, 4} against {1, 2, 3, 4}: cov 4.5, var 4.5 and
   * 5, rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9) */
  double t[] = {10, 20, 20, 30}, u[] = {1, 2, 3, 4};
  ck_assert_double_eq_tol(modern_spearman(t, u, 4), sqrt(0.9), 1e-12);
  /* a monotone transform changes nothing */
  double sq[] = {1, 4, 9, 16, 25};
  ck_assert_double_eq_tol(modern_spearman(sq, b, 5), 0.8, 1e-12);
  /* constant side or fewer than two rows: undefined */
  double c[] = {7, 7, 7};
  ck_assert(isnan(modern_spearman(c, a, 3)));
  ck_assert(isnan(modern_spearman(a, a, 1)));
}
END_TEST

START_TEST(regret_closed_forms) {
  double meas[] = {80, 100, 90};
  double right[] = {1, 3, 2}, wrong[] = {3, 2, 1}, tie[] = {3, 3, 1};
  ck_assert_double_eq_tol(modern_regret(right, meas, 3), 0.0, 1e-12);
  /* first choice measured 80 against the best 100: 100 / 80 - 1 */
  ck_assert_double_eq_tol(modern_regret(wrong, meas, 3), 0.25, 1e-12);
  /* tied first choices 80 and 100: the mean of 0.25 and 0 */
  ck_assert_double_eq_tol(modern_regret(tie, meas, 3), 0.125, 1e-12);
  ck_assert(isnan(modern_regret(tie, meas, 0)));
}
END_TEST

/* ---- CSV */

START_TEST(csv_quotes_and_comments) {
  char dir[] = "/tmp/psim-modern-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/t.csv", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("# comment, with a comma\na,b,c\n1,\"x, \"\"y\"\"\",\n", f);
  fclose(f);
  modern_csv c;
  ck_assert(modern_csv_open(&c, dir, "t.csv"));
  ck_assert(modern_csv_next(&c));
  ck_assert_str_eq(modern_csv_get(&c, "a"), "1");
  ck_assert_str_eq(modern_csv_get(&c, "b"), "x, \"y\"");
  ck_assert_str_eq(modern_csv_get(&c, "c"), "");
  ck_assert_str_eq(modern_csv_get(&c, "absent"), "");
  ck_assert(!modern_csv_next(&c));
  modern_csv_close(&c);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* ---- device types: dense figures = data-sheet figures (sparse ones / 2) */

static void type_of(const char *name, psim_device_type *t) {
  ck_assert_msg(psim_device_type_builtin(name, t) == PSIM_OK, "%s", name);
}

START_TEST(blackwell_rates_match_data_sheets) {
  psim_device_type t;
  /* HGX B200, 8 GPUs, sparse: BF16 36, FP8 72, FP4 144 PFLOP/s; DGX B200 1,440 GB */
  type_of("b200", &t);
  ck_assert_double_eq_tol(t.peak_flops[PSIM_DTYPE_BF16], 36e15 / 8 / 2, 1e9);
  ck_assert_double_eq_tol(t.peak_flops[PSIM_DTYPE_FP8], 72e15 / 8 / 2, 1e9);
  ck_assert_double_eq_tol(psim_device_type_builtin_fp4("b200"), 144e15 / 8 / 2, 1e9);
  ck_assert_double_eq_tol(t.mem_bytes, 1440e9 / 8, 1);
  psim_device_type_destroy(&t);
  /* GB200 NVL72, 72 GPUs, sparse: BF16 360, FP8 720, FP4 1,440 PFLOP/s; 576 TB/s */
  type_of("gb200", &t);
  ck_assert_double_eq_tol(t.peak_flops[PSIM_DTYPE_BF16], 360e15 / 72 / 2, 1e9);
  ck_assert_double_eq_tol(t.peak_flops[PSIM_DTYPE_FP8], 720e15 / 72 / 2, 1e9);
  ck_assert_double_eq_tol(psim_device_type_builtin_fp4("gb200"), 1440e15 / 72 / 2, 1e9);
  ck_assert_double_eq_tol(t.mem_bw, 576e12 / 72, 1e6);
  ck_assert(fabs(t.mem_bytes / (13.4e12 / 72) - 1) < 0.01);
  psim_device_type_destroy(&t);
  /* GB300 NVL72: FP4 1,080 PFLOP/s dense, FP8 720 sparse, 20 TB HBM3e */
  type_of("gb300", &t);
  ck_assert_double_eq_tol(psim_device_type_builtin_fp4("gb300"), 1080e15 / 72, 1e9);
  ck_assert_double_eq_tol(t.peak_flops[PSIM_DTYPE_FP8], 720e15 / 72 / 2, 1e9);
  ck_assert(fabs(t.mem_bytes / (20e12 / 72) - 1) < 0.01);
  psim_device_type_destroy(&t);
  /* HGX B300 (8 GPUs): FP4 108 PFLOP/s dense, FP8 72 and BF16 36 sparse, 2.3 TB HBM3e */
  type_of("b300", &t);
  ck_assert_double_eq_tol(psim_device_type_builtin_fp4("b300"), 108e15 / 8, 1e9);
  ck_assert_double_eq_tol(t.peak_flops[PSIM_DTYPE_FP8], 72e15 / 8 / 2, 1e9);
  ck_assert_double_eq_tol(t.peak_flops[PSIM_DTYPE_BF16], 36e15 / 8 / 2, 1e9);
  ck_assert(fabs(t.mem_bytes / (2.3e12 / 8) - 1) < 0.01);
  psim_device_type_destroy(&t);
  /* NVLink 5: 130 TB/s per 72 GPUs both directions, within 1% per direction */
  for (const char *const *n = (const char *const[]){"b200", "gb200", "gb300", "b300", NULL}; *n;
       n++)
    ck_assert(fabs(psim_device_type_builtin_nvlink(*n) / (130e12 / 72 / 2) - 1) < 0.01);
  ck_assert_double_eq(psim_device_type_builtin_fp4("h100"), 0);
}
END_TEST

START_TEST(hopper_rates_match_data_sheets) {
  psim_device_type t;
  /* H100 SXM: 1,979 TFLOP/s BF16 and 3,958 FP8 with sparsity; 80 GB at 3.35 TB/s */
  type_of("h100", &t);
  ck_assert(fabs(t.peak_flops[PSIM_DTYPE_BF16] / (1979e12 / 2) - 1) < 0.001);
  ck_assert(fabs(t.peak_flops[PSIM_DTYPE_FP8] / (3958e12 / 2) - 1) < 0.001);
  ck_assert_double_eq_tol(t.mem_bytes, 80e9, 1);
  psim_device_type_destroy(&t);
  /* H200 SXM: the H100's rates, 141 GB at 4.8 TB/s */
  type_of("h200", &t);
  ck_assert(fabs(t.peak_flops[PSIM_DTYPE_FP8] / (3958e12 / 2) - 1) < 0.001);
  ck_assert_double_eq_tol(t.mem_bytes, 141e9, 1);
  ck_assert_double_eq_tol(t.mem_bw, 4.8e12, 1);
  psim_device_type_destroy(&t);
  ck_assert_double_eq_tol(psim_device_type_builtin_nvlink("h100"), 900e9 / 2, 1);
}
END_TEST

/* ---- presets */

static void load_preset(const char *name, int32_t nodes, psim_cluster *c) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = name;
  o.nodes = nodes;
  cJSON *doc = NULL;
  ck_assert_msg(psim_preset_cluster(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json(name, doc, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* Whether the route a -> b stays on NVLink, and its bottleneck bandwidth. */
static bool nvlink_only(psim_cluster *c, int32_t a, int32_t b, double *bw) {
  const int32_t *links;
  int32_t n;
  ck_assert(psim_cluster_route(c, a, b, &links, &n) == PSIM_OK);
  double lat;
  psim_cluster_route_cost(c, links, n, bw, &lat);
  for (int32_t i = 0; i < n; i++)
    if (c->links[links[i]].kind != PSIM_LINK_NVLINK)
      return false;
  return true;
}

/* Total NIC bandwidth out of node 0 per GPU of the node. */
static double nic_bw_per_gpu(const psim_cluster *c, int32_t dpn) {
  double sum = 0;
  for (int32_t i = 0; i < c->n_links; i++) {
    const psim_link *l = &c->links[i];
    if (l->kind == PSIM_LINK_NIC && l->src >= c->n_devices && l->src < c->n_vertices) {
      const char *name = c->vertex_names ? c->vertex_names[l->src] : NULL;
      if (name && strncmp(name, "node0.nic", 9) == 0)
        sum += l->bw;
    }
  }
  return sum / dpn;
}

START_TEST(presets_domains_and_counts) {
  static const struct {
    const char *preset, *type;
    int32_t domain;
    double nic_per_gpu;
  } cases[] = {{"dgx-h100", "h100", 8, 400e9 / 8},      {"dgx-h200", "h200", 8, 400e9 / 8},
               {"dgx-b200", "b200", 8, 400e9 / 8},      {"gb200-nvl72", "gb200", 72, 400e9 / 8},
               {"gb300-nvl72", "gb300", 72, 800e9 / 8}, {"dgx-b300", "b300", 8, 800e9 / 8}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    psim_cluster c;
    load_preset(cases[k].preset, 2, &c);
    int32_t d = cases[k].domain;
    ck_assert_int_eq(c.n_devices, 2 * d);
    ck_assert_str_eq(c.types[c.devices[0].type].name, cases[k].type);
    double bw;
    /* the whole domain on NVLink at the GPU's NVLink bandwidth; the next domain off it */
    ck_assert(nvlink_only(&c, 0, d - 1, &bw));
    ck_assert_double_eq_tol(bw, psim_device_type_builtin_nvlink(cases[k].type), 1);
    ck_assert(!nvlink_only(&c, 0, d, &bw));
    ck_assert_int_eq(c.devices[d].node, 1);
    double nic = nic_bw_per_gpu(&c, d);
    ck_assert_msg(fabs(nic / cases[k].nic_per_gpu - 1) < 1e-9, "%s: %g", cases[k].preset, nic);
    psim_cluster_destroy(&c);
  }
}
END_TEST

/* ---- generators against published parameter counts */

static double params_of(psim_status (*gen)(const psim_gen_tf_opts *, cJSON **),
                        const psim_gen_tf_opts *o) {
  cJSON *doc = NULL;
  ck_assert_msg(gen(o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_model m;
  psim_model_init(&m);
  ck_assert_msg(psim_model_from_json("gen", doc, &m) == PSIM_OK, "%s", psim_error_message());
  double n = m.n_params;
  psim_model_destroy(&m);
  cJSON_Delete(doc);
  return n;
}

START_TEST(llama3_parameter_counts) {
  /* Meta's Llama 3 / 3.1 model cards: 8.03 B, 70.6 B, 405.9 B (within 1%) */
  static const struct {
    int64_t layers, hidden, heads, ffn;
    double published;
  } sizes[] = {{32, 4096, 32, 14336, 8.03e9},
               {80, 8192, 64, 28672, 70.6e9},
               {126, 16384, 128, 53248, 405.9e9}};
  for (int i = 0; i < 3; i++) {
    psim_gen_tf_opts o;
    psim_gen_llama3_opts_init(&o);
    o.layers = sizes[i].layers;
    o.hidden = sizes[i].hidden;
    o.heads = sizes[i].heads;
    o.ffn = sizes[i].ffn;
    o.batch = 8;
    double n = params_of(psim_gen_llama, &o);
    ck_assert_msg(fabs(n / sizes[i].published - 1) < 0.01, "%g vs %g", n, sizes[i].published);
  }
}
END_TEST

START_TEST(mpt_parameter_counts) {
  /* llm-foundry's logged n_params (../shared/calibration/modern, MPT-7b and
   * MPT-70b at seq 2048): 12 L d^2 + 13 L d + V d + seq d + 2 d exactly */
  psim_gen_tf_opts o;
  psim_gen_mpt_opts_init(&o);
  o.batch = 8;
  ck_assert_double_eq(params_of(psim_gen_mpt, &o), 6658859008.0);
  o.layers = 80;
  o.hidden = 8192;
  o.heads = 64;
  ck_assert_double_eq(params_of(psim_gen_mpt, &o), 64862437376.0);
}
END_TEST

START_TEST(fp8_linears_only) {
  psim_gen_tf_opts o;
  psim_gen_llama3_opts_init(&o);
  o.layers = 2;
  o.batch = 8;
  o.linear_dtype = "fp8";
  cJSON *doc = NULL;
  ck_assert(psim_gen_llama(&o, &doc) == PSIM_OK);
  psim_model m;
  psim_model_init(&m);
  ck_assert(psim_model_from_json("gen", doc, &m) == PSIM_OK);
  int fp8 = 0, matmuls = 0;
  for (int32_t i = 0; i < m.n_ops; i++) {
    const psim_op *op = &m.ops[i];
    psim_dtype dt = m.tensors[op->out[0]].dtype;
    bool logits = strcmp(op->name, "logits") == 0;
    if (op->kind == PSIM_OP_MATMUL && !logits) {
      matmuls++;
      fp8 += op->attrs.fp8 && dt == m.dtype; /* FP8 GEMMs writing the model's dtype */
    } else {
      ck_assert_msg(dt != PSIM_DTYPE_FP8 && !op->attrs.fp8, "%s", op->name);
    }
  }
  ck_assert_int_gt(matmuls, 0);
  ck_assert_int_eq(fp8, matmuls); /* q k v proj gate up down per layer, not the logits */
  psim_model_destroy(&m);
  cJSON_Delete(doc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("modern");
  TCase *t = tcase_create("all");
  tcase_add_test(t, spearman_closed_forms);
  tcase_add_test(t, regret_closed_forms);
  tcase_add_test(t, csv_quotes_and_comments);
  tcase_add_test(t, blackwell_rates_match_data_sheets);
  tcase_add_test(t, hopper_rates_match_data_sheets);
  tcase_add_test(t, presets_domains_and_counts);
  tcase_add_test(t, llama3_parameter_counts);
  tcase_add_test(t, mpt_parameter_counts);
  tcase_add_test(t, fp8_linears_only);
  suite_add_tcase(s, t);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
