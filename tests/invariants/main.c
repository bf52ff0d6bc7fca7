/* main.c - psim-invariants: properties that must hold for every (model, cluster, strategy)
 * drawn at random (issue 18; docs/testing.md, "The invariant suite").
 *
 *   psim-invariants [--seed N] [--cases N] [--only NAME,...] [--expect-fail NAME,...]
 *                   [--case SEED] [--time-limit S] [--shard K/N] [--engine ORDER]
 *                   [--no-shrink] [--list] [--verbose]
 *
 * Each case is drawn from its own seed (printed with every failure; --case SEED runs it
 * alone). A failing property is shrunk (fewer nodes, smaller dp/tp/pp, fewer layers, smaller
 * batch...) while it keeps failing, and the smallest case's model, cluster and strategy
 * documents are printed. --time-limit S stops drawing cases after S seconds (long runs).
 * --shard K/N runs only the cases i < --cases with i mod N = K (0 <= K < N): N processes
 * with K = 0..N-1 together run exactly the cases of one unsharded run (same seeds), so a long
 * run spreads over N cores (docs/testing.md, "The invariant suite").
 * --engine ORDER (ready, program-order, level-order, pass-level-order, issue-order,
 * stream-order; default ready, or PSIM_ENGINE) makes every simulation of the run serve resources in
 * that order (docs/simulator.md, "A fixed order per resource"); it sets PSIM_ENGINE, which
 * psim_sim_options_init reads. Properties named in --expect-fail are known failures (defects being
 * fixed): their failures are reported as such and do not fail the run. Exit 0 when every other
 * property passed, 1 otherwise, 2 on usage errors. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv.h"
#include "sim/core/clock.h"
#include "sim/engine/taskgraph.h"

#if defined(__SANITIZE_ADDRESS__)
#define INV_DEFAULT_CASES 60 /* a fifth under AddressSanitizer */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define INV_DEFAULT_CASES 60
#endif
#endif
#ifndef INV_DEFAULT_CASES
#define INV_DEFAULT_CASES 300
#endif

typedef struct inv_run {
  uint64_t seed;
  long cases;
  const char *only, *expect;
  bool shrink, verbose, one;
  uint64_t case_seed;
  long pass[32], fail[32], skip[32];
  uint64_t first_fail[32];
  double time_limit_s; /* stop drawing cases after this long; 0 = none */
  long shard, shards;  /* run the cases i with i mod shards == shard */
} inv_run;

static bool in_list(const char *list, const char *name) {
  if (!list)
    return false;
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, name, n))
      return true;
    p += len + (e != NULL);
  }
  return false;
}

/* Draws the case of seed cs; redraws (cs, attempt) until it loads. */
static bool draw_valid(uint64_t cs, inv_case *k, inv_inst *x, uint64_t *used) {
  for (int a = 0; a < 200; a++) {
    uint64_t s = cs + (uint64_t)a * 0x100000001ull;
    inv_draw(s, k);
    if (inv_inst_make(k, x)) {
      *used = s;
      return true;
    }
    inv_inst_destroy(x);
  }
  return false;
}

static inv_verdict run_prop(const inv_prop *p, const inv_case *k, char *why, size_t n) {
  inv_inst x;
  inv_verdict v = INV_SKIP;
  if (inv_inst_make(k, &x))
    v = p->fn(k, &x, why, n);
  inv_inst_destroy(&x);
  return v;
}

/* The next smaller variant number i of k (false when i is past the last). */
static bool smaller(const inv_case *k, int i, inv_case *o) {
  *o = *k;
  switch (i) {
  case 0: o->nodes = k->nodes - 1; break;
  case 1: o->per_node = k->per_node - 1; break;
  case 2: o->dp = k->dp / 2; break;
  case 3: o->tp = k->tp / 2; break;
  case 4: o->pp = k->pp / 2; break;
  case 5: o->vs = 1; break;
  case 6: o->layers = k->layers - 1; break;
  case 7: o->batch = k->batch / 2; break;
  case 8: o->mb = k->mb / 2; break;
  case 9: o->micro_batches = k->micro_batches / 2; break;
  case 10: o->hidden = k->hidden / 2; break;
  case 11: o->seq = k->seq / 2; break;
  case 12: o->heads = k->heads / 2; break;
  case 13: o->zero = 0; break;
  case 14: o->sp = false; break;
  case 15: o->overlap = false; break;
  case 16: o->allreduce = 0; break;
  case 17: o->nics = 0, o->oversub = 1; break;
  default: return false;
  }
  bool pos = o->nodes >= 1 && o->per_node >= 2 && o->dp >= 1 && o->tp >= 1 && o->pp >= 1 &&
             o->layers >= 1 && o->batch >= 1 && o->mb >= 1 && o->micro_batches >= 1 &&
             o->hidden >= 16 && o->seq >= 16 && o->heads >= 1;
  return pos && memcmp(o, k, sizeof *o) != 0 ? true : (o->nodes = -1, true);
}

static void shrink(const inv_prop *p, inv_case *k, char *why, size_t n) {
  char w2[1024];
  int tries = 0;
  for (bool again = true; again && tries < 300;) {
    again = false;
    inv_case o;
    for (int i = 0; smaller(k, i, &o); i++) {
      if (o.nodes < 0)
        continue;
      tries++;
      if (run_prop(p, &o, w2, sizeof w2) == INV_FAIL) {
        *k = o;
        snprintf(why, n, "%s", w2);
        again = true;
        break;
      }
    }
  }
}

static void print_case(const inv_case *k) {
  inv_inst x;
  char d[512];
  inv_case_describe(k, d, sizeof d);
  printf("    case: %s\n", d);
  if (!inv_inst_make(k, &x)) {
    inv_inst_destroy(&x);
    return;
  }
  const char *names[] = {"model", "cluster", "strategy"};
  cJSON *docs[] = {x.model_json, x.cluster_json, x.strategy_json};
  for (int i = 0; i < 3; i++) {
    char *s = cJSON_PrintUnformatted(docs[i]);
    printf("    %s: %s\n", names[i], s ? s : "?");
    cJSON_free(s);
  }
  inv_inst_destroy(&x);
}

static void report_fail(inv_run *r, int pi, const inv_case *k, uint64_t cs, const char *why) {
  const inv_prop *p = &inv_props[pi];
  bool known = in_list(r->expect, p->name);
  if (r->fail[pi]++ > 0) {
    if (r->verbose || r->fail[pi] <= 3)
      printf("  %s %s: case seed %llu: %s\n", known ? "known failure" : "FAIL", p->name,
             (unsigned long long)cs, why);
    return;
  }
  r->first_fail[pi] = cs;
  printf("%s %s %s\n  case seed %llu: %s\n", known ? "known failure" : "FAIL", p->name, p->what,
         (unsigned long long)cs, why);
  inv_case s = *k;
  char w[1024];
  snprintf(w, sizeof w, "%s", why);
  if (r->shrink) {
    shrink(p, &s, w, sizeof w);
    printf("  smallest failing case found: %s\n", w);
  }
  print_case(&s);
  fflush(stdout);
}

static void run_case(inv_run *r, long i) {
  uint64_t cs = r->one ? r->case_seed : r->seed * 1000003ull + (uint64_t)i, used = cs;
  inv_case k;
  inv_inst x;
  bool ok = r->one ? (inv_draw(cs, &k), inv_inst_make(&k, &x)) : draw_valid(cs, &k, &x, &used);
  inv_inst_destroy(&x);
  if (!ok)
    return;
  for (int pi = 0; pi < inv_n_props; pi++) {
    const inv_prop *p = &inv_props[pi];
    if ((r->only && !in_list(r->only, p->name)) || (!r->one && i % p->every))
      continue;
    char why[1024] = "";
    inv_verdict v = run_prop(p, &k, why, sizeof why);
    if (v == INV_PASS)
      r->pass[pi]++;
    else if (v == INV_SKIP)
      r->skip[pi]++;
    else
      report_fail(r, pi, &k, used, why);
  }
}

static int summary(inv_run *r, double secs, long cases) {
  int bad = 0;
  printf("invariants: %ld cases in %.1f s (%.1f cases/s), seed %llu, shard %ld/%ld\n", cases, secs,
         secs > 0 ? cases / secs : 0.0, (unsigned long long)r->seed, r->shard, r->shards);
  for (int pi = 0; pi < inv_n_props; pi++) {
    const inv_prop *p = &inv_props[pi];
    if (r->only && !in_list(r->only, p->name))
      continue;
    bool known = in_list(r->expect, p->name);
    const char *st = r->fail[pi] ? (known ? "KNOWN FAILURE" : "FAIL")
                                 : (known ? "pass (listed in --expect-fail: remove it?)" : "pass");
    printf("  %-10s %4ld pass %4ld fail %4ld skip  %s\n", p->name, r->pass[pi], r->fail[pi],
           r->skip[pi], st);
    bad += r->fail[pi] && !known;
  }
  return bad ? 1 : 0;
}

/* "K/N" with 0 <= K < N. */
static bool parse_shard(const char *v, inv_run *r) {
  char *e = NULL, *e2 = NULL;
  long k = strtol(v, &e, 10);
  if (e == v || *e != '/')
    return false;
  long n = strtol(e + 1, &e2, 10);
  if (e2 == e + 1 || *e2 || n < 1 || k < 0 || k >= n)
    return false;
  r->shard = k, r->shards = n;
  return true;
}

static int usage(void) {
  fprintf(stderr,
          "usage: psim-invariants [--seed N] [--cases N] [--only NAME,...] "
          "[--expect-fail NAME,...] [--case SEED] [--time-limit S] [--shard K/N] "
          "[--engine ready|program-order|level-order|pass-level-order|issue-order|stream-order] "
          "[--no-shrink] [--list] "
          "[--verbose]\n");
  return 2;
}

int main(int argc, char **argv) {
  inv_run r;
  memset(&r, 0, sizeof r);
  r.seed = 1;
  r.cases = INV_DEFAULT_CASES;
  r.shrink = true;
  r.shards = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--list")) {
      for (int p = 0; p < inv_n_props; p++)
        printf("%-10s %s\n", inv_props[p].name, inv_props[p].what);
      return 0;
    } else if (!strcmp(a, "--no-shrink")) {
      r.shrink = false;
    } else if (!strcmp(a, "--verbose")) {
      r.verbose = true;
    } else if (!v) {
      return usage();
    } else if (!strcmp(a, "--seed")) {
      r.seed = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(a, "--cases")) {
      r.cases = strtol(argv[++i], NULL, 10);
    } else if (!strcmp(a, "--time-limit")) {
      r.time_limit_s = strtod(argv[++i], NULL);
    } else if (!strcmp(a, "--shard")) {
      if (!parse_shard(argv[++i], &r))
        return usage();
    } else if (!strcmp(a, "--case")) {
      r.one = true, r.case_seed = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(a, "--only")) {
      r.only = argv[++i];
    } else if (!strcmp(a, "--expect-fail")) {
      r.expect = argv[++i];
    } else if (!strcmp(a, "--engine")) { /* every simulation reads it (psim_sim_options_init) */
      psim_engine_order o;
      if (!psim_engine_order_parse(argv[++i], &o) || setenv("PSIM_ENGINE", argv[i], 1) != 0)
        return usage();
    } else {
      return usage();
    }
  }
  double t0 = psim_clock_now_s();
  long n = r.one ? 1 : r.cases, done = 0;
  double secs = 0;
  for (long i = r.one ? 0 : r.shard; i < n && (r.time_limit_s <= 0 || secs < r.time_limit_s);
       i += r.one ? 1 : r.shards, done++) {
    run_case(&r, i);
    secs = psim_clock_now_s() - t0;
  }
  return summary(&r, secs, done);
}
