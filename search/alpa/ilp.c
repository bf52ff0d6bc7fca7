/* ilp.c - the sharding ILP (ilp.h) on GLPK. Every GLPK call of plansim is in
 * this file. GLPK fences, after igraph's glpk_support.c: glp_error_hook
 * longjmps back to the solve, which frees GLPK's environment and returns
 * PSIM_EFAILED with the captured terminal output; glp_term_hook keeps GLPK
 * quiet and captures its last line for messages; the branch-and-bound
 * callback polls psim_interrupted() and the time limit, CPU seconds of the solving thread
 * (search/budget.h: a loaded machine or a stopped process does not cut a solve short). */
#define _POSIX_C_SOURCE 200809L
#include "search/alpa/ilp.h"

#include <glpk.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "search/budget.h"
#include "sim/core/alloc.h"
#include "sim/engine/taskgraph.h"

void psim_ilp_options_init(psim_ilp_options *o) {
  o->time_limit_s = 10;
  o->presolve = true;
}

void psim_ilp_solution_init(psim_ilp_solution *s) {
  memset(s, 0, sizeof *s);
}

void psim_ilp_solution_destroy(psim_ilp_solution *s) {
  psim_free(s->choice);
  memset(s, 0, sizeof *s);
}

static double now_s(void) {
  return psim_budget_thread_s();
}

/* ---- GLPK fences (thread-local: GLPK's environment is per thread) ---- */

typedef struct glpk_fence {
  jmp_buf jmp;
  char last[256]; /* last line GLPK printed */
} glpk_fence;

static _Thread_local glpk_fence *fence;

static int term_hook(void *info, const char *s) {
  (void)info;
  if (fence && s && s[0] && s[0] != '\n') {
    snprintf(fence->last, sizeof fence->last, "%s", s);
    size_t n = strlen(fence->last);
    if (n > 0 && fence->last[n - 1] == '\n')
      fence->last[n - 1] = '\0';
  }
  return 1; /* never print */
}

static void error_hook(void *info) {
  (void)info;
  longjmp(fence->jmp, 1);
}

/* ---- model building ---- */

/* Choices of an edge's ends grouped by identical costs: choices of a whose
 * rows of the edge's cost matrix are equal (they lay out the tensor the same
 * way) form one class, likewise b's columns. The edge needs one y variable
 * per pair of classes rather than per pair of choices, with the rows
 *   sum_B y_AB = sum_{i in A} x_ai,  sum_A y_AB = sum_{j in B} x_bj,
 * which is the same linearisation on the classes' sums (exact: at one-hot x
 * exactly one y_AB is 1 and it carries the pair's cost). A GPT layer on a 2-D
 * mesh has ~18 strategies per group but ~6 distinct layouts per edge end, so
 * this cuts GLPK's columns about 5x. */
typedef struct edge_classes {
  int32_t na, nb;         /* classes of a's choices, of b's */
  int32_t *of_a, *of_b;   /* class of each choice */
  int32_t *rep_a, *rep_b; /* one choice per class */
} edge_classes;

typedef struct ilp_build {
  const psim_ilp_problem *p;
  edge_classes *ec; /* per edge */
  int32_t *x0;      /* first column of group g's x variables (1-based) */
  int32_t *y0;      /* first column of edge e's y variables */
  int32_t n_cols;
  double *warm; /* warm start, n_cols + 1 entries, or NULL */
  double gap;
  double end_s; /* the time limit on psim_budget_thread_s(), s */
  bool interrupted;
} ilp_build;

static void add_columns(glp_prob *lp, ilp_build *b) {
  const psim_ilp_problem *p = b->p;
  int32_t col = 1;
  for (int32_t g = 0; g < p->n_groups; g++) {
    b->x0[g] = col;
    glp_add_cols(lp, p->n_choices[g]);
    for (int32_t i = 0; i < p->n_choices[g]; i++, col++) {
      glp_set_col_kind(lp, col, GLP_BV);
      bool ok = !p->allowed || !p->allowed[g] || p->allowed[g][i];
      if (!ok)
        glp_set_col_bnds(lp, col, GLP_FX, 0, 0);
      glp_set_obj_coef(lp, col, p->cost[g][i]);
    }
  }
  for (int32_t e = 0; e < p->n_edges; e++) {
    const edge_classes *ec = &b->ec[e];
    int32_t nb = p->n_choices[p->edges[e].b];
    b->y0[e] = col;
    glp_add_cols(lp, ec->na * ec->nb);
    for (int32_t A = 0; A < ec->na; A++)
      for (int32_t B = 0; B < ec->nb; B++, col++) {
        glp_set_col_bnds(lp, col, GLP_DB, 0, 1);
        glp_set_obj_coef(lp, col, p->edges[e].cost[ec->rep_a[A] * nb + ec->rep_b[B]]);
      }
  }
  b->n_cols = col - 1;
}

/* One constraint row: sum of vals[k] * x[cols[k]] (type, rhs). */
static void add_row(glp_prob *lp, int32_t n, int *cols, double *vals, int type, double rhs) {
  int r = glp_add_rows(lp, 1);
  glp_set_row_bnds(lp, r, type, type == GLP_UP ? 0 : rhs, rhs);
  glp_set_mat_row(lp, r, n, cols - 1, vals - 1); /* GLPK arrays are 1-based */
}

/* The row of class C of one end of edge e (side_a: of its end a):
 *   sum over the other end's classes K of y_CK - sum_{i in C} x_i = 0. */
static void add_class_row(glp_prob *lp, const ilp_build *b, int32_t e, bool side_a, int32_t C,
                          int *cols, double *vals) {
  const psim_ilp_edge *ed = &b->p->edges[e];
  const edge_classes *ec = &b->ec[e];
  int32_t g = side_a ? ed->a : ed->b, n = 0;
  const int32_t *of = side_a ? ec->of_a : ec->of_b;
  for (int32_t K = 0; K < (side_a ? ec->nb : ec->na); K++, n++) {
    cols[n] = b->y0[e] + (side_a ? C * ec->nb + K : K * ec->nb + C);
    vals[n] = 1;
  }
  for (int32_t i = 0; i < b->p->n_choices[g]; i++)
    if (of[i] == C) {
      cols[n] = b->x0[g] + i;
      vals[n++] = -1;
    }
  add_row(lp, n, cols, vals, GLP_FX, 0);
}

static void add_edge_rows(glp_prob *lp, const ilp_build *b, int32_t e, int *cols, double *vals) {
  for (int32_t A = 0; A < b->ec[e].na; A++)
    add_class_row(lp, b, e, true, A, cols, vals);
  for (int32_t B = 0; B < b->ec[e].nb; B++)
    add_class_row(lp, b, e, false, B, cols, vals);
}

static bool same_row(const psim_ilp_edge *ed, int32_t nb, int32_t i, int32_t k) {
  return memcmp(ed->cost + (size_t)i * (size_t)nb, ed->cost + (size_t)k * (size_t)nb,
                (size_t)nb * sizeof *ed->cost) == 0;
}

static bool same_column(const psim_ilp_edge *ed, int32_t na, int32_t nb, int32_t j, int32_t k) {
  for (int32_t i = 0; i < na; i++)
    if (memcmp(&ed->cost[i * nb + j], &ed->cost[i * nb + k], sizeof *ed->cost) != 0)
      return false;
  return true;
}

/* Classes of identical rows (a) and columns (b) of edge e's cost matrix;
 * buf holds 2 * (na + nb) ints. Returns the edge's y column count. */
static size_t edge_classify(const psim_ilp_problem *p, int32_t e, edge_classes *ec, int32_t *buf) {
  const psim_ilp_edge *ed = &p->edges[e];
  int32_t na = p->n_choices[ed->a], nb = p->n_choices[ed->b];
  ec->of_a = buf;
  ec->rep_a = buf + na;
  ec->of_b = buf + 2 * na;
  ec->rep_b = buf + 2 * na + nb;
  ec->na = ec->nb = 0;
  for (int32_t i = 0; i < na; i++) {
    int32_t A = 0;
    while (A < ec->na && !same_row(ed, nb, i, ec->rep_a[A]))
      A++;
    if (A == ec->na)
      ec->rep_a[ec->na++] = i;
    ec->of_a[i] = A;
  }
  for (int32_t j = 0; j < nb; j++) {
    int32_t B = 0;
    while (B < ec->nb && !same_column(ed, na, nb, j, ec->rep_b[B]))
      B++;
    if (B == ec->nb)
      ec->rep_b[ec->nb++] = j;
    ec->of_b[j] = B;
  }
  return (size_t)ec->na * (size_t)ec->nb;
}

static void add_rows(glp_prob *lp, const ilp_build *b, int *cols, double *vals) {
  const psim_ilp_problem *p = b->p;
  for (int32_t g = 0; g < p->n_groups; g++) {
    for (int32_t i = 0; i < p->n_choices[g]; i++) {
      cols[i] = b->x0[g] + i;
      vals[i] = 1;
    }
    add_row(lp, p->n_choices[g], cols, vals, GLP_FX, 1);
  }
  for (int32_t e = 0; e < p->n_edges; e++)
    add_edge_rows(lp, b, e, cols, vals);
  if (!p->mem)
    return;
  int32_t n = 0;
  for (int32_t g = 0; g < p->n_groups; g++)
    for (int32_t i = 0; i < p->n_choices[g]; i++) {
      cols[n] = b->x0[g] + i;
      vals[n++] = p->mem[g][i];
    }
  add_row(lp, n, cols, vals, GLP_UP, p->mem_limit);
}

/* The warm start as a full column vector (x one-hot, y their products). */
static void fill_warm(ilp_build *b) {
  const psim_ilp_problem *p = b->p;
  memset(b->warm, 0, (size_t)(b->n_cols + 1) * sizeof *b->warm);
  for (int32_t g = 0; g < p->n_groups; g++)
    b->warm[b->x0[g] + p->warm[g]] = 1;
  for (int32_t e = 0; e < p->n_edges; e++) {
    const edge_classes *ec = &b->ec[e];
    b->warm[b->y0[e] + ec->of_a[p->warm[p->edges[e].a]] * ec->nb +
            ec->of_b[p->warm[p->edges[e].b]]] = 1;
  }
}

static void callback(glp_tree *tree, void *info) {
  ilp_build *b = info;
  if (psim_interrupted()) {
    b->interrupted = true;
    glp_ios_terminate(tree);
    return;
  }
  if (psim_budget_thread_s() > b->end_s) { /* the incumbent, if any, is returned */
    glp_ios_terminate(tree);
    return;
  }
  int reason = glp_ios_reason(tree);
  if (reason == GLP_IBINGO || reason == GLP_ISELECT)
    b->gap = glp_ios_mip_gap(tree);
  /* The warm start applies when the presolver kept the columns as they are. */
  if (reason == GLP_IHEUR && b->warm && glp_get_num_cols(glp_ios_get_prob(tree)) == b->n_cols) {
    glp_ios_heur_sol(tree, b->warm);
    b->warm = NULL;
  }
}

static psim_status read_solution(glp_prob *lp, const ilp_build *b, psim_ilp_solution *s) {
  const psim_ilp_problem *p = b->p;
  for (int32_t g = 0; g < p->n_groups; g++) {
    s->choice[g] = 0;
    for (int32_t i = 0; i < p->n_choices[g]; i++)
      if (glp_mip_col_val(lp, b->x0[g] + i) > 0.5)
        s->choice[g] = i;
  }
  s->objective = psim_ilp_objective(p, s->choice);
  return PSIM_OK;
}

static psim_status interpret(glp_prob *lp, int rc, ilp_build *b, psim_ilp_solution *s) {
  if (b->interrupted)
    return psim_error(PSIM_EINTERRUPTED, "sharding ILP interrupted");
  int status = glp_mip_status(lp);
  if (rc == GLP_ENOPFS || rc == GLP_ENODFS || status == GLP_NOFEAS)
    return psim_error(PSIM_EFAILED,
                      "sharding ILP is infeasible: no choice of strategies of its %d op groups "
                      "meets the memory limit and the fixed choices",
                      (int)b->p->n_groups);
  if (status != GLP_OPT && status != GLP_FEAS)
    return psim_error(PSIM_EFAILED, "sharding ILP: GLPK found no solution (code %d)%s%s", rc,
                      fence->last[0] ? ": " : "", fence->last);
  s->optimal = status == GLP_OPT;
  s->gap = s->optimal ? 0 : b->gap;
  return read_solution(lp, b, s);
}

static psim_status solve_glpk(glp_prob *lp, ilp_build *b, const psim_ilp_options *o,
                              psim_ilp_solution *s) {
  size_t rows_max = 0;
  for (int32_t g = 0; g < b->p->n_groups; g++)
    rows_max += (size_t)b->p->n_choices[g];
  int *cols = psim_malloc((rows_max + 2) * sizeof *cols);
  double *vals = psim_malloc((rows_max + 2) * sizeof *vals);
  psim_status st = cols && vals ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory (ILP)");
  if (st == PSIM_OK) {
    glp_set_obj_dir(lp, GLP_MIN);
    add_columns(lp, b);
    add_rows(lp, b, cols, vals);
    if (b->warm)
      fill_warm(b);
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = o->presolve ? GLP_ON : GLP_OFF;
    b->end_s = psim_budget_thread_s() + o->time_limit_s; /* CPU, not GLPK's wall tm_lim */
    parm.cb_func = callback;
    parm.cb_info = b;
    int rc = glp_intopt(lp, &parm);
    st = interpret(lp, rc, b, s);
  }
  psim_free(cols);
  psim_free(vals);
  return st;
}

static psim_status solve_fenced(const psim_ilp_problem *p, const psim_ilp_options *o, ilp_build *b,
                                psim_ilp_solution *s) {
  glpk_fence f;
  f.last[0] = '\0';
  glpk_fence *volatile saved = fence;
  fence = &f;
  glp_term_hook(term_hook, NULL);
  glp_error_hook(error_hook, NULL);
  if (setjmp(f.jmp)) {
    glp_free_env(); /* frees every GLPK object; the problem is gone */
    fence = saved;
    return psim_error(PSIM_EFAILED, "GLPK failed in the sharding ILP: %s",
                      f.last[0] ? f.last : "(no message)");
  }
  glp_prob *lp = glp_create_prob();
  psim_status st = solve_glpk(lp, b, o, s);
  glp_delete_prob(lp);
  glp_error_hook(NULL, NULL);
  glp_term_hook(NULL, NULL);
  fence = saved;
  (void)p;
  return st;
}

static psim_status check_problem(const psim_ilp_problem *p) {
  if (p->n_groups < 1)
    return psim_error(PSIM_EINPUT, "sharding ILP with no op groups");
  for (int32_t g = 0; g < p->n_groups; g++)
    if (p->n_choices[g] < 1)
      return psim_error(PSIM_EINPUT, "sharding ILP: op group %d has no strategy", (int)g);
  return PSIM_OK;
}

psim_status psim_ilp_solve(const psim_ilp_problem *p, const psim_ilp_options *o,
                           psim_ilp_solution *s) {
  psim_ilp_options def;
  if (!o) {
    psim_ilp_options_init(&def);
    o = &def;
  }
  PSIM_CHECK(check_problem(p));
  double t0 = now_s();
  ilp_build b = {.p = p, .gap = 0};
  size_t cls_ints = 0;
  for (int32_t e = 0; e < p->n_edges; e++)
    cls_ints += 2 * (size_t)(p->n_choices[p->edges[e].a] + p->n_choices[p->edges[e].b]);
  int32_t *cls_buf = psim_malloc((cls_ints > 0 ? cls_ints : 1) * sizeof *cls_buf);
  b.ec = psim_malloc((size_t)(p->n_edges > 0 ? p->n_edges : 1) * sizeof *b.ec);
  b.x0 = psim_malloc((size_t)p->n_groups * sizeof *b.x0);
  b.y0 = psim_malloc((size_t)(p->n_edges > 0 ? p->n_edges : 1) * sizeof *b.y0);
  s->choice = psim_malloc((size_t)p->n_groups * sizeof *s->choice);
  bool alloc_ok = cls_buf && b.ec && b.x0 && b.y0 && s->choice;
  size_t cols = 1;
  for (int32_t g = 0; g < p->n_groups; g++)
    cols += (size_t)p->n_choices[g];
  for (int32_t e = 0, off = 0; alloc_ok && e < p->n_edges; e++) {
    cols += edge_classify(p, e, &b.ec[e], cls_buf + off);
    off += 2 * (p->n_choices[p->edges[e].a] + p->n_choices[p->edges[e].b]);
  }
  bool need_warm = p->warm && isfinite(psim_ilp_objective(p, p->warm));
  double *warm = need_warm ? psim_malloc(cols * sizeof *warm) : NULL;
  b.warm = warm;
  psim_status st = alloc_ok && (warm || !need_warm)
                       ? solve_fenced(p, o, &b, s)
                       : psim_error(PSIM_ENOMEM, "out of memory (ILP)");
  /* A time-out keeps the better of the incumbent and the warm start. */
  if (st == PSIM_OK && warm && psim_ilp_objective(p, p->warm) < s->objective) {
    memcpy(s->choice, p->warm, (size_t)p->n_groups * sizeof *s->choice);
    s->objective = psim_ilp_objective(p, p->warm);
  }
  psim_free(warm);
  psim_free(cls_buf);
  psim_free(b.ec);
  psim_free(b.x0);
  psim_free(b.y0);
  s->solve_s = now_s() - t0;
  return st;
}

void psim_ilp_thread_exit(void) {
  glp_free_env(); /* this thread's GLPK environment (GLPK keeps one per thread) */
}

/* ---- reference objective and brute force (no GLPK) ---- */

static bool choice_ok(const psim_ilp_problem *p, int32_t g, int32_t i) {
  return !p->allowed || !p->allowed[g] || p->allowed[g][i];
}

double psim_ilp_objective(const psim_ilp_problem *p, const int32_t *choice) {
  double obj = 0, mem = 0;
  for (int32_t g = 0; g < p->n_groups; g++) {
    if (!choice_ok(p, g, choice[g]))
      return INFINITY;
    obj += p->cost[g][choice[g]];
    if (p->mem)
      mem += p->mem[g][choice[g]];
  }
  for (int32_t e = 0; e < p->n_edges; e++) {
    const psim_ilp_edge *ed = &p->edges[e];
    obj += ed->cost[choice[ed->a] * p->n_choices[ed->b] + choice[ed->b]];
  }
  if (p->mem && mem > p->mem_limit * (1 + 1e-12))
    return INFINITY;
  return obj;
}

psim_status psim_ilp_brute_force(const psim_ilp_problem *p, psim_ilp_solution *s) {
  PSIM_CHECK(check_problem(p));
  double total = 1;
  for (int32_t g = 0; g < p->n_groups; g++)
    total *= p->n_choices[g];
  if (total > 1e7)
    return psim_error(PSIM_ELIMIT, "brute force over %.3g assignments refused", total);
  int32_t *cur = psim_calloc((size_t)p->n_groups, sizeof *cur);
  s->choice = psim_calloc((size_t)p->n_groups, sizeof *s->choice);
  if (!cur || !s->choice) {
    psim_free(cur);
    return psim_error(PSIM_ENOMEM, "out of memory (brute force)");
  }
  s->objective = INFINITY;
  for (;;) {
    double v = psim_ilp_objective(p, cur);
    if (v < s->objective) {
      s->objective = v;
      memcpy(s->choice, cur, (size_t)p->n_groups * sizeof *cur);
    }
    int32_t g = 0;
    while (g < p->n_groups && ++cur[g] == p->n_choices[g])
      cur[g++] = 0;
    if (g == p->n_groups)
      break;
  }
  psim_free(cur);
  s->optimal = true;
  if (!isfinite(s->objective))
    return psim_error(PSIM_EFAILED, "infeasible: no assignment meets the constraints");
  return PSIM_OK;
}
