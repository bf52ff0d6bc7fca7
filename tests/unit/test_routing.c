/* test_routing.c - mixture-of-experts routing against closed forms (issue 21,
 * docs/simulator.md "Mixture of experts"): the all-to-all of uniform routing
 * on an uncontended switch is the pairwise exchange, each device's expert
 * GEMM follows the tokens a Zipf routing sends its expert, capacity caps
 * them, bad --routing values are refused naming the option or file, a dropless
 * dispatch drains the host (the stack's moe_dispatch_sync), a grouped expert
 * linear issues its calls per local expert (moe_grouped_host_calls), and DeepEP's
 * multi-hot conversion waits for the received tokens (moe_multihot_sync). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "costdb/cost.h"
#include "costdb/kernels.h"
#include "models/generators.h"
#include "sim/builder/routing.h"
#include "sim/core/json.h"
#include "sim/simulate.h"

#define EP     8
#define SEQ    256
#define HIDDEN 256
#define TOP_K  2
#define MEAN   (TOP_K * SEQ / EP) /* tokens per expert per sample: the capacity at factor 1 */
#define BATCH  EP

typedef struct fixture {
  psim_model m;
  psim_cluster c;
  psim_strategy s;
} fixture;

/* Sets "dropless": true on every dispatch and combine (the blocks' ops too). */
static void make_dropless(cJSON *ops) {
  cJSON *op;
  cJSON_ArrayForEach(op, ops) {
    const cJSON *kind = cJSON_GetObjectItem(op, "kind");
    if (cJSON_IsString(kind) &&
        (strcmp(kind->valuestring, "dispatch") == 0 || strcmp(kind->valuestring, "combine") == 0))
      cJSON_AddBoolToObject(op, "dropless", true);
    if (cJSON_GetObjectItem(op, "ops"))
      make_dropless(cJSON_GetObjectItem(op, "ops"));
  }
}

/* A one-layer MoE of EP experts, top-2, capacity factor 1 (capacity = MEAN). */
static void load_model(psim_model *m, bool dropless) {
  psim_gen_tf_opts o;
  psim_gen_moe_opts_init(&o);
  o.layers = 1;
  o.hidden = HIDDEN;
  o.heads = 4;
  o.ffn = 4 * HIDDEN;
  o.vocab = 1024;
  o.seq = SEQ;
  o.batch = BATCH;
  o.experts = EP;
  o.top_k = TOP_K;
  cJSON *doc = NULL;
  ck_assert_msg(psim_gen_moe(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  if (dropless)
    make_dropless(cJSON_GetObjectItem(doc, "ops"));
  psim_model_init(m);
  ck_assert_msg(psim_model_from_json("moe", doc, m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* EP GPUs (no runtime overheads) on one switch, links of bw bytes/s, no latency. */
static void load_cluster(psim_cluster *c, double bw) {
  char buf[4096];
  int n = snprintf(buf, sizeof buf,
                   "{\"format\":\"plansim.cluster/1\",\"name\":\"ep\",\"switches\":[\"sw\"],"
                   "\"device_types\":{\"gpu\":{\"peak_flops\":{\"fp32\":\"19.5 "
                   "TFLOP/s\",\"bf16\":\"312 TFLOP/s\",\"fp8\":\"624 TFLOP/s\"},"
                   "\"memory\":\"80 GB\",\"memory_bandwidth\":\"2039 GB/s\"}},\"devices\":[");
  for (int i = 0; i < EP; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s{\"name\":\"g%d\",\"type\":\"gpu\"}",
                  i ? "," : "", i);
  n += snprintf(buf + n, sizeof buf - (size_t)n, "],\"links\":[");
  for (int i = 0; i < EP; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n,
                  "%s{\"a\":\"g%d\",\"b\":\"sw\",\"bandwidth\":%.17g,\"latency\":0}", i ? "," : "",
                  i, bw);
  snprintf(buf + n, sizeof buf - (size_t)n, "]}");
  cJSON *doc = cJSON_Parse(buf);
  ck_assert_ptr_nonnull(doc);
  psim_cluster_init(c);
  ck_assert_msg(psim_cluster_from_json("ep", doc, c) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
}

/* Data parallel over EP devices; the expert kernels split as `split` (a JSON object), plus
 * `more` (further "op": {...} entries, or ""). */
static void setup_ops(fixture *f, bool dropless, double bw, const char *split, const char *more) {
  load_model(&f->m, dropless);
  load_cluster(&f->c, bw);
  char js[1024];
  snprintf(js, sizeof js,
           "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":8}},\"layout\":{"
           "\"batch\":\"dp\"},\"ops\":{%s\"layer.*.fc1\":{\"split\":%s},\"layer.*.fc2\":{"
           "\"split\":%s},\"layer.*.gelu\":{\"split\":%s}}}",
           more, split, split, split);
  cJSON *doc = cJSON_Parse(js);
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_from_json("s", doc, &f->m, &f->c, &f->s) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(doc);
}

static void setup_split(fixture *f, bool dropless, double bw, const char *split) {
  setup_ops(f, dropless, bw, split, "");
}

/* The experts split EP ways (one per device). */
static void setup(fixture *f, bool dropless, double bw) {
  setup_split(f, dropless, bw, "{\"expert\":8}");
}

static void teardown(fixture *f) {
  psim_strategy_destroy(&f->s);
  psim_cluster_destroy(&f->c);
  psim_model_destroy(&f->m);
}

static void simulate(fixture *f, const char *routing, psim_sim_result *r) {
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.keep_graph = true;
  psim_routing rt;
  if (routing) {
    ck_assert_msg(psim_routing_parse(routing, &rt) == PSIM_OK, "%s", psim_error_message());
    o.routing = &rt;
  }
  psim_sim_result_init(r);
  ck_assert_msg(psim_simulate(&f->m, &f->c, &f->s, &o, r) == PSIM_OK, "%s", psim_error_message());
  if (routing)
    psim_routing_destroy(&rt);
}

static int32_t op_named(const psim_model *m, const char *name) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (strcmp(m->ops[o].name, name) == 0)
      return o;
  ck_abort_msg("no op %s", name);
  return -1;
}

/* The forward kernel of op o on device d (one micro-batch). */
static double fwd_kernel_s(const psim_sim_result *r, int32_t o, int32_t d) {
  const psim_taskgraph *g = r->graph;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass == PSIM_TP_FWD &&
        g->info[i].op == o && g->info[i].device == d)
      return g->duration_s[i];
  ck_abort_msg("no forward kernel of op %d on device %d", o, d);
  return 0;
}

/* Uniform routing: the dispatch's all-to-all moves, from each rank to each
 * other, the tokens of its batch shard for the other's expert: m = (BATCH /
 * EP) MEAN HIDDEN elements. On a non-blocking switch with no latency, the
 * pairwise exchange (each rank sends to rank + i in step i, Thakur et al.
 * 2005, "Optimization of Collective Communication Operations in MPICH",
 * section 4.5) takes (EP - 1) m / bw: each rank's link carries EP - 1
 * messages each way. */
START_TEST(alltoall_uniform_is_pairwise_exchange) {
  const double bw = 100e9;
  fixture f;
  setup(&f, true, bw);
  psim_sim_result r;
  simulate(&f, "uniform", &r);
  int32_t disp = op_named(&f.m, "layer.0.dispatch");
  const psim_taskgraph *g = r.graph;
  double lo = INFINITY, hi = -INFINITY, bytes = 0;
  int n = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_TRANSFER && g->info[i].op == disp) {
      lo = fmin(lo, r.schedule->start_s[i]);
      hi = fmax(hi, r.schedule->end_s[i]);
      bytes += g->duration_s[i] * bw;
      n++;
    }
  const psim_tensor *xe = &f.m.tensors[f.m.ops[disp].out[0]];
  double m = (double)BATCH / EP * MEAN * HIDDEN * psim_dtype_bytes(xe->dtype);
  ck_assert_int_eq(n, EP * (EP - 1));
  ck_assert_msg(fabs(bytes / (EP * (EP - 1) * m) - 1) < 1e-9, "%g bytes, want %g", bytes,
                EP * (EP - 1) * m);
  double want = (EP - 1) * m / bw;
  /* comm.c adds the exchange's transfers round by round (flush_exchange); consumer by consumer,
   * the engine's first-come link booking took (2 EP - 3) m / bw */
  ck_assert_msg(fabs((hi - lo) / want - 1) < 1e-9, "all-to-all %g s, pairwise exchange %g s",
                hi - lo, want);
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* Tokens per sample expert e receives under zipf:s (closed form). */
static double zipf_tokens(double s, int e) {
  double h = 0;
  for (int i = 1; i <= EP; i++)
    h += pow(i, -s);
  return EP * pow(e + 1, -s) / h * MEAN;
}

/* The roofline time of fc1's forward shard with `tokens` per expert per
 * sample (one expert, BATCH / EP... the whole batch: fc1 is split over the
 * experts only). */
static double fc1_time(fixture *f, int32_t o, int32_t d, double tokens) {
  const psim_op *op = &f->m.ops[o];
  int64_t ext[PSIM_MAX_OP_DIMS];
  for (int32_t i = 0; i < op->n_dims; i++) {
    const psim_dim *dim = &f->m.dims[op->dims[i].dim];
    ext[i] = dim->role == PSIM_ROLE_EXPERT ? 1 : dim->size;
    if (strcmp(dim->name, "capacity") == 0)
      ext[i] = (int64_t)ceil(tokens - 1e-9);
  }
  psim_cost_origin origin;
  return psim_cost_compute(&f->c, d, &f->m, op, ext, PSIM_PASS_FWD, NULL, &origin);
}

/* Dropless, zipf:1.2: the device holding expert e computes e's routed tokens. */
START_TEST(zipf_compute_follows_routed_tokens) {
  fixture f;
  setup(&f, true, 100e9);
  psim_sim_result r;
  simulate(&f, "zipf:1.2", &r);
  int32_t fc1 = op_named(&f.m, "layer.0.fc1");
  const psim_op_config *cfg = &f.s.ops[fc1];
  for (int32_t e = 0; e < EP; e++) {
    int32_t d = cfg->devices[e * cfg->replicas];
    double got = fwd_kernel_s(&r, fc1, d), want = fc1_time(&f, fc1, d, zipf_tokens(1.2, e));
    ck_assert_msg(fabs(got / want - 1) < 1e-12, "expert %d: %g s, closed form %g s", e, got, want);
  }
  ck_assert(fwd_kernel_s(&r, fc1, cfg->devices[0]) > fwd_kernel_s(&r, fc1, cfg->devices[7]));
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* Dropless, zipf:1.2: device d (batch shard d, expert e_d) sends each other device the tokens
 * of its batch shard routed to that device's expert: (BATCH / EP) HIDDEN (EP MEAN -
 * zipf_tokens(e_d)) elements in all (a transfer's task is its sender's). */
START_TEST(zipf_alltoall_bytes_follow_routed_tokens) {
  const double bw = 100e9;
  fixture f;
  setup(&f, true, bw);
  psim_sim_result r;
  simulate(&f, "zipf:1.2", &r);
  int32_t disp = op_named(&f.m, "layer.0.dispatch"), fc1 = op_named(&f.m, "layer.0.fc1");
  const psim_op_config *cfg = &f.s.ops[fc1];
  const psim_taskgraph *g = r.graph;
  double esize = psim_dtype_bytes(f.m.tensors[f.m.ops[disp].out[0]].dtype);
  for (int32_t e = 0; e < EP; e++) {
    int32_t d = cfg->devices[e * cfg->replicas];
    double bytes = 0;
    for (int32_t i = 0; i < g->n_tasks; i++)
      if (g->info[i].kind == PSIM_TASK_TRANSFER && g->info[i].op == disp && g->info[i].device == d)
        bytes += g->duration_s[i] * bw;
    double want = ((double)BATCH / EP) * (EP * MEAN - zipf_tokens(1.2, e)) * HIDDEN * esize;
    ck_assert_msg(fabs(bytes / want - 1) < 1e-9, "expert %d: %g bytes, closed form %g", e, bytes,
                  want);
  }
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* Expert tensor parallelism: the expert GEMMs split over 4 expert groups x 2 ffn shards (etp
 * 2), so fc2's output is a partial sum over ffn. The combine still needs, on each device, its
 * batch shard's tokens of every expert: the ffn pair of each expert group all-reduces, then
 * each of the 3 other groups sends the device (BATCH / EP) (EP / 4) MEAN HIDDEN elements (the
 * all-to-all), each transfer after its source group's reduction. Before the fix the combine
 * read only its own group's experts: no transfer. */
START_TEST(etp_combine_alltoall) {
  const double bw = 100e9;
  fixture f;
  setup_split(&f, true, bw, "{\"expert\":4,\"ffn\":2}");
  psim_sim_result r;
  simulate(&f, "uniform", &r);
  int32_t fc2 = op_named(&f.m, "layer.0.fc2");
  const psim_taskgraph *g = r.graph;
  double bytes = 0, red_end = 0, first = INFINITY;
  int n = 0;
  for (int32_t i = 0; i < g->n_tasks; i++) {
    if (g->info[i].op != fc2 || g->info[i].pass != PSIM_TP_COMM_TP)
      continue;
    if (g->info[i].kind == PSIM_TASK_COLLECTIVE &&
        r.schedule->start_s[i] < 0.5 * r.iteration_time_s)
      red_end = fmax(red_end, r.schedule->end_s[i]);
    if (g->info[i].kind == PSIM_TASK_TRANSFER) {
      bytes += g->duration_s[i] * bw;
      first = fmin(first, r.schedule->start_s[i]);
      n++;
    }
  }
  double esize = psim_dtype_bytes(f.m.tensors[f.m.ops[fc2].out[0]].dtype);
  double want = EP * 3 * ((double)BATCH / EP) * (EP / 4) * MEAN * HIDDEN * esize;
  ck_assert_int_eq(n, EP * 3);
  ck_assert_msg(fabs(bytes / want - 1) < 1e-9, "%g bytes, closed form %g", bytes, want);
  ck_assert_msg(red_end > 0 && first >= red_end * (1 - 1e-12), "first transfer %g s, reduced %g s",
                first, red_end);
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* Dispatch and combine split over batch 4 x sequence 2 (context or sequence parallelism): each
 * shard routes its own tokens, MEAN / 2 per expert per sample, so the device of expert e
 * receives (BATCH / 4) (MEAN / 2) HIDDEN elements from each of the 7 shards it does not hold
 * (the all-to-all), and the combine's gradient is no partial sum over the sequence (no
 * all-reduce). Before, both sequence shards of a batch shard claimed all its tokens: a
 * receiver holding one shard took the other's tokens as local (6/7 of the bytes), and the
 * combine's backward all-reduced over the sequence split. */
START_TEST(sequence_split_dispatch_exchanges_tokens) {
  const double bw = 100e9;
  fixture f;
  setup_ops(&f, true, bw, "{\"expert\":8}",
            "\"layer.*.dispatch\":{\"split\":{\"batch\":4,\"seq\":2}},"
            "\"layer.*.combine\":{\"split\":{\"batch\":4,\"seq\":2}},");
  psim_sim_result r;
  simulate(&f, "uniform", &r);
  int32_t disp = op_named(&f.m, "layer.0.dispatch"), comb = op_named(&f.m, "layer.0.combine");
  const psim_taskgraph *g = r.graph;
  double bytes = 0, bwd = INFINITY; /* the forward's transfers start before any backward kernel */
  int n = 0, colls = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass == PSIM_TP_BWD)
      bwd = fmin(bwd, r.schedule->start_s[i]);
  for (int32_t i = 0; i < g->n_tasks; i++) {
    if (g->info[i].kind == PSIM_TASK_TRANSFER && g->info[i].op == disp &&
        r.schedule->start_s[i] < bwd) {
      bytes += g->duration_s[i] * bw;
      n++;
    }
    colls += g->info[i].kind == PSIM_TASK_COLLECTIVE && g->info[i].op == comb &&
             g->info[i].pass == PSIM_TP_COMM_TP;
  }
  double esize = psim_dtype_bytes(f.m.tensors[f.m.ops[disp].out[0]].dtype);
  double want = EP * 7 * ((double)BATCH / 4) * (MEAN / 2.0) * HIDDEN * esize;
  ck_assert_int_eq(n, EP * 7);
  ck_assert_msg(fabs(bytes / want - 1) < 1e-9, "%g bytes, closed form %g", bytes, want);
  ck_assert_int_eq(colls, 0);
  psim_sim_result_destroy(&r);
  teardown(&f);
}
END_TEST

/* Capacity factor 1: the hot experts compute their capacity (MEAN) and no
 * more, the cold ones their routed tokens; the load never exceeds capacity. */
START_TEST(capacity_caps_the_load) {
  fixture f;
  setup(&f, false, 100e9);
  psim_sim_result r, pad;
  simulate(&f, "zipf:1", &r);
  simulate(&f, NULL, &pad); /* the default for capacity dispatches: the whole capacity */
  int32_t fc1 = op_named(&f.m, "layer.0.fc1");
  const psim_op_config *cfg = &f.s.ops[fc1];
  for (int32_t e = 0; e < EP; e++) {
    int32_t d = cfg->devices[e * cfg->replicas];
    double tokens = fmin(zipf_tokens(1, e), MEAN);
    double got = fwd_kernel_s(&r, fc1, d), want = fc1_time(&f, fc1, d, tokens);
    ck_assert_msg(fabs(got / want - 1) < 1e-12, "expert %d: %g s, closed form %g s", e, got, want);
    ck_assert(got <= fwd_kernel_s(&pad, fc1, d) * (1 + 1e-12));
  }
  ck_assert(zipf_tokens(1, 0) > MEAN); /* the cap binds on the hottest expert */
  psim_routing z;
  ck_assert(psim_routing_parse("zipf:3", &z) == PSIM_OK);
  for (int32_t e = 0; e < EP; e++)
    ck_assert(psim_routing_load(&z, EP, e, e + 1, MEAN, MEAN) <= MEAN);
  ck_assert(fabs(psim_routing_load(&z, EP, 0, EP, MEAN, 0) - EP * MEAN) < 1e-9);
  psim_routing_destroy(&z);
  psim_sim_result_destroy(&r);
  psim_sim_result_destroy(&pad);
  teardown(&f);
}
END_TEST

/* Bad --routing values: exit status 2 (PSIM_EINPUT) naming the option or file. */
START_TEST(bad_routing_refused) {
  const char *bad[] = {"zipf:-1", "zipf:x", "maxvio:1", "skewed", "counts:", "zipf:"};
  psim_routing r;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ck_assert_int_eq(psim_routing_parse(bad[i], &r), PSIM_EINPUT);
    ck_assert_msg(strstr(psim_error_message(), "--routing"), "%s", psim_error_message());
  }
  char path[] = "/tmp/psim_routing_XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  ck_assert(write(fd, "[3, -1]", 7) == 7);
  close(fd);
  char spec[64];
  snprintf(spec, sizeof spec, "counts:%s", path);
  ck_assert_int_eq(psim_routing_parse(spec, &r), PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), path) && strstr(psim_error_message(), "[1]"), "%s",
                psim_error_message());
  FILE *fp = fopen(path, "w");
  fputs("[1, 2, 3]", fp);
  fclose(fp);
  ck_assert_int_eq(psim_routing_parse(spec, &r), PSIM_OK);
  psim_model m;
  load_model(&m, true);
  ck_assert_int_eq(psim_routing_check_model(&r, &m), PSIM_EINPUT);
  ck_assert_msg(strstr(psim_error_message(), "dispatch"), "%s", psim_error_message());
  psim_routing_destroy(&r);
  psim_model_destroy(&m);
  unlink(path);
}
END_TEST

/* Grouped GEMM (costdb/grouped_gemm.c): an expert GEMM with M tokens per expert computes
 * ceil(M / tile_m) tile_m rows; on H100 (tile 128 x 256, 132 SMs) fc1 of 10 tokens for one
 * expert (N = 4 HIDDEN = 1024: 4 tiles, under one wave) has efficiency 10 / 128, and 128
 * tokens fill the tile; a matmul without an expert dim is not grouped (0). */
START_TEST(grouped_gemm_tile_quantisation) {
  psim_model m;
  load_model(&m, true);
  psim_gpu_arch a = psim_kernels_arch("h100-sxm");
  ck_assert_int_eq(a.tile_m, 128);
  int32_t fc1 = op_named(&m, "layer.0.fc1"), qkv = op_named(&m, "layer.0.qkv");
  const psim_op *op = &m.ops[fc1];
  int64_t ext[PSIM_MAX_OP_DIMS];
  for (int tokens = 10; tokens <= 128; tokens += 118) {
    for (int32_t i = 0; i < op->n_dims; i++) {
      const psim_dim *dim = &m.dims[op->dims[i].dim];
      ext[i] = dim->role == PSIM_ROLE_EXPERT || dim->role == PSIM_ROLE_BATCH ? 1 : dim->size;
      if (strcmp(dim->name, "capacity") == 0)
        ext[i] = tokens;
    }
    double want = tokens / 128.0;
    ck_assert_msg(fabs(psim_grouped_gemm_eff(&a, &m, op, ext) - want) < 1e-12, "%d tokens: %g",
                  tokens, psim_grouped_gemm_eff(&a, &m, op, ext));
  }
  ck_assert(psim_grouped_gemm_eff(&a, &m, &m.ops[qkv], ext) == 0);
  psim_model_destroy(&m);
}
END_TEST

/* Device d's forward kernel of op o: its index in r's graph. */
static int32_t fwd_kernel(const psim_sim_result *r, int32_t o, int32_t d) {
  const psim_taskgraph *g = r->graph;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass == PSIM_TP_FWD &&
        g->info[i].op == o && g->info[i].device == d)
      return i;
  ck_abort_msg("no forward kernel of op %d on device %d", o, d);
  return -1;
}

/* The end of the last kernel device d ran before task u started. */
static double prev_kernel_end(const psim_sim_result *r, int32_t u, int32_t d) {
  const psim_taskgraph *g = r->graph;
  double end = -INFINITY, t = r->schedule->start_s[u];
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (i != u && g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].device == d &&
        r->schedule->end_s[i] <= t)
      end = fmax(end, r->schedule->end_s[i]);
  return end;
}

/* Simulates f with host issue time host_s per call and the stack's moe_dispatch_sync. */
static void simulate_host(fixture *f, double host_s, bool sync, psim_sim_result *r) {
  for (int32_t t = 0; t < f->c.n_types; t++)
    f->c.types[t].rt.host_issue_s = host_s;
  f->c.stack.moe_dispatch_sync = sync;
  simulate(f, "uniform", r);
}

/* The shortest compute kernel of r (forward or backward). */
static double min_kernel_s(const psim_sim_result *r) {
  double m = INFINITY;
  for (int32_t i = 0; i < r->graph->n_tasks; i++)
    if (r->graph->info[i].kind == PSIM_TASK_COMPUTE && r->graph->duration_s[i] > 0)
      m = fmin(m, r->graph->duration_s[i]);
  return m;
}

/* The host synchronisation of Megatron-Core's dropless dispatchers (stack key
 * moe_dispatch_sync; token_dispatcher.py cuda_sync_point, fused_a2a.py): the host,
 * which runs ahead of the device, waits for the stream to drain before it issues
 * the dispatch, so the dispatch starts one host issue time H after the kernel before
 * it ends, where it starts right after it without the sync. With H below every
 * kernel's time the host is ahead again after that kernel, so the iteration (one
 * layer, one micro-batch, every device alike) grows by exactly H. A capacity
 * dispatch (padded to capacity: no host sync) and a stack without the key do not
 * change. */
START_TEST(dropless_dispatch_drains_the_host) {
  fixture f;
  setup(&f, true, 100e9);
  psim_sim_result r0, on, off;
  simulate_host(&f, 0, false, &r0);
  double h = 0.5 * min_kernel_s(&r0);
  simulate_host(&f, h, true, &on);
  simulate_host(&f, h, false, &off);
  int32_t disp = op_named(&f.m, "layer.0.dispatch");
  for (int32_t d = 0; d < EP; d++) {
    int32_t u = fwd_kernel(&on, disp, d), v = fwd_kernel(&off, disp, d);
    double gap_on = on.schedule->start_s[u] - prev_kernel_end(&on, u, d);
    double gap_off = off.schedule->start_s[v] - prev_kernel_end(&off, v, d);
    ck_assert_msg(fabs(gap_on - h) < 1e-9 * h, "device %d: dispatch %g s after the drain, want %g",
                  d, gap_on, h);
    ck_assert_msg(fabs(gap_off) < 1e-9 * h, "device %d: %g s gap without the sync", d, gap_off);
  }
  double grow = on.iteration_time_s - off.iteration_time_s;
  ck_assert_msg(fabs(grow - h) < 1e-9 * h, "iteration +%g s, want +%g s (one drain)", grow, h);
  psim_sim_result_destroy(&r0);
  psim_sim_result_destroy(&on);
  psim_sim_result_destroy(&off);
  teardown(&f);
  setup(&f, false, 100e9); /* capacity dispatch */
  simulate_host(&f, h, true, &on);
  simulate_host(&f, h, false, &off);
  ck_assert(on.iteration_time_s == off.iteration_time_s);
  psim_sim_result_destroy(&on);
  psim_sim_result_destroy(&off);
  teardown(&f);
}
END_TEST

/* The time task u of r became ready: the latest end of its predecessors (0: none). */
static double ready_time(const psim_sim_result *r, int32_t u) {
  const psim_taskgraph *g = r->graph;
  double t = 0;
  for (int32_t i = 0; i < g->n_tasks; i++)
    for (int32_t k = g->index_[i][1]; k < g->index_[i + 1][1]; k++)
      if (g->succ[k] == u)
        t = fmax(t, r->schedule->end_s[i]);
  return t;
}

/* Simulates f under dispatcher `disp` with host issue time host_s per call, the stack's
 * moe_multihot_sync as `multihot` and no dispatch drain. */
static void simulate_multihot(fixture *f, int disp, double host_s, bool multihot,
                              psim_sim_result *r) {
  f->c.stack.moe_dispatcher = (psim_moe_dispatcher)disp;
  f->c.stack.moe_multihot_sync = multihot;
  simulate_host(f, host_s, false, r);
}

/* DeepEP's received top-k indices become a multi-hot map by boolean indexing in
 * Megatron-Core (the stack's moe_multihot_sync; token_dispatcher.py @ b0cc2706,
 * _DeepepManager._indices_to_multihot): the host, which runs ahead of the device, waits
 * for the tokens a DeepEP dispatch delivers before it issues the first expert GEMM, so
 * that kernel starts one host issue time H after its inputs arrive, where it starts when
 * they arrive without the key. With H below every kernel's time the host is ahead again
 * after it, so the iteration (one layer, one micro-batch, every device alike) grows by
 * exactly H; under the alltoall dispatcher the key changes nothing. */
START_TEST(deepep_multihot_waits_for_the_received_tokens) {
  fixture f;
  setup(&f, true, 100e9);
  psim_sim_result r0, on, off;
  simulate_multihot(&f, PSIM_MOE_DEEPEP, 0, false, &r0);
  double h = 0.5 * min_kernel_s(&r0);
  simulate_multihot(&f, PSIM_MOE_DEEPEP, h, true, &on);
  simulate_multihot(&f, PSIM_MOE_DEEPEP, h, false, &off);
  int32_t fc1 = op_named(&f.m, "layer.0.fc1");
  for (int32_t d = 0; d < EP; d++) {
    int32_t u = fwd_kernel(&on, fc1, d), v = fwd_kernel(&off, fc1, d);
    double wait_on = on.schedule->start_s[u] - ready_time(&on, u);
    double wait_off = off.schedule->start_s[v] - ready_time(&off, v);
    ck_assert_msg(fabs(wait_on - h) < 1e-9 * h, "device %d: fc1 %g s after its inputs, want %g", d,
                  wait_on, h);
    ck_assert_msg(fabs(wait_off) < 1e-9 * h, "device %d: fc1 waits %g s without the key", d,
                  wait_off);
  }
  double grow = on.iteration_time_s - off.iteration_time_s;
  ck_assert_msg(fabs(grow - h) < 1e-9 * h, "iteration +%g s, want +%g s (one wait)", grow, h);
  psim_sim_result_destroy(&on);
  psim_sim_result_destroy(&off);
  simulate_multihot(&f, PSIM_MOE_ALLTOALL, h, true, &on);
  simulate_multihot(&f, PSIM_MOE_ALLTOALL, h, false, &off);
  ck_assert(on.iteration_time_s == off.iteration_time_s);
  psim_sim_result_destroy(&r0);
  psim_sim_result_destroy(&on);
  psim_sim_result_destroy(&off);
  teardown(&f);
}
END_TEST

/* A one-layer Qwen3-style decoder (gate, up and down expert GEMMs in FP8) of 4 EP experts,
 * split EP ways over EP devices (4 local experts each), dropless or padded to capacity. */
static void setup_grouped(fixture *f, bool dropless) {
  psim_gen_tf_opts o;
  psim_gen_qwen3_moe_opts_init(&o);
  o.layers = 1;
  o.hidden = HIDDEN;
  o.heads = 4;
  o.kv_heads = 4;
  o.head_dim = 64;
  o.vocab = 1024;
  o.seq = SEQ;
  o.batch = BATCH;
  o.experts = 4 * EP;
  o.top_k = TOP_K;
  o.moe_ffn = HIDDEN;
  o.dropless = dropless;
  o.capacity_factor = dropless ? 0 : 1.0;
  o.linear_dtype = "fp8";
  cJSON *doc = NULL;
  ck_assert_msg(psim_gen_decoder(&o, &doc) == PSIM_OK, "%s", psim_error_message());
  psim_model_init(&f->m);
  ck_assert_msg(psim_model_from_json("qwen3", doc, &f->m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(doc);
  load_cluster(&f->c, 100e9);
  const char *js = "{\"format\":\"plansim.strategy/1\",\"mesh\":{\"axes\":{\"dp\":8}},\"layout\":{"
                   "\"batch\":\"dp\"},\"ops\":{\"layer.*.e_*\":{\"split\":{\"expert\":8}}}}";
  doc = cJSON_Parse(js);
  psim_strategy_init(&f->s);
  ck_assert_msg(psim_strategy_from_json("s", doc, &f->m, &f->c, &f->s) == PSIM_OK, "%s",
                psim_error_message());
  cJSON_Delete(doc);
}

/* The host time device d's kernel of op o in pass p takes to issue (0: none). */
static double issue_of(const psim_sim_result *r, int32_t o, int32_t d, int p) {
  const psim_taskgraph *g = r->graph;
  for (int32_t i = 0; i < g->n_tasks; i++)
    if (g->info[i].kind == PSIM_TASK_COMPUTE && g->info[i].pass == p && g->info[i].op == o &&
        g->info[i].device == d)
      return g->issue && g->issue[i].res >= 0 ? g->issue[i].issue_s : 0;
  ck_abort_msg("no kernel of op %d on device %d", o, d);
  return 0;
}

/* Transformer Engine's GroupedLinear launches a quantize and a GEMM per local expert forward,
 * a quantize, a dgrad and a wgrad GEMM backward, from C++ inside its Python calls (the stack's
 * moe_grouped_host_calls; grouped_linear.py v2.10): with 4 local experts, Python issue time H
 * and launch overhead L, the gate's kernel (linear_fc1, gate and up in one GroupedLinear)
 * takes H + 4 x 2 L to issue forward and 2 H + 4 x 3 L backward, the up projection's nothing,
 * the down projection's (linear_fc2) as the gate's; without the key one call per GEMM (H
 * forward, 2 H backward). With the host the bound (H and L far above every kernel's roofline,
 * L < H), the iteration grows by exactly the launches x L less the up projection's calls x H:
 * 2 x (8 + 12) L - 3 H, with or without the dispatch's drain, dropless or padded to
 * capacity. */
START_TEST(grouped_linear_issues_per_expert) {
  for (int dropless = 1; dropless >= 0; dropless--) {
    fixture f;
    setup_grouped(&f, dropless);
    psim_sim_result r0, on, off;
    simulate_host(&f, 0, false, &r0);
    double h = 1e3 * r0.iteration_time_s; /* every kernel and transfer far shorter */
    double l = h / 8;                     /* the launch overhead, on every kernel too */
    f.c.stack.launch_s = l;
    int32_t gate = op_named(&f.m, "layer.0.e_gate"), up = op_named(&f.m, "layer.0.e_up"),
            down = op_named(&f.m, "layer.0.e_down");
    for (int sync = 0; sync <= 1; sync++) {
      f.c.stack.moe_grouped_host_calls = true;
      simulate_host(&f, h, sync, &on);
      f.c.stack.moe_grouped_host_calls = false;
      simulate_host(&f, h, sync, &off);
      for (int32_t d = 0; d < EP; d++) {
        const int32_t ops[3] = {gate, up, down};
        const double fwd[3] = {h + 8 * l, 0, h + 8 * l},
                     bwd[3] = {2 * h + 12 * l, 0, 2 * h + 12 * l};
        for (int k = 0; k < 3; k++) {
          ck_assert_double_eq_tol(issue_of(&on, ops[k], d, PSIM_TP_FWD), fwd[k], 1e-9 * h);
          ck_assert_double_eq_tol(issue_of(&on, ops[k], d, PSIM_TP_BWD), bwd[k], 1e-9 * h);
          ck_assert_double_eq_tol(issue_of(&off, ops[k], d, PSIM_TP_FWD), h, 1e-9 * h);
          ck_assert_double_eq_tol(issue_of(&off, ops[k], d, PSIM_TP_BWD), 2 * h, 1e-9 * h);
        }
      }
      double grow = on.iteration_time_s - off.iteration_time_s, want = 40 * l - 3 * h;
      ck_assert_msg(fabs(grow - want) < 1e-9 * h, "%s, sync %d: iteration +%g s, want %g s",
                    dropless ? "dropless" : "capacity", sync, grow, want);
      psim_sim_result_destroy(&on);
      psim_sim_result_destroy(&off);
    }
    psim_sim_result_destroy(&r0);
    teardown(&f);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("routing");
  TCase *tc = tcase_create("closed forms");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, alltoall_uniform_is_pairwise_exchange);
  tcase_add_test(tc, zipf_compute_follows_routed_tokens);
  tcase_add_test(tc, zipf_alltoall_bytes_follow_routed_tokens);
  tcase_add_test(tc, etp_combine_alltoall);
  tcase_add_test(tc, sequence_split_dispatch_exchanges_tokens);
  tcase_add_test(tc, capacity_caps_the_load);
  tcase_add_test(tc, bad_routing_refused);
  tcase_add_test(tc, grouped_gemm_tile_quantisation);
  tcase_add_test(tc, dropless_dispatch_drains_the_host);
  tcase_add_test(tc, grouped_linear_issues_per_expert);
  tcase_add_test(tc, deepep_multihot_waits_for_the_received_tokens);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
