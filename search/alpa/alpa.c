/* alpa.c - the Alpa optimizer's driver (alpa.h): layer classes, candidate
 * meshes and micro-batch sizes, statistics and the entry point. The memoised
 * ILPs are in alpa_points.c, the stage DP in alpa_dp.c, the explicit
 * strategy of the chosen plan, re-simulated, in alpa_plan.c. */
#define _POSIX_C_SOURCE 200809L
#include "search/alpa/alpa.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "search/alpa/alpa_search_impl.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

/* ---- layer classes ---- */

static bool same_layer(const alpa *A, int32_t a, int32_t b, int32_t first_a, int32_t first_b,
                       int32_t n) {
  const psim_model *m = A->m;
  for (int32_t i = 0; i < n; i++) {
    const psim_op *x = &m->ops[first_a + i], *y = &m->ops[first_b + i];
    if (x->layer != a || y->layer != b || x->block < 0 || x->proto != y->proto)
      return false;
    int32_t dx[PSIM_MAX_OP_DIMS], dy[PSIM_MAX_OP_DIMS];
    if (psim_alpa_fix_degrees(&A->fix, m, first_a + i, dx, NULL) != PSIM_OK ||
        psim_alpa_fix_degrees(&A->fix, m, first_b + i, dy, NULL) != PSIM_OK ||
        !psim_alpa_fix_same_entries(&A->fix, m, first_a + i, first_b + i))
      return false;
  }
  return true;
}

static psim_status layer_classes(alpa *A) {
  const psim_model *m = A->m;
  int32_t L = m->n_layers, *first = psim_calloc((size_t)L, sizeof *first),
          *count = psim_calloc((size_t)L, sizeof *count);
  A->class_of = psim_calloc((size_t)L, sizeof *A->class_of);
  A->class_layer = psim_calloc((size_t)L, sizeof *A->class_layer);
  psim_status st = first && count && A->class_of && A->class_layer
                       ? PSIM_OK
                       : psim_error(PSIM_ENOMEM, "out of memory (layer classes)");
  for (int32_t i = m->n_ops - 1; st == PSIM_OK && i >= 0; i--) {
    first[m->ops[i].layer] = i;
    count[m->ops[i].layer]++;
  }
  for (int32_t l = 0; st == PSIM_OK && l < L; l++) {
    int32_t k = 0;
    for (; k < A->n_classes; k++) {
      int32_t r = A->class_layer[k];
      if (count[r] == count[l] && same_layer(A, r, l, first[r], first[l], count[l]))
        break;
    }
    if (k == A->n_classes)
      A->class_layer[A->n_classes++] = l;
    A->class_of[l] = k;
  }
  psim_free(first);
  psim_free(count);
  return st;
}

/* ---- candidate meshes and micro-batch sizes ---- */

static int32_t dev_per_node(const psim_cluster *c) {
  return c->devices_per_node > 0 ? c->devices_per_node : c->n_devices;
}

static void add_meshes(alpa *A, int32_t n) {
  int32_t dpn = dev_per_node(A->c);
  for (int32_t a1 = 1; a1 <= n && a1 <= dpn && A->n_meshes < 64; a1 *= 2) {
    if (n % a1 != 0 || n / a1 > PSIM_SH_MAX_AXIS)
      continue;
    if (A->fix.has_mesh && (A->fix.mesh[0] != n / a1 || A->fix.mesh[1] != a1))
      continue;
    assert(A->n_meshes < (int32_t)(sizeof A->meshes / sizeof A->meshes[0]));
    A->meshes[A->n_meshes++] = (alpa_mesh){n, n / a1, a1, NULL};
  }
}

static bool alpa_shape(const alpa *A, int32_t n) {
  int32_t dpn = dev_per_node(A->c);
  return n >= 1 && n <= A->c->n_devices && ((n <= dpn && (n & (n - 1)) == 0) || n % dpn == 0);
}

/* Base stage sizes: (1, 2^k) in a node, (k, devices per node) across nodes,
 * dividing the cluster into at most n_layers stages. */
bool psim_alpa_is_base(const alpa *A, int32_t n) {
  int32_t N = A->c->n_devices;
  if (!alpa_shape(A, n) || N % n != 0 || N / n > A->m->n_layers)
    return false;
  return A->fix.n_stages <= 0 || N / n == A->fix.n_stages;
}

/* Meshes of every base size and of the sizes half and twice a base (the
 * stage DP's band, alpa_dp.c). */
static void enumerate_meshes(alpa *A) {
  for (int32_t n = 1; n <= A->c->n_devices; n++) {
    bool half = n % 2 == 0 && psim_alpa_is_base(A, n / 2);
    if (alpa_shape(A, n) && (psim_alpa_is_base(A, n) || psim_alpa_is_base(A, 2 * n) || half))
      add_meshes(A, n);
  }
}

static void enumerate_mbs(alpa *A) {
  A->n_mbs = 0; /* every divisor of the batch (mb_wanted picks per mesh) */
  for (int64_t mb = 1; mb <= A->batch && A->n_mbs < MAX_MBS; mb++)
    if (A->batch % mb == 0)
      A->mbs[A->n_mbs++] = mb;
  if (A->mbs[A->n_mbs - 1] != A->batch)
    A->mbs[A->n_mbs - 1] = A->batch;
}

/* Micro-batch sizes worth trying on mesh mesh: the data-parallel axis times
 * 1..8 samples per rank (the grid's range), and the whole mesh times 1, 2. */
bool psim_alpa_mb_wanted(const alpa *A, const alpa_mesh *me, int64_t mb) {
  if (A->fix.n_micro > 0)
    return A->batch / mb == A->fix.n_micro;
  for (int64_t k = 1; k <= 8; k *= 2)
    if (mb == k * me->a0)
      return true;
  if (mb == me->n || mb == 2 * me->n)
    return true;
  return mb == A->batch && mb < me->a0;
}

/* ---- statistics, setup and the entry point ---- */

static psim_status stats_json(const alpa *A, const alpa_cand *best, psim_search_result *r) {
  cJSON *s = cJSON_CreateObject();
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory (stats)");
  r->stats = s;
  double rate = A->memo_lookups ? (double)A->memo_hits / (double)A->memo_lookups : 0;
  PSIM_CHECK(psim_json_add_number(s, "ilp_count", (double)A->ilp_count));
  PSIM_CHECK(psim_json_add_number(s, "ilp_time_s", A->ilp_s));
  PSIM_CHECK(psim_json_add_number(s, "ilp_timeouts", (double)A->timeouts));
  PSIM_CHECK(psim_json_add_number(s, "ilp_max_gap", A->max_gap));
  PSIM_CHECK(psim_json_add_number(s, "dp_time_s", A->dp_s));
  PSIM_CHECK(psim_json_add_number(s, "mesh_fit_time_s", A->mesh_s));
  PSIM_CHECK(psim_json_add_number(s, "simulate_time_s", A->sim_s));
  PSIM_CHECK(psim_json_add_number(s, "memo_lookups", (double)A->memo_lookups));
  PSIM_CHECK(psim_json_add_number(s, "memo_hits", (double)A->memo_hits));
  PSIM_CHECK(psim_json_add_number(s, "memo_hit_rate", rate));
  PSIM_CHECK(psim_json_add_number(s, "layer_classes", A->n_classes));
  PSIM_CHECK(psim_json_add_number(s, "candidates_simulated", A->n_top - A->n_skipped));
  if (A->n_skipped > 0)
    PSIM_CHECK(psim_json_add_number(s, "candidates_skipped", A->n_skipped));
  if (A->op_cluster) /* a graph without layer indices, clustered (cluster_layers.c) */
    PSIM_CHECK(psim_json_add_number(s, "layer_clusters", A->n_clusters));
  return psim_json_add_number(s, "estimate_s", best ? best->estimate : 0);
}

psim_status psim_alpa_setup(alpa *A, const psim_model *m, psim_cluster *c,
                            const psim_search_options *o) {
  memset(A, 0, sizeof *A);
  pthread_mutex_init(&A->mu, NULL);
  A->m = m;
  A->m0 = m;
  A->c = c;
  A->o = o;
  int32_t b = m->role_dim[PSIM_ROLE_BATCH];
  if (b < 0)
    return psim_error(PSIM_EINPUT, "%s: the Alpa optimizer needs a dim with role 'batch'",
                      m->file ? m->file : m->name);
  A->batch = m->dims[b].size;
  A->max_zero = 3;
  A->equal_stages = o->quick;
  A->mem_bytes = c->types[c->devices[0].type].mem_bytes;
  /* A time budget (auto's share of the plan's time, search/policy/policy.c, or `--search alpa
   * --budget 60s`), in CPU seconds as every search budget (search/budget.h), bounds the
   * candidate simulations and the final tries: the stage DP and its ILPs run to completion,
   * the first candidate is always simulated. Without one (or under an evaluation budget,
   * which cli/cmd_plan.c says has no effect here) the whole search runs. */
  A->deadline_s = o->budget_s > 0 ? psim_budget_clock_s() + o->budget_s : 0;
  PSIM_CHECK(psim_alpa_fix_parse(o->fix, m, &A->fix));
  int32_t n_entries = psim_alpa_fix_entries(&A->fix);
  A->blame = psim_calloc((size_t)(n_entries > 0 ? n_entries : 1), 1);
  if (!A->blame)
    return psim_error(PSIM_ENOMEM, "out of memory (--fix)");
  PSIM_CHECK(psim_alpa_cluster_model(A));
  PSIM_CHECK(layer_classes(A));
  enumerate_meshes(A);
  enumerate_mbs(A);
  if (A->n_meshes == 0)
    return psim_error(PSIM_EINPUT, "%s: no stage shape divides the %d devices of %s%s",
                      o->fix && o->fix->file ? o->fix->file : m->name, (int)c->n_devices, c->name,
                      A->fix.active ? " under the fixed mesh and stages" : "");
  size_t n = (size_t)A->n_classes * (size_t)A->n_meshes * (size_t)A->n_mbs * LEVELS;
  A->memo = psim_calloc(n, sizeof *A->memo);
  return A->memo ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (ILP memo)");
}

void psim_alpa_teardown(alpa *A) {
  size_t n = (size_t)A->n_classes * (size_t)A->n_meshes * (size_t)A->n_mbs * LEVELS;
  for (size_t i = 0; A->memo && i < n; i++)
    psim_free(A->memo[i].op_dim);
  psim_free(A->memo);
  for (int32_t i = 0; i < A->n_meshes; i++)
    psim_free(A->meshes[i].sh);
  for (int32_t i = 0; i < A->n_top; i++) {
    psim_free(A->top[i].last);
    psim_free(A->top[i].ml);
  }
  psim_free(A->class_of);
  psim_free(A->class_layer);
  psim_alpa_fix_destroy(&A->fix);
  psim_alpa_cluster_free(A);
  psim_free(A->blame);
  pthread_mutex_destroy(&A->mu);
}

static psim_status no_plan(const alpa *A) {
  if (A->fix.active && A->blamed) {
    char who[512];
    psim_alpa_fix_describe(&A->fix, A->blame, who, sizeof who);
    return psim_error(PSIM_EINPUT,
                      "%s: the partial strategy cannot be completed: no sharding on any stage "
                      "mesh satisfies %s together with the rest",
                      A->fix.file ? A->fix.file : "--fix", who);
  }
  return psim_error(PSIM_EFAILED, "alpa: no plan of %s fits on %s%s", A->m->name, A->c->name,
                    A->fix.active ? " under the partial strategy" : "");
}

psim_status psim_search_alpa(const psim_model *m, psim_cluster *c, const psim_search_options *o,
                             psim_search_result *r) {
  double t0 = psim_alpa_now_s();
  alpa A;
  psim_status st = psim_alpa_setup(&A, m, c, o);
  if (st == PSIM_OK)
    st = psim_alpa_search_all(&A);
  if (o->progress)
    fprintf(o->progress, "\n");
  double ts = psim_budget_clock_s();
  if (st == PSIM_OK && !o->quick)
    st = psim_alpa_add_virtual(&A);
  if (st == PSIM_OK)
    st = psim_alpa_simulate_top(&A, r, t0);
  A.sim_s = psim_budget_clock_s() - ts;
  if (st == PSIM_OK && !r->found)
    st = no_plan(&A);
  const alpa_cand *best = NULL;
  for (int32_t i = 0; i < A.n_top; i++)
    if (!best || A.top[i].estimate < best->estimate)
      best = &A.top[i];
  if (st == PSIM_OK)
    st = stats_json(&A, best, r);
  r->wall_s = psim_alpa_now_s() - t0;
  psim_alpa_teardown(&A);
  return st;
}

/* ---- one layer's ILP (tests and docs) ---- */

psim_status psim_alpa_layer_ilp(const psim_model *m, psim_cluster *c, int32_t layer, int32_t a0,
                                int32_t a1, int64_t micro_batch, int32_t n_micro,
                                psim_sh_mesh *mesh, psim_sh_layer *L, psim_ilp_solution *sol) {
  PSIM_CHECK(psim_sh_mesh_init(c, 0, a0, a1, mesh));
  psim_sh_params p = {micro_batch, n_micro, NULL, 0};
  PSIM_CHECK(psim_sh_layer_build(m, c, layer, mesh, &p, L));
  psim_ilp_problem prob;
  psim_sh_layer_problem(L, &prob);
  psim_ilp_solution_init(sol);
  return psim_ilp_solve(&prob, NULL, sol);
}
