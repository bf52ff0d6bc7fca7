/* test_coll_fabric.c - collectives across the nodes of a fat tree (issue 18
 * defects 8 and 5): data-parallel rings of a tp-8 job on nodes with fewer
 * NICs than GPUs, several pipeline stages' rings at once, folded and
 * unfolded, at both fidelities, against the closed form of the ring; data-
 * parallel collectives on their own communicator's stream. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/generators.h"
#include "sim/builder/build.h"
#include "sim/core/json.h"
#include "sim/engine/collective.h"
#include "sim/simulate.h"
#include "sim/strategy/strategy.h"
#include "topologies/presets.h"

/* nodes DGX A100 (8 GPUs on NVSwitch) with nics HDR NICs each (GPU i on NIC
 * i mod nics), 20 nodes per leaf, a non-blocking fat tree above. */
static void preset(psim_cluster *c, int32_t nodes, int32_t nics) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = "dgx-a100-80g";
  o.nodes = nodes;
  o.nics_per_node = nics;
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_preset_cluster(&o, &doc), PSIM_OK);
  psim_cluster_init(c);
  psim_status s = psim_cluster_from_json("preset", doc, c);
  cJSON_Delete(doc);
  ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
  psim_cluster_drop_coll_tables(c); /* the formula's figures (tables are for one node) */
}

/* Makespan of the collectives d[0..n) added side by side to one graph. */
static double makespan(psim_cluster *c, const psim_coll_desc *d, int n, psim_fidelity f) {
  psim_taskgraph g;
  psim_tg_init(&g, 2 * c->n_devices + c->n_links);
  for (int i = 0; i < n; i++) {
    int32_t entry, exit;
    psim_status s = psim_coll_add(&g, c, &d[i], f, NULL, &entry, &exit);
    ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
  }
  ck_assert_int_eq(psim_tg_finalize(&g), PSIM_OK);
  psim_schedule_result r;
  psim_schedule_result_init(&r);
  ck_assert_int_eq(psim_tg_simulate(&g, &r), PSIM_OK);
  double t = r.makespan_s;
  psim_schedule_result_destroy(&r);
  psim_tg_destroy(&g);
  return t;
}

/* Largest route latency between ring neighbours of a group, s. */
static double ring_alpha(psim_cluster *c, const int32_t *dev, int32_t n) {
  double a = 0;
  for (int32_t i = 0; i < n; i++) {
    double t;
    ck_assert_int_eq(psim_p2p_time(c, dev[i], dev[(i + 1) % n], 0, &t), PSIM_OK);
    a = t > a ? t : a;
  }
  return a;
}

enum { GPUS = 8, STAGES = 2 };
static const double HDR = 200e9 / 8, BYTES = 1e9;

/* Issue 18 defect 8. tp 8 (a node), pp 2 (the first half of the nodes, the
 * second half), dp = nodes / 2: every GPU's data-parallel ring all-reduce
 * crosses the network at every step, eight rings per node (one per tp rank)
 * on `nics` NICs. Per GPU it takes the closed form 2(n-1) alpha +
 * 2(n-1)/n S / B with B = nics x 25 GB/s / 8, flat in the node count: the
 * two stages' rings and the eight rails run side by side. Folded (one
 * group, 8 concurrent) and unfolded (8 groups), both fidelities, within 1%.
 * Before, a collective held every link of its routes: rings that merely
 * crossed the same leaf uplink (4 TB/s, 20 nodes of 8 NICs) queued there,
 * 2x folded at 64 nodes and up to 8x unfolded from 32 nodes on, growing
 * with the racks a data-parallel group spans. */
START_TEST(rail_rings_flat_in_nodes) {
  const int32_t counts[] = {4, 8, 16, 32, 40, 64};
  for (int nics = 4; nics <= 8; nics += 4)
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
      int32_t nodes = counts[k], n = nodes / STAGES, dev[STAGES][GPUS][64];
      psim_cluster c;
      preset(&c, nodes, nics);
      psim_coll_desc folded[STAGES], rails[STAGES * GPUS];
      double alpha = 0;
      for (int s = 0; s < STAGES; s++)
        for (int r = 0; r < GPUS; r++) {
          for (int32_t i = 0; i < n; i++)
            dev[s][r][i] = ((s * n) + i) * GPUS + r;
          psim_coll_desc *d = &rails[s * GPUS + r];
          psim_coll_desc_init(d);
          d->algo = PSIM_AR_RING;
          d->devices = dev[s][r];
          d->n = n;
          d->bytes = BYTES;
          double a = ring_alpha(&c, dev[s][r], n);
          alpha = a > alpha ? a : alpha;
          if (r == 0) {
            folded[s] = *d;
            folded[s].concurrent_groups = GPUS;
            folded[s].group_stride = 1;
          }
        }
      double bus = nics * HDR / GPUS;
      double want = 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * BYTES / bus;
      for (int f = 0; f < 2; f++) {
        double tf = makespan(&c, folded, STAGES, (psim_fidelity)f);
        double tu = makespan(&c, rails, STAGES * GPUS, (psim_fidelity)f);
        ck_assert_msg(fabs(tf - want) <= 0.01 * want && fabs(tu - want) <= 0.01 * want,
                      "%d nodes, %d NICs, fidelity %d: folded %g s, unfolded %g s, closed form %g",
                      nodes, nics, f, tf, tu, want);
        /* the bus bandwidth per GPU is the NIC share, whatever the node count */
        double busbw = 2.0 * (n - 1) / n * BYTES / (tf - 2.0 * (n - 1) * alpha);
        ck_assert_msg(fabs(busbw - bus) <= 0.01 * bus, "%d nodes: bus bandwidth %g, want %g", nodes,
                      busbw, bus);
      }
      psim_cluster_destroy(&c);
    }
}
END_TEST

/* Issue 18 defect 5: where links are uncontended the fidelities agree within
 * 1%: every collective kind over the first GPU of 16 nodes (4 NICs), eight
 * concurrent groups; and collectives issued one after another on the same
 * group (gradient buckets) queue on its ranks at both fidelities (a rank
 * runs its collectives in issue order, as one NCCL stream does), so k of
 * them take k times one. */
START_TEST(fidelities_agree_uncontended) {
  psim_cluster c;
  preset(&c, 16, 4);
  int32_t dev[16];
  for (int32_t i = 0; i < 16; i++)
    dev[i] = i * GPUS;
  const psim_coll_kind kinds[] = {
      PSIM_COLL_ALL_REDUCE, PSIM_COLL_ALL_GATHER, PSIM_COLL_REDUCE_SCATTER, PSIM_COLL_ALL_TO_ALL,
      PSIM_COLL_BROADCAST,  PSIM_COLL_REDUCE,     PSIM_COLL_GATHER,         PSIM_COLL_SCATTER};
  const psim_allreduce_algo algos[] = {PSIM_AR_RING, PSIM_AR_TREE, PSIM_AR_HALVING_DOUBLING};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    for (size_t a = 0; a < 3; a++)
      for (double bytes = 1e5; bytes < 2e9; bytes *= 100) {
        psim_coll_desc d[4];
        psim_coll_desc_init(&d[0]);
        d[0].kind = kinds[k];
        d[0].algo = algos[a];
        d[0].devices = dev;
        d[0].n = 16;
        d[0].bytes = bytes;
        d[0].concurrent_groups = GPUS;
        d[0].group_stride = 1;
        d[1] = d[2] = d[3] = d[0];
        double one;
        ck_assert_int_eq(psim_coll_time(&c, &d[0], &one), PSIM_OK);
        for (int f = 0; f < 2; f++)
          for (int m = 1; m <= 4; m += 3) {
            double t = makespan(&c, d, m, (psim_fidelity)f), want = m * one;
            /* tree or halving-doubling all-reduces in a row, expanded: a rank
             * starts the next when its own part of the last is done, not
             * when all ranks' are (a tree's leaves finish before its root),
             * up to 10% sooner here; the aggregated task waits for all */
            double lo =
                f == 1 && m > 1 && algos[a] != PSIM_AR_RING && kinds[k] == PSIM_COLL_ALL_REDUCE
                    ? 0.85
                    : 0.99;
            ck_assert_msg(t >= lo * want && t <= 1.01 * want,
                          "kind %d algo %d %g B, %d in a row, fidelity %d: %g s, want %g", kinds[k],
                          algos[a], bytes, m, f, t, want);
          }
      }
  psim_cluster_destroy(&c);
}
END_TEST

/* ---- data-parallel collectives on their own communicator (issue 18 defect 8). Megatron-LM
 * (distributed optimizer and DDP alike) and PyTorch DDP issue the gradient reduce-scatter /
 * all-reduce of each bucket on the data-parallel process group, whose NCCL communicator runs on a
 * stream of its own, concurrently with the tensor-parallel collectives of the next layers'
 * backward. Before, every collective held its ranks' one comm engine, so a tensor-parallel
 * all-reduce of the backward queued behind each multi-millisecond gradient bucket on the NICs: the
 * backward stalled, and at 11,616 GPUs (MLPerf GPT-3 175B, dp 484) the step came out 9x the
 * measured. */

/* A GPT of 8 layers x 4096, 8 micro-batches per data-parallel rank, tp 8 (one
 * node), dp = nodes on 4-NIC nodes, zero 0 or 1: the last backward kernel's
 * end (s) and the iteration time (*iter, s). */
typedef struct run_out {
  double bwd_end, iter; /* the last backward kernel's end, the iteration time, s */
  double gather_s;      /* ZeRO-1/2's parameter all-gathers on device 0, summed, s */
  int32_t n_gathers, gathers_feeding_fwd; /* those of device 0; those with a forward successor */
  int32_t n_buckets;                      /* gradient buckets of device 0 */
} run_out;

/* What run_full varies beyond run: overlap_param_gather, the stack (NULL: the preset's),
 * bucket_size (bytes; 0: not given) and sequence parallelism. */
typedef struct run_opts {
  bool opg;
  const char *stack;
  double bucket_bytes;
  bool sp;
} run_opts;

/* Whether task t is followed by the next piece of its own collective: task t + 1, its
 * successor, with the same info and duration (psim_coll_add_pieces). */
static bool chain_next(const psim_taskgraph *g, int32_t t) {
  if (t + 1 >= g->n_tasks || g->duration_s[t + 1] != g->duration_s[t] ||
      memcmp(&g->info[t], &g->info[t + 1], sizeof g->info[t]) != 0)
    return false;
  for (int32_t i = g->succ_first[t]; i < g->succ_first[t + 1]; i++)
    if (g->succ[i] == t + 1)
      return true;
  return false;
}

/* run with the options of ro, and the gathers' and buckets' figures in *out. */
static void run_full(int32_t nodes, int zero, bool overlap, const run_opts *ro, run_out *out) {
  psim_gen_tf_opts go;
  psim_gen_gpt_opts_init(&go);
  go.layers = 8;
  go.hidden = 4096;
  go.heads = 32;
  go.seq = 2048;
  go.batch = 8 * nodes;
  cJSON *doc = NULL;
  ck_assert_int_eq(psim_gen_gpt(&go, &doc), PSIM_OK);
  psim_model m;
  psim_model_init(&m);
  ck_assert_int_eq(psim_model_from_json("gpt", doc, &m), PSIM_OK);
  cJSON_Delete(doc);
  psim_cluster c;
  preset(&c, nodes, 4);
  psim_megatron_opts o;
  psim_megatron_opts_init(&o);
  o.tp = 8;
  o.pp = 1;
  o.dp = nodes;
  o.micro_batch = 1;
  o.zero_stage = zero;
  o.overlap_grad_reduce = overlap;
  o.sequence_parallel = ro->sp;
  psim_strategy s;
  psim_strategy_init(&s);
  psim_status st = psim_strategy_megatron(&m, &c, &o, &s);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  s.overlap_param_gather = ro->opg;
  if (ro->stack)
    ck_assert_int_eq(psim_stack_builtin(ro->stack, &c.stack), PSIM_OK);
  if (ro->bucket_bytes > 0) {
    s.bucket_bytes = ro->bucket_bytes;
    s.bucket_given = true;
  }
  psim_sim_options so;
  psim_sim_options_init(&so);
  so.keep_graph = true;
  psim_sim_result res;
  psim_sim_result_init(&res);
  st = psim_simulate(&m, &c, &s, &so, &res);
  ck_assert_msg(st == PSIM_OK, "%s", psim_error_message());
  const psim_taskgraph *g = res.graph;
  *out = (run_out){0, res.iteration_time_s, 0, 0, 0, 0};
  for (int32_t t = 0; t < g->n_tasks; t++) {
    const psim_task_info *in = &g->info[t];
    if (in->kind == PSIM_TASK_COMPUTE && in->pass == PSIM_TP_BWD)
      out->bwd_end = fmax(out->bwd_end, res.schedule->end_s[t]);
    if (in->kind != PSIM_TASK_COLLECTIVE || in->pass != PSIM_TP_COMM_DP || in->device != 0)
      continue;
    if (in->op < 0)
      out->gather_s += g->duration_s[t];
    if (chain_next(g, t)) /* a piece before the last of its collective (psim_coll_pieces) */
      continue;
    if (in->op >= 0) { /* gradient reduce-scatters name their bucket's op; gathers none */
      out->n_buckets++;
      continue;
    }
    out->n_gathers++;
    for (int32_t i = g->succ_first[t]; i < g->succ_first[t + 1]; i++)
      if (g->info[g->succ[i]].kind == PSIM_TASK_COMPUTE &&
          g->info[g->succ[i]].pass == PSIM_TP_FWD) {
        out->gathers_feeding_fwd++;
        break;
      }
  }
  psim_sim_result_destroy(&res);
  psim_strategy_destroy(&s);
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}

static double run(int32_t nodes, int zero, bool overlap, double *iter) {
  run_out r;
  run_opts ro = {false, NULL, 0, false};
  run_full(nodes, zero, overlap, &ro, &r);
  *iter = r.iter;
  return r.bwd_end;
}

/* Tensor-parallel traffic stays on NVSwitch, data-parallel traffic on the
 * NICs, each on its own stream: the backward (its kernels and the
 * tensor-parallel all-reduces between them) ends at the same time with 1, 2,
 * 4 or 8 data-parallel replicas doing the same per-replica work, the bucket
 * reduce-scatters / all-reduces hidden behind it. Before, each tensor-parallel
 * all-reduce issued while a bucket was on the wire waited for it on the one
 * comm engine, and the backward ended later the more buckets crossed nodes. */
START_TEST(tp_comm_not_behind_gradient_buckets) {
  for (int zero = 0; zero <= 1; zero++) {
    double it, one = run(1, zero, true, &it);
    for (int32_t nodes = 2; nodes <= 8; nodes *= 2) {
      double end = run(nodes, zero, true, &it);
      ck_assert_msg(fabs(end - one) <= 1e-9 * one,
                    "zero %d dp %d: backward ends at %.6f s, %.6f s at dp 1", zero, nodes, end,
                    one);
    }
  }
}
END_TEST

/* Megatron-Core's overlap_param_gather (distributed_data_parallel.py,
 * next_param_gather_bucket_group; the forward pre-hook waits for a module's
 * bucket): ZeRO-1's parameter all-gathers leave the end of the iteration for
 * the start of the forward, each gather before the first forward kernel of its
 * bucket (an edge into a forward kernel). The iteration shortens by at most
 * the gathers' time (nothing else moves) and by at least a third of it: here
 * the two data-parallel groups that share each of the 4 NICs per node gather at
 * once, each at half the NIC's bandwidth (33 ms of gathers per device where one
 * group alone takes 17 ms; docs/simulator.md, "Concurrent groups"), and the
 * first micro-batch's forward (about 13 ms) hides 12 ms of them, the first
 * bucket's (the embedding's) staying exposed. Before, the key did not exist and
 * the gathers followed the step. */
START_TEST(param_gather_overlaps_forward) {
  run_out after, overl;
  run_opts ro = {false, NULL, 0, false};
  run_full(4, 1, true, &ro, &after);
  ro.opg = true;
  run_full(4, 1, true, &ro, &overl);
  ck_assert_int_gt(after.n_gathers, 1);
  ck_assert_int_eq(overl.n_gathers, after.n_gathers);
  ck_assert_int_eq(after.gathers_feeding_fwd, 0);
  ck_assert_int_eq(overl.gathers_feeding_fwd, overl.n_gathers);
  ck_assert_msg(overl.iter <= after.iter - after.gather_s / 3 &&
                    overl.iter >= after.iter - after.gather_s * (1 + 1e-9),
                "iteration %.6f s with overlap, %.6f s after the step, gathers %.6f s", overl.iter,
                after.iter, after.gather_s);
}
END_TEST

/* Megatron-Core's default bucket (distributed_data_parallel.py: bucket_size =
 * max(40000000, 1000000 x dp) parameters when the config gives none): under the
 * megatron-core stack without bucket_size, the buckets are those of the closed-form size
 * given explicitly (in bytes: the parameters x the fp32 gradient's 4 bytes of a bf16 model,
 * so a bucket closes at the same weight), at dp 4 (4e7) and dp 64 (6.4e7), and not the
 * 25 MiB default's. megatron-lm-2021 keeps the 25 MiB default. Before, the stack had no
 * rule and every run took 25 MiB. */
START_TEST(megatron_core_bucket_rule) {
  for (int32_t nodes = 4; nodes <= 64; nodes *= 16) {
    run_out rule, closed, ddp, old;
    run_opts ro = {false, "megatron-core", 0, false};
    run_full(nodes, 1, true, &ro, &rule);
    ro.bucket_bytes = fmax(4e7, 1e6 * nodes) * 4;
    run_full(nodes, 1, true, &ro, &closed);
    ro.bucket_bytes = 25.0 * 1048576.0;
    run_full(nodes, 1, true, &ro, &ddp);
    ro = (run_opts){false, "megatron-lm-2021", 0, false};
    run_full(nodes, 1, true, &ro, &old);
    ck_assert_int_eq(rule.n_buckets, closed.n_buckets);
    ck_assert_msg(rule.iter == closed.iter, "dp %d: %.9g s != %.9g s", nodes, rule.iter,
                  closed.iter);
    ck_assert_int_lt(rule.n_buckets, ddp.n_buckets);
    ck_assert_int_eq(old.n_buckets, ddp.n_buckets);
  }
}
END_TEST

/* Megatron-Core's gradient buffer holds every parameter of the chunk, the norms and biases
 * that sequence parallelism leaves partial over tensor parallelism included
 * (param_and_grad_buffer.py; their tp all-reduce follows the backward, finalize_model_grads.py):
 * under the megatron-core stack, turning sequence parallelism on keeps the gradient buckets as
 * they are (same number, same iteration's data-parallel work), at dp 4 and 16. megatron-lm-2021
 * keeps its buckets keyed by group, so there the norms split them. Before, the norms' and
 * biases' tp x dp groups cut a bucket at each of them under every stack. */
START_TEST(sequence_parallel_norms_in_dp_buckets) {
  for (int32_t nodes = 4; nodes <= 16; nodes *= 4) {
    run_out sp, plain, old_sp, old_plain;
    run_opts ro = {false, "megatron-core", 0, false};
    run_full(nodes, 1, true, &ro, &plain);
    ro.sp = true;
    run_full(nodes, 1, true, &ro, &sp);
    ro.stack = "megatron-lm-2021";
    run_full(nodes, 1, true, &ro, &old_sp);
    ro.sp = false;
    run_full(nodes, 1, true, &ro, &old_plain);
    ck_assert_int_gt(plain.n_buckets, 0);
    ck_assert_msg(sp.n_buckets == plain.n_buckets, "dp %d: %d buckets with sp, %d without", nodes,
                  sp.n_buckets, plain.n_buckets);
    ck_assert_int_gt(old_sp.n_buckets, old_plain.n_buckets);
  }
}
END_TEST

/* A collective on its own stream holds no comm engine (only links it
 * fills), at both fidelities; on the comm engine it holds every rank's. */
START_TEST(own_stream_holds_no_engine) {
  psim_cluster c;
  preset(&c, 4, 4);
  int32_t dev[4] = {0, 8, 16, 24};
  for (int f = 0; f <= 1; f++)
    for (int own = 0; own <= 1; own++) {
      psim_coll_desc d;
      psim_coll_desc_init(&d);
      d.kind = PSIM_COLL_REDUCE_SCATTER;
      d.devices = dev;
      d.n = 4;
      d.bytes = 64e6;
      d.own_stream = own;
      psim_taskgraph g;
      psim_tg_init(&g, 2 * c.n_devices + c.n_links);
      int32_t entry, exit, engines = 0;
      ck_assert_int_eq(psim_coll_add(&g, &c, &d, (psim_fidelity)f, NULL, &entry, &exit), PSIM_OK);
      for (int32_t t = 0; t < g.n_tasks; t++)
        for (int32_t k = g.res_first[t]; k < g.res_first[t + 1]; k++)
          engines += g.res[k] < 2 * c.n_devices && g.res[k] % 2 == 1;
      if (own)
        ck_assert_int_eq(engines, 0);
      else
        ck_assert_int_ge(engines, 4);
      psim_tg_destroy(&g);
    }
  psim_cluster_destroy(&c);
}
END_TEST

/* Time of one all-reduce of bytes by algo over GPU 0 of each of nodes nodes. */
static double one_per_node_time(int32_t nodes, psim_allreduce_algo algo, double bytes) {
  psim_cluster c;
  preset(&c, nodes, 8);
  int32_t dev[128];
  for (int32_t i = 0; i < nodes; i++)
    dev[i] = 8 * i;
  psim_coll_desc d;
  psim_coll_desc_init(&d);
  d.algo = algo;
  d.devices = dev;
  d.n = nodes;
  d.bytes = bytes;
  double t;
  ck_assert_int_eq(psim_coll_time(&c, &d, &t), PSIM_OK);
  psim_cluster_destroy(&c);
  return t;
}

/* `auto` all-reduce over one rank per node takes the cheaper of the ring
 * and the tree per call, as NCCL's getAlgoInfo does (v2.18.3
 * src/enqueue.cc), so for small messages its time grows with log2(nodes),
 * not with the ring's 2(nodes - 1) network steps. Before, `auto` fell back
 * to the flat ring there: 1 KB over 64 nodes cost 21x what it cost over 4. */
START_TEST(auto_picks_least_time_one_per_node) {
  const int32_t counts[] = {3, 4, 8, 16, 32, 64, 100};
  const double sizes[] = {8, 1024, 65536, 1 << 20, 16 << 20, 256 << 20};
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
    for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b++) {
      int32_t n = counts[k];
      double ring = one_per_node_time(n, PSIM_AR_RING, sizes[b]);
      double tree = one_per_node_time(n, PSIM_AR_TREE, sizes[b]);
      double aut = one_per_node_time(n, PSIM_AR_AUTO, sizes[b]);
      ck_assert_msg(fabs(aut - fmin(ring, tree)) <= 1e-12 * aut,
                    "%d nodes, %g B: auto %g s, ring %g s, tree %g s", n, sizes[b], aut, ring,
                    tree);
    }
  double t4 = one_per_node_time(4, PSIM_AR_AUTO, 1024);
  for (int32_t n = 8; n <= 128; n *= 2) {
    double t = one_per_node_time(n, PSIM_AR_AUTO, 1024);
    /* 10%: beyond a leaf's 20 nodes a route crosses the spine (two more
     * 0.13 us hops per step) */
    ck_assert_msg(t <= t4 * log2(n) / 2 * 1.1, "1 KB over %d nodes: %g s, over 4: %g s", n, t, t4);
  }
}
END_TEST

/* ZeRO-1's data-parallel collectives under the stack's gradient and parameter dtypes
 * (sim/builder/gradsync.c): a bf16 GPT with FP8 linear layers, data parallel over 8 devices
 * with the distributed optimizer. Ring volumes (zero.h): reduce-scatter and all-gather each
 * send (n - 1) bytes per byte of the buffer, summed over the ranks. */
/* Bytes the ranks send in gradient and parameter collectives under ZeRO 1 over 8 devices:
 * out[0] on the stack as it is, out[1] with grad_reduce_bf16, out[2] with fp8_all_gather too. */
static void zero1_dp_bytes(const psim_model *m, psim_cluster *c, double out[3]) {
  psim_strategy s;
  psim_strategy_init(&s);
  ck_assert_msg(psim_strategy_zero(m, c, 8, 1, &s) == PSIM_OK, "%s", psim_error_message());
  psim_sim_options o;
  psim_sim_options_init(&o);
  o.fold = false;
  for (int k = 0; k < 3; k++) {
    c->stack.grad_reduce_bf16 = k >= 1;
    c->stack.fp8_all_gather = k == 2;
    psim_build *b = NULL;
    psim_build_summary sum;
    ck_assert_msg(psim_build_graph(&b, m, c, &s, &o) == PSIM_OK, "%s", psim_error_message());
    psim_build_summarise(b, &sum);
    out[k] = sum.dp_bytes;
    psim_build_free(b);
  }
  psim_strategy_destroy(&s);
}

/* fp32 gradients (4 bytes) reduce-scattered and bf16 parameters (2) gathered: 6 bytes per
 * parameter; gradients in bf16 (grad_reduce_bf16, NeMo's grad_sync_dtype): 4, exactly 2/3;
 * the FP8 linear weights gathered in FP8 as well (fp8_all_gather, NeMo's FP8_PARAMS): 1 byte
 * less per FP8 linear weight, at most a quarter of the rest (the whole gather halved). */
START_TEST(gradient_and_parameter_dtypes) {
  psim_gen_tf_opts g;
  psim_gen_gpt_opts_init(&g);
  g.layers = 2;
  g.hidden = 256;
  g.heads = 4;
  g.seq = 128;
  g.batch = 8;
  g.vocab = 1024;
  g.linear_dtype = "fp8";
  cJSON *j = NULL;
  ck_assert(psim_gen_gpt(&g, &j) == PSIM_OK);
  psim_model m;
  psim_model_init(&m);
  ck_assert_msg(psim_model_from_json("gpt", j, &m) == PSIM_OK, "%s", psim_error_message());
  cJSON_Delete(j);
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_msg(psim_cluster_load(PSIM_SOURCE_ROOT "/tests/data/coll-nvswitch8.json", &c) ==
                    PSIM_OK,
                "%s", psim_error_message());
  double v[3];
  zero1_dp_bytes(&m, &c, v);
  double fp32 = v[0], bf16 = v[1], fp8 = v[2];
  ck_assert_double_eq_tol(bf16, fp32 * 4 / 6, 1e-9 * fp32);
  ck_assert_double_lt(fp8, bf16 * (1 - 1e-6));
  ck_assert_double_ge(fp8, bf16 * 3 / 4 * (1 - 1e-12));
  psim_cluster_destroy(&c);
  psim_model_destroy(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coll_fabric");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, rail_rings_flat_in_nodes);
  tcase_add_test(tc, fidelities_agree_uncontended);
  tcase_add_test(tc, tp_comm_not_behind_gradient_buckets);
  tcase_add_test(tc, param_gather_overlaps_forward);
  tcase_add_test(tc, megatron_core_bucket_rule);
  tcase_add_test(tc, sequence_parallel_norms_in_dp_buckets);
  tcase_add_test(tc, own_stream_holds_no_engine);
  tcase_add_test(tc, auto_picks_least_time_one_per_node);
  tcase_add_test(tc, gradient_and_parameter_dtypes);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
