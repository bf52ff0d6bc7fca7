/* faults.c - stragglers, faults, elastic joins and several iterations (issue 8).
 * The model is described in faults.h and docs/faults.md. */
#include "sim/faults.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/build/ps.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"
#include "sim/core/units.h"

void psim_fault_options_init(psim_fault_options *o) {
  memset(o, 0, sizeof *o);
  o->iterations = 1;
  o->detect_timeout_s = 30;
  o->rebuild_s = 5;
  o->failover_s = 1;
  o->restart_s = 120;
  o->checkpoint_every = 100;
  o->checkpoint_write_bw = 2e9;
  o->checkpoint_read_bw = 4e9;
  o->elastic = true;
}

/* ---- options ------------------------------------------------------------------- */

static psim_status parse_time(const char *opt, const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end != text && *end == '\0') {
    *out = v;
  } else if (psim_units_parse(text, PSIM_UNIT_TIME, out) != PSIM_OK) {
    return psim_error(PSIM_EINPUT, "%s: '%s' is not a time (\"30\", \"30 s\", \"2 min\")", opt,
                      text);
  }
  if (!(*out >= 0) || !isfinite(*out))
    return psim_error(PSIM_EINPUT, "%s: the time must be >= 0, not '%s'", opt, text);
  return PSIM_OK;
}

static psim_status copy_name(const char *opt, const char *s, size_t n, char *out) {
  if (n == 0 || n >= PSIM_FAULTS_NAME)
    return psim_error(PSIM_EINPUT, "%s: empty or too long device name in '%s'", opt, s);
  memcpy(out, s, n);
  out[n] = '\0';
  return PSIM_OK;
}

/* "A-B" (split at the first '-'; device names with '-' use indices) or "A". */
static psim_status parse_ends(const char *opt, const char *s, size_t n, bool link, char *a,
                              char *b) {
  b[0] = '\0';
  if (!link)
    return copy_name(opt, s, n, a);
  const char *dash = memchr(s, '-', n);
  if (!dash)
    return psim_error(PSIM_EINPUT, "%s: expected A-B (two device names), not '%s'", opt, s);
  PSIM_CHECK(copy_name(opt, s, (size_t)(dash - s), a));
  return copy_name(opt, dash + 1, n - (size_t)(dash - s) - 1, b);
}

static psim_status parse_slow(const char *opt, const char *val, bool link, psim_slow_spec *sp,
                              int32_t *n) {
  if (*n >= PSIM_FAULTS_MAX)
    return psim_error(PSIM_ELIMIT, "%s: at most %d entries", opt, PSIM_FAULTS_MAX);
  const char *eq = strrchr(val, '=');
  if (!eq)
    return psim_error(PSIM_EINPUT, "%s: expected %s=FACTOR, not '%s'", opt, link ? "A-B" : "DEVICE",
                      val);
  psim_slow_spec *e = &sp[*n];
  PSIM_CHECK(parse_ends(opt, val, (size_t)(eq - val), link, e->a, e->b));
  char *end;
  e->factor = strtod(eq + 1, &end);
  if (end == eq + 1 || *end || !(e->factor > 0) || e->factor > 1e6)
    return psim_error(PSIM_EINPUT, "%s: the factor must be in (0, 1e6], not '%s'", opt, eq + 1);
  (*n)++;
  return PSIM_OK;
}

static psim_status parse_event(psim_fault_options *o, const char *opt, const char *val,
                               psim_fault_kind kind) {
  if (o->n_events >= PSIM_FAULTS_MAX)
    return psim_error(PSIM_ELIMIT, "at most %d --fail/--fail-link/--join events", PSIM_FAULTS_MAX);
  const char *at = strrchr(val, '@');
  if (!at)
    return psim_error(PSIM_EINPUT, "%s: expected %s@TIME, not '%s'", opt,
                      kind == PSIM_FAULT_FAIL_LINK ? "A-B" : "DEVICE", val);
  psim_fault_event *e = &o->events[o->n_events];
  e->kind = kind;
  PSIM_CHECK(parse_ends(opt, val, (size_t)(at - val), kind == PSIM_FAULT_FAIL_LINK, e->a, e->b));
  PSIM_CHECK(parse_time(opt, at + 1, &e->time_s));
  o->n_events++;
  return PSIM_OK;
}

static psim_status parse_random(psim_fault_options *o, const char *val) {
  char *end;
  unsigned long long seed = strtoull(val, &end, 10);
  if (end == val || *end != ':')
    return psim_error(PSIM_EINPUT, "--slow-random: expected SEED:SIGMA, not '%s'", val);
  const char *sg = end + 1;
  o->random_sigma = strtod(sg, &end);
  if (end == sg || *end || !(o->random_sigma >= 0) || o->random_sigma > 10)
    return psim_error(PSIM_EINPUT, "--slow-random: SIGMA must be in [0, 10], not '%s'", sg);
  o->random_seed = seed;
  return PSIM_OK;
}

/* Most iterations one run simulates: every iteration's time is kept and
 * printed (--json lists them), ~300 MB of memory at this bound. */
#define PSIM_FAULTS_MAX_ITERATIONS 1000000

static psim_status parse_count(const char *opt, const char *val, int32_t lo, int32_t hi,
                               int32_t *out) {
  char *end;
  errno = 0;
  long v = strtol(val, &end, 10);
  if (end == val || *end || errno == ERANGE || v < lo || v > hi)
    return psim_error(PSIM_EINPUT, "%s: expected an integer from %d to %d, not '%s'", opt, (int)lo,
                      (int)hi, val);
  *out = (int32_t)v;
  return PSIM_OK;
}

static psim_status parse_bw(const char *opt, const char *val, double *out) {
  if (psim_units_parse(val, PSIM_UNIT_BANDWIDTH, out) != PSIM_OK || !(*out > 0))
    return psim_error(PSIM_EINPUT, "%s: expected a bandwidth (\"2 GB/s\"), not '%s'", opt, val);
  return PSIM_OK;
}

static psim_status parse_valued(psim_fault_options *o, const char *arg, const char *val) {
  if (!strcmp(arg, "--iterations"))
    return parse_count(arg, val, 1, PSIM_FAULTS_MAX_ITERATIONS, &o->iterations);
  if (!strcmp(arg, "--slow"))
    return parse_slow(arg, val, false, o->slow, &o->n_slow);
  if (!strcmp(arg, "--slow-link"))
    return parse_slow(arg, val, true, o->slow_link, &o->n_slow_link);
  if (!strcmp(arg, "--slow-random"))
    return parse_random(o, val);
  if (!strcmp(arg, "--fail"))
    return parse_event(o, arg, val, PSIM_FAULT_FAIL);
  if (!strcmp(arg, "--fail-link"))
    return parse_event(o, arg, val, PSIM_FAULT_FAIL_LINK);
  if (!strcmp(arg, "--join"))
    return parse_event(o, arg, val, PSIM_FAULT_JOIN);
  if (!strcmp(arg, "--detect-timeout"))
    return parse_time(arg, val, &o->detect_timeout_s);
  if (!strcmp(arg, "--rebuild-time"))
    return parse_time(arg, val, &o->rebuild_s);
  if (!strcmp(arg, "--failover-time"))
    return parse_time(arg, val, &o->failover_s);
  if (!strcmp(arg, "--restart-time"))
    return parse_time(arg, val, &o->restart_s);
  if (!strcmp(arg, "--checkpoint-every"))
    return parse_count(arg, val, 0, INT32_MAX, &o->checkpoint_every);
  if (!strcmp(arg, "--checkpoint-write-bw"))
    return parse_bw(arg, val, &o->checkpoint_write_bw);
  return parse_bw(arg, val, &o->checkpoint_read_bw); /* --checkpoint-read-bw */
}

int psim_fault_option(psim_fault_options *o, const char *arg, const char *val, psim_status *st) {
  static const char *const valued[] = {"--iterations",
                                       "--slow",
                                       "--slow-link",
                                       "--slow-random",
                                       "--fail",
                                       "--fail-link",
                                       "--join",
                                       "--detect-timeout",
                                       "--rebuild-time",
                                       "--failover-time",
                                       "--restart-time",
                                       "--checkpoint-every",
                                       "--checkpoint-write-bw",
                                       "--checkpoint-read-bw",
                                       NULL};
  *st = PSIM_OK;
  if (!strcmp(arg, "--no-elastic")) {
    o->elastic = false;
    return 1;
  }
  for (int i = 0; valued[i]; i++) {
    if (strcmp(arg, valued[i]) != 0)
      continue;
    if (!val) {
      *st = psim_error(PSIM_EINPUT, "%s needs a value", arg);
      return -1;
    }
    *st = parse_valued(o, arg, val);
    return *st == PSIM_OK ? 2 : -1;
  }
  return 0;
}

bool psim_fault_options_timeline(const psim_fault_options *o) {
  return o->iterations > 1 || o->n_events > 0 || o->random_sigma > 0;
}

/* ---- names ---------------------------------------------------------------------- */

static const char *option_of(psim_fault_kind k) {
  return k == PSIM_FAULT_FAIL ? "--fail" : k == PSIM_FAULT_FAIL_LINK ? "--fail-link" : "--join";
}

/* Devices whose name ends in "." + name: users type the short "gpu5" of a
 * preset's "node0.gpu5". Returns the count; *first is the first match. */
static int32_t suffix_matches(const psim_cluster *c, const char *name, int32_t *first) {
  size_t n = strlen(name);
  int32_t hits = 0;
  for (int32_t d = 0; d < c->n_devices; d++) {
    const char *dn = c->vertex_names[d];
    size_t l = strlen(dn);
    if (l > n && dn[l - n - 1] == '.' && strcmp(dn + l - n, name) == 0 && hits++ == 0)
      *first = d;
  }
  return hits;
}

/* The likely meaning of an unknown short name ("" when none): the message
 * has to say what to type instead. */
static void guess(const psim_cluster *c, const char *name, char *buf, size_t size) {
  int32_t first = -1, hits = suffix_matches(c, name, &first);
  buf[0] = '\0';
  if (hits == 1)
    snprintf(buf, size, "; did you mean '%s'?", c->vertex_names[first]);
  else if (hits > 1)
    snprintf(buf, size, "; %d devices end in '.%s', e.g. '%s' (index %d)", (int)hits, name,
             c->vertex_names[first], (int)first);
}

static psim_status unknown_name(const psim_cluster *c, const char *opt, const char *name,
                                bool device_only) {
  char hint[256];
  int32_t nd = c->n_devices, nv = c->n_vertices;
  guess(c, name, hint, sizeof hint);
  if (device_only || nv == nd)
    return psim_error(PSIM_EINPUT,
                      "%s: no %s '%s' in cluster %s: name a device by its index (0-%d) or its "
                      "name ('%s' to '%s')%s",
                      opt, device_only ? "device" : "vertex", name, c->name, (int)nd - 1,
                      c->vertex_names[0], c->vertex_names[nd - 1], hint);
  char sw[32];
  snprintf(sw, sizeof sw, nv - nd > 1 ? "switches %d-%d" : "switch %d", (int)nd, (int)nv - 1);
  return psim_error(PSIM_EINPUT,
                    "%s: no vertex '%s' in cluster %s: name a link end by its index (devices "
                    "0-%d, %s) or its name ('%s' to '%s'; switches such as '%s')%s",
                    opt, name, c->name, (int)nd - 1, sw, c->vertex_names[0],
                    c->vertex_names[nd - 1], c->vertex_names[nv - 1], hint);
}

/* A device (device_only) or any vertex, by name or index. */
static psim_status find_vertex(const psim_cluster *c, const char *opt, const char *name,
                               bool device_only, int32_t *out) {
  int32_t v = device_only ? psim_cluster_find_device(c, name) : psim_cluster_find_vertex(c, name);
  if (v < 0) {
    char *end;
    long i = strtol(name, &end, 10);
    int32_t lim = device_only ? c->n_devices : c->n_vertices;
    if (end != name && !*end && i >= 0 && i < lim)
      v = (int32_t)i;
  }
  if (v < 0)
    return unknown_name(c, opt, name, device_only);
  *out = v;
  return PSIM_OK;
}

static bool joins(const psim_link *l, int32_t a, int32_t b) {
  return (l->src == a && l->dst == b) || (l->src == b && l->dst == a);
}

/* Vertices a and b, with at least one link between them. */
static psim_status find_link(const psim_cluster *c, const char *opt, const char *a, const char *b,
                             int32_t *va, int32_t *vb) {
  PSIM_CHECK(find_vertex(c, opt, a, false, va));
  PSIM_CHECK(find_vertex(c, opt, b, false, vb));
  for (int32_t l = 0; l < c->n_links; l++)
    if (joins(&c->links[l], *va, *vb))
      return PSIM_OK;
  return psim_error(PSIM_EINPUT, "%s: no link between '%s' and '%s' in cluster %s", opt, a, b,
                    c->name);
}

psim_status psim_fault_options_check(const psim_fault_options *o, const psim_cluster *c) {
  int32_t v, w;
  for (int32_t i = 0; i < o->n_slow; i++)
    PSIM_CHECK(find_vertex(c, "--slow", o->slow[i].a, true, &v));
  for (int32_t i = 0; i < o->n_slow_link; i++)
    PSIM_CHECK(find_link(c, "--slow-link", o->slow_link[i].a, o->slow_link[i].b, &v, &w));
  for (int32_t i = 0; i < o->n_events; i++) {
    const psim_fault_event *e = &o->events[i];
    if (e->kind == PSIM_FAULT_FAIL_LINK)
      PSIM_CHECK(find_link(c, option_of(e->kind), e->a, e->b, &v, &w));
    else
      PSIM_CHECK(find_vertex(c, option_of(e->kind), e->a, true, &v));
  }
  return PSIM_OK;
}

/* ---- slowdowns ----------------------------------------------------------------- */

psim_status psim_faults_apply_slowdowns(const psim_fault_options *o, psim_cluster *c) {
  for (int32_t i = 0; i < o->n_slow; i++) {
    int32_t d;
    PSIM_CHECK(find_vertex(c, "--slow", o->slow[i].a, true, &d));
    c->devices[d].slowdown = o->slow[i].factor;
  }
  for (int32_t i = 0; i < o->n_slow_link; i++) {
    int32_t a, b;
    PSIM_CHECK(find_link(c, "--slow-link", o->slow_link[i].a, o->slow_link[i].b, &a, &b));
    for (int32_t l = 0; l < c->n_links; l++)
      if (joins(&c->links[l], a, b))
        c->links[l].slowdown = o->slow_link[i].factor;
  }
  return PSIM_OK;
}

/* Deterministic N(0,1) draw for (seed, iteration, device): splitmix64 + Box-Muller. */
static uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static double normal(uint64_t seed, int64_t it, int32_t d) {
  uint64_t h = splitmix(splitmix(seed) ^ splitmix((uint64_t)it * 1000003u + (uint64_t)d));
  double u1 = ((double)(h >> 11) + 0.5) / 9007199254740992.0;
  double u2 = ((double)(splitmix(h) >> 11) + 0.5) / 9007199254740992.0;
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- strategy edits ------------------------------------------------------------ */

static int32_t batch_index(const psim_model *m, const psim_op *op) {
  int32_t bd = m->role_dim[PSIM_ROLE_BATCH];
  for (int32_t i = 0; i < op->n_dims; i++)
    if (bd >= 0 && op->dims[i].dim == bd)
      return i;
  return -1;
}

/* Coordinate of shard `shard` along dim i (row-major over op->dims). */
static int32_t coord_of(const psim_op *op, const psim_op_config *cfg, int32_t shard, int32_t i) {
  int32_t rem = shard;
  for (int32_t j = op->n_dims - 1; j > i; j--)
    rem /= cfg->degree[j];
  return rem % cfg->degree[i];
}

static int32_t entry_of(const psim_op_config *cfg, int32_t dev) {
  for (int32_t e = 0; e < cfg->n_devices; e++)
    if (cfg->devices[e] == dev)
      return e;
  return -1;
}

/* Removes the slice of batch index j from op o's config. */
static void drop_slice(const psim_op *op, psim_op_config *cfg, int32_t ib, int32_t j) {
  int32_t n = 0;
  for (int32_t e = 0; e < cfg->n_devices; e++)
    if (coord_of(op, cfg, e / cfg->replicas, ib) != j)
      cfg->devices[n++] = cfg->devices[e];
  cfg->n_devices = n;
  cfg->degree[ib]--;
}

/* Stage device sets: keep only devices some op still uses. */
static psim_status trim_stages(const psim_cluster *c, psim_strategy *s) {
  uint8_t *used = psim_calloc((size_t)c->n_devices, 1);
  if (!used)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t o = 0; o < s->n_ops; o++)
    for (int32_t e = 0; e < s->ops[o].n_devices; e++)
      used[s->ops[o].devices[e]] = 1;
  int32_t nv = s->n_stages * (s->virtual_stages > 0 ? s->virtual_stages : 1);
  for (int32_t v = 0; v < nv; v++) {
    psim_stage *st = &s->stages[v];
    int32_t n = 0;
    for (int32_t k = 0; k < st->n_devices; k++)
      if (used[st->devices[k]])
        st->devices[n++] = st->devices[k];
    st->n_devices = n;
  }
  psim_free(used);
  return PSIM_OK;
}

static void drop_server(psim_strategy *s, int32_t dev) {
  int32_t n = 0;
  for (int32_t i = 0; i < s->ps.n_servers; i++)
    if (s->ps.servers[i] != dev)
      s->ps.servers[n++] = s->ps.servers[i];
  s->ps.n_servers = n;
  if (s->ps.replicas > n)
    s->ps.replicas = n > 0 ? n : 1;
}

static psim_status drop_ops(const psim_model *m, psim_strategy *s, int32_t dev) {
  for (int32_t o = 0; o < s->n_ops; o++) {
    psim_op_config *cfg = &s->ops[o];
    int32_t e = entry_of(cfg, dev);
    if (e < 0)
      continue;
    int32_t ib = batch_index(m, &m->ops[o]);
    if (ib < 0 || cfg->degree[ib] <= 1)
      return psim_error(PSIM_EINPUT,
                        "op %s on device %d is not split on the batch dim: no "
                        "data-parallel redundancy",
                        m->ops[o].name, (int)dev);
    drop_slice(&m->ops[o], cfg, ib, coord_of(&m->ops[o], cfg, e / cfg->replicas, ib));
  }
  return PSIM_OK;
}

psim_status psim_faults_drop_device(const psim_model *m, const psim_cluster *c,
                                    const psim_strategy *s, int32_t dev, psim_strategy *out) {
  PSIM_CHECK(psim_strategy_copy(s, out));
  psim_status st = drop_ops(m, out, dev);
  if (st == PSIM_OK && out->sync == PSIM_SYNC_PS) {
    drop_server(out, dev);
    if (out->ps.n_servers == 0)
      st = psim_error(PSIM_EINPUT, "no parameter server left");
  }
  if (st == PSIM_OK)
    st = trim_stages(c, out);
  if (st == PSIM_OK && out->tmpl.dp > 1 && out->sync != PSIM_SYNC_PS)
    out->tmpl.dp--;
  if (st == PSIM_OK)
    st = psim_strategy_validate(out, m, c, "the strategy after the failure");
  if (st != PSIM_OK)
    psim_strategy_destroy(out);
  return st;
}

static psim_status add_to_op(const psim_model *m, psim_op_config *cfg, int32_t o, int32_t dev) {
  int32_t ib = batch_index(m, &m->ops[o]);
  for (int32_t i = 0; i < m->ops[o].n_dims; i++)
    if (i != ib && cfg->degree[i] != 1)
      return psim_error(PSIM_EINPUT, "join: op %s is split on more than the batch dim",
                        m->ops[o].name);
  if (ib < 0 || cfg->replicas != 1)
    return psim_error(PSIM_EINPUT, "join: op %s is not data-parallel", m->ops[o].name);
  int32_t *d = psim_realloc(cfg->devices, sizeof *d * ((size_t)cfg->n_devices + 1));
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory");
  cfg->devices = d;
  d[cfg->n_devices++] = dev;
  cfg->degree[ib]++;
  return PSIM_OK;
}

static psim_status add_to_stage(psim_stage *st, int32_t dev) {
  for (int32_t k = 0; k < st->n_devices; k++)
    if (st->devices[k] == dev)
      return PSIM_OK;
  int32_t *d = psim_realloc(st->devices, sizeof *d * ((size_t)st->n_devices + 1));
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory");
  st->devices = d;
  d[st->n_devices++] = dev;
  return PSIM_OK;
}

psim_status psim_faults_add_device(const psim_model *m, const psim_cluster *c,
                                   const psim_strategy *s, int32_t dev, psim_strategy *out) {
  PSIM_CHECK(psim_strategy_copy(s, out));
  psim_status st = PSIM_OK;
  for (int32_t o = 0; o < out->n_ops && st == PSIM_OK; o++) {
    if (entry_of(&out->ops[o], dev) >= 0)
      st = psim_error(PSIM_EINPUT, "join: device %d already works", (int)dev);
    else
      st = add_to_op(m, &out->ops[o], o, dev);
    if (st == PSIM_OK)
      st = add_to_stage(&out->stages[out->ops[o].stage], dev);
  }
  if (st == PSIM_OK && out->tmpl.dp > 0 && out->sync != PSIM_SYNC_PS)
    out->tmpl.dp++;
  if (st == PSIM_OK)
    st = psim_strategy_validate(out, m, c, "the strategy after the join");
  if (st != PSIM_OK)
    psim_strategy_destroy(out);
  return st;
}

/* ---- configurations --------------------------------------------------------------- */

/* One configuration of the job: cluster (the caller's or one without a
 * failed link) and strategy, with its iteration time when known. */
typedef struct config {
  psim_cluster *c;
  psim_cluster own; /* used when c == &own */
  bool owns_cluster;
  psim_strategy s;
  double t_iter; /* s; < 0 = not simulated yet */
} config;

typedef struct run_ctx {
  const psim_model *m;
  const psim_sim_options *so;
  const psim_fault_options *fo;
  psim_fault_report *out;
  double *base_slow; /* per device of the caller's cluster */
  double ckpt_bytes; /* weights + optimizer state of the model */
  double wbytes;     /* weights of the model */
} run_ctx;

static void config_destroy(config *k) {
  psim_strategy_destroy(&k->s);
  if (k->owns_cluster)
    psim_cluster_destroy(&k->own);
  k->owns_cluster = false;
}

static int32_t workers_of(const psim_strategy *s, int32_t n_devices) {
  uint8_t *u = psim_calloc((size_t)n_devices, 1);
  int32_t n = 0;
  if (!u)
    return 0;
  for (int32_t o = 0; o < s->n_ops; o++)
    for (int32_t e = 0; e < s->ops[o].n_devices; e++)
      if (!u[s->ops[o].devices[e]]) {
        u[s->ops[o].devices[e]] = 1;
        n++;
      }
  psim_free(u);
  return n;
}

static psim_status simulate_async(run_ctx *x, config *k, psim_sim_result *r) {
  psim_ps_async_result a;
  int32_t n = x->fo->iterations > 10 ? x->fo->iterations : 10;
  PSIM_CHECK(psim_ps_async_run(r->ps, n, &a));
  k->t_iter = a.iteration_s;
  psim_fault_report *o = x->out;
  if (!o->async) { /* the first configuration's staleness is reported */
    o->async = true;
    o->staleness_mean = a.staleness_mean;
    o->staleness_mean_iter = a.staleness_mean_iter;
    o->staleness_max = a.staleness_max;
    o->staleness_hist = a.staleness_hist;
    o->n_hist = a.staleness_max + 1;
    a.staleness_hist = NULL;
  }
  psim_ps_async_result_destroy(&a);
  return PSIM_OK;
}

/* Iteration time of k for iteration `it` (random slowdowns: drawn per iteration). */
static psim_status iteration_time(run_ctx *x, config *k, int64_t it, double *t) {
  bool random = x->fo->random_sigma > 0;
  if (!random && k->t_iter >= 0) {
    *t = k->t_iter;
    return PSIM_OK;
  }
  psim_cluster *c = k->c;
  double *saved = NULL;
  if (random) {
    saved = psim_malloc(sizeof *saved * (size_t)c->n_devices);
    if (!saved)
      return psim_error(PSIM_ENOMEM, "out of memory");
    for (int32_t d = 0; d < c->n_devices; d++) {
      saved[d] = c->devices[d].slowdown;
      c->devices[d].slowdown *= exp(x->fo->random_sigma * fabs(normal(x->fo->random_seed, it, d)));
    }
  }
  psim_sim_result r;
  psim_sim_options so = *x->so;
  so.keep_graph = false;
  psim_status st = psim_simulate(x->m, c, &k->s, &so, &r);
  if (saved) {
    for (int32_t d = 0; d < c->n_devices; d++)
      c->devices[d].slowdown = saved[d];
    psim_free(saved);
  }
  if (st != PSIM_OK)
    return st;
  k->t_iter = r.iteration_time_s;
  if (k->s.sync == PSIM_SYNC_PS && k->s.ps.mode == PSIM_PS_ASYNC && r.ps)
    st = simulate_async(x, k, &r);
  *t = k->t_iter;
  psim_sim_result_destroy(&r);
  return st;
}

/* ---- recovery models ------------------------------------------------------------- */

static bool is_server(const psim_strategy *s, int32_t d) {
  if (s->sync != PSIM_SYNC_PS)
    return false;
  for (int32_t i = 0; i < s->ps.n_servers; i++)
    if (s->ps.servers[i] == d)
      return true;
  return false;
}

/* Broadcast of a worker's state over the data-parallel group of op 0 (the
 * devices of its shards at non-batch coordinate 0, replica 0). */
static psim_status resync_time(run_ctx *x, const config *k, double *t) {
  const psim_op *op = &x->m->ops[0];
  const psim_op_config *cfg = &k->s.ops[0];
  int32_t ib = batch_index(x->m, op), *g = psim_malloc(sizeof *g * (size_t)cfg->n_devices), n = 0;
  if (!g)
    return psim_error(PSIM_ENOMEM, "out of memory");
  int32_t per_slice = ib >= 0 ? cfg->n_devices / cfg->degree[ib] : cfg->n_devices;
  for (int32_t e = 0; e < cfg->n_devices; e += cfg->replicas) {
    bool first = true;
    for (int32_t i = 0; i < op->n_dims; i++)
      if (i != ib && coord_of(op, cfg, e / cfg->replicas, i) != 0)
        first = false;
    if (first)
      g[n++] = cfg->devices[e];
  }
  psim_coll_desc d;
  psim_coll_desc_init(&d);
  d.kind = PSIM_COLL_BROADCAST;
  d.devices = g;
  d.n = n;
  d.bytes = x->ckpt_bytes / (per_slice > 0 ? per_slice : 1);
  psim_status st = n > 1 ? psim_coll_time(k->c, &d, t) : PSIM_OK;
  if (n <= 1)
    *t = 0;
  psim_free(g);
  return st;
}

/* Timeline state. */
typedef struct timeline {
  double t;          /* now, s */
  double iter_start; /* start of the iteration in progress, s */
  int32_t done;      /* completed iterations (progress) */
  int32_t ckpt_iter; /* progress at the last checkpoint */
  double ckpt_t;     /* when it was written */
  double last_end;   /* end of the previous completion (for per-iteration wall times) */
} timeline;

static psim_fault_record *new_record(run_ctx *x, const psim_fault_event *e, double iter_before) {
  psim_fault_record *r = &x->out->rec[x->out->n_rec++];
  memset(r, 0, sizeof *r);
  r->kind = e->kind;
  snprintf(r->what, sizeof r->what, "%s%s%s", e->a, e->b[0] ? "-" : "", e->b);
  r->time_s = e->time_s;
  r->iteration_before_s = iter_before;
  return r;
}

static void checkpoint_restart(run_ctx *x, timeline *tl, psim_fault_record *r, double te) {
  r->recovery = "checkpoint_restart";
  r->lost_s = te - tl->ckpt_t;
  r->resync_s = x->ckpt_bytes / x->fo->checkpoint_read_bw;
  r->recovery_s = x->fo->detect_timeout_s + x->fo->restart_s + r->resync_s;
  tl->done = tl->ckpt_iter;
  tl->t = te + r->recovery_s;
}

/* A failed device under the current configuration k; *next receives the new
 * strategy when the job continues without it (*changed). */
static psim_status fail_device(run_ctx *x, timeline *tl, config *k, int32_t dev, double te,
                               double t_iter, psim_fault_record *r, bool *changed) {
  const psim_fault_options *fo = x->fo;
  const psim_strategy *s = &k->s;
  *changed = false;
  bool server = is_server(s, dev), ps = s->sync == PSIM_SYNC_PS;
  if ((server && s->ps.replicas <= 1) || (!ps && !fo->elastic)) {
    checkpoint_restart(x, tl, r, te);
    return PSIM_OK;
  }
  psim_strategy next;
  if (psim_faults_drop_device(x->m, k->c, s, dev, &next) != PSIM_OK) {
    checkpoint_restart(x, tl, r, te);
    return PSIM_OK;
  }
  psim_strategy_destroy(&k->s);
  k->s = next;
  k->t_iter = -1;
  *changed = true;
  if (server) {
    r->recovery = "ps_failover";
    r->lost_s = te - tl->iter_start;
    r->recovery_s = fo->detect_timeout_s + fo->failover_s;
    tl->t = te + r->recovery_s;
  } else if (ps) {
    bool absorbs =
        s->ps.mode == PSIM_PS_ASYNC ||
        (s->ps.mode == PSIM_PS_BACKUP && s->ps.backup_k < workers_of(s, k->c->n_devices) + 1);
    r->recovery = s->ps.mode == PSIM_PS_ASYNC ? "async_absorbs"
                  : absorbs                   ? "backup_absorbs"
                                              : "ps_drop_worker";
    double end = tl->iter_start + t_iter;
    if (!absorbs)
      end = fmax(end, te + fo->detect_timeout_s);
    r->recovery_s = absorbs ? 0 : end - (tl->iter_start + t_iter);
    tl->t = end; /* the iteration in progress completes without the worker */
    tl->done++;
  } else {
    r->recovery = "ring_rebuild";
    r->lost_s = te - tl->iter_start;
    PSIM_CHECK(resync_time(x, k, &r->resync_s));
    r->recovery_s = fo->detect_timeout_s + fo->rebuild_s + r->resync_s;
    tl->t = te + r->recovery_s;
  }
  return PSIM_OK;
}

/* The cluster without the links between a and b; false when that fails to
 * load (a device cut off). */
static psim_status without_link(const psim_cluster *c, const char *a, const char *b,
                                psim_cluster *out, bool *ok) {
  cJSON *root;
  *ok = false;
  PSIM_CHECK(psim_cluster_to_json(c, &root));
  cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links"), *l = links ? links->child : NULL;
  int removed = 0;
  while (l) {
    cJSON *nx = l->next;
    const char *la = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "a"));
    const char *lb = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "b"));
    if (la && lb && ((!strcmp(la, a) && !strcmp(lb, b)) || (!strcmp(la, b) && !strcmp(lb, a)))) {
      cJSON_Delete(cJSON_DetachItemViaPointer(links, l));
      removed++;
    }
    l = nx;
  }
  psim_cluster_init(out);
  psim_status st = removed ? psim_cluster_from_json(c->file, root, out) : PSIM_EINPUT;
  cJSON_Delete(root);
  *ok = st == PSIM_OK;
  if (!*ok)
    psim_cluster_destroy(out);
  if (!removed)
    return psim_error(PSIM_EINPUT, "--fail-link: no link between '%s' and '%s'", a, b);
  return PSIM_OK;
}

static psim_status fail_link(run_ctx *x, timeline *tl, config *k, const psim_fault_event *e,
                             double te, double t_iter, psim_fault_record *r, bool *changed) {
  int32_t va, vb;
  PSIM_CHECK(find_vertex(k->c, "--fail-link", e->a, false, &va));
  PSIM_CHECK(find_vertex(k->c, "--fail-link", e->b, false, &vb));
  psim_cluster nc;
  bool ok;
  PSIM_CHECK(without_link(k->c, k->c->vertex_names[va], k->c->vertex_names[vb], &nc, &ok));
  if (!ok) { /* a device was cut off: its failure */
    int32_t dev = vb < k->c->n_devices ? vb : va;
    if (dev >= k->c->n_devices)
      return psim_error(PSIM_EINPUT, "--fail-link %s-%s splits the network", e->a, e->b);
    return fail_device(x, tl, k, dev, te, t_iter, r, changed);
  }
  for (int32_t d = 0; d < nc.n_devices; d++)
    nc.devices[d].slowdown = k->c->devices[d].slowdown;
  if (k->owns_cluster)
    psim_cluster_destroy(&k->own);
  k->own = nc;
  k->c = &k->own;
  k->owns_cluster = true;
  k->t_iter = -1;
  *changed = true;
  r->recovery = "link_reroute";
  r->lost_s = te - tl->iter_start;
  r->recovery_s = x->fo->detect_timeout_s + x->fo->rebuild_s;
  tl->t = te + r->recovery_s;
  return PSIM_OK;
}

static psim_status join(run_ctx *x, timeline *tl, config *k, int32_t dev, psim_fault_record *r) {
  psim_strategy next;
  PSIM_CHECK(psim_faults_add_device(x->m, k->c, &k->s, dev, &next));
  bool ps = k->s.sync == PSIM_SYNC_PS;
  int32_t src = ps ? k->s.ps.servers[0] : k->s.ops[0].devices[0];
  double t;
  psim_status st = psim_p2p_time(k->c, src, dev, ps ? x->wbytes : x->ckpt_bytes, &t);
  if (st != PSIM_OK) {
    psim_strategy_destroy(&next);
    return st;
  }
  psim_strategy_destroy(&k->s);
  k->s = next;
  k->t_iter = -1;
  r->recovery = ps ? "join_ps" : "join_ring";
  r->resync_s = t;
  r->recovery_s = t + (ps ? 0 : x->fo->rebuild_s);
  tl->t += r->recovery_s;
  return PSIM_OK;
}

/* ---- timeline ---------------------------------------------------------------------- */

static int cmp_event(const void *a, const void *b) {
  const psim_fault_event *x = a, *y = b;
  return x->time_s < y->time_s ? -1 : x->time_s > y->time_s;
}

static psim_status record_time(psim_fault_report *o, double dt) {
  if ((o->n_times & (o->n_times - 1)) == 0) { /* grow at powers of two */
    double *p = psim_realloc(o->iteration_s, sizeof *p * (size_t)(o->n_times ? 2 * o->n_times : 1));
    if (!p)
      return psim_error(PSIM_ENOMEM, "out of memory");
    o->iteration_s = p;
  }
  o->iteration_s[o->n_times++] = dt;
  return PSIM_OK;
}

static psim_status complete(run_ctx *x, timeline *tl, double t_iter) {
  tl->t = tl->iter_start + t_iter;
  tl->done++;
  int32_t every = x->fo->checkpoint_every;
  if (every > 0 && tl->done % every == 0 && tl->done < x->fo->iterations) {
    tl->t += x->out->checkpoint_write_s;
    tl->ckpt_iter = tl->done;
    tl->ckpt_t = tl->t;
    x->out->checkpoints++;
  }
  return PSIM_OK;
}

static psim_status handle(run_ctx *x, timeline *tl, config *k, const psim_fault_event *e,
                          double t_iter) {
  if (x->out->n_rec >= PSIM_FAULTS_MAX)
    return psim_error(PSIM_ELIMIT, "too many fault events");
  psim_fault_record *r = new_record(x, e, t_iter);
  double te = fmax(e->time_s, tl->iter_start);
  bool changed = false;
  int32_t dev;
  psim_status st = PSIM_OK;
  if (e->kind == PSIM_FAULT_JOIN) {
    tl->t = tl->iter_start; /* joins at an iteration boundary */
    st = find_vertex(k->c, option_of(e->kind), e->a, true, &dev);
    if (st == PSIM_OK)
      st = join(x, tl, k, dev, r);
  } else if (e->kind == PSIM_FAULT_FAIL) {
    st = find_vertex(k->c, option_of(e->kind), e->a, true, &dev);
    if (st == PSIM_OK)
      st = fail_device(x, tl, k, dev, te, t_iter, r, &changed);
  } else {
    st = fail_link(x, tl, k, e, te, t_iter, r, &changed);
  }
  PSIM_CHECK(st);
  double after;
  PSIM_CHECK(iteration_time(x, k, tl->done, &after));
  r->iteration_after_s = after;
  r->workers_after = workers_of(&k->s, k->c->n_devices);
  return PSIM_OK;
}

/* An event the run never reached (its iterations were done first): recorded,
 * so that a mistyped time shows, but without effect. */
static psim_status after_run(run_ctx *x, const config *k, const psim_fault_event *e) {
  if (x->out->n_rec >= PSIM_FAULTS_MAX)
    return psim_error(PSIM_ELIMIT, "too many fault events");
  psim_fault_record *r = new_record(x, e, k->t_iter);
  r->recovery = "after_run";
  r->after_run = true;
  r->iteration_after_s = k->t_iter;
  r->workers_after = workers_of(&k->s, k->c->n_devices);
  return PSIM_OK;
}

static psim_status run_timeline(run_ctx *x, config *k) {
  const psim_fault_options *fo = x->fo;
  psim_fault_event ev[PSIM_FAULTS_MAX];
  int32_t ne = fo->n_events, next = 0;
  memcpy(ev, fo->events, sizeof *ev * (size_t)ne);
  qsort(ev, (size_t)ne, sizeof *ev, cmp_event);
  timeline tl = {0};
  int64_t draws = 0;
  while (tl.done < fo->iterations) {
    if ((tl.done & 0xFFF) == 0xFFF && psim_interrupted())
      return psim_error(PSIM_EINTERRUPTED, "interrupted after %d of %d iterations", tl.done,
                        fo->iterations);
    tl.iter_start = tl.t;
    double t_iter;
    PSIM_CHECK(iteration_time(x, k, draws++, &t_iter));
    bool join_now = next < ne && ev[next].kind == PSIM_FAULT_JOIN && ev[next].time_s <= tl.t;
    bool fault_now =
        next < ne && ev[next].kind != PSIM_FAULT_JOIN && ev[next].time_s < tl.iter_start + t_iter;
    if (join_now || fault_now) {
      int32_t before = tl.done;
      PSIM_CHECK(handle(x, &tl, k, &ev[next++], t_iter));
      if (tl.done > before) /* the iteration completed despite the fault */
        PSIM_CHECK(record_time(x->out, tl.t - tl.last_end));
      if (tl.done > before)
        tl.last_end = tl.t;
      continue;
    }
    PSIM_CHECK(complete(x, &tl, t_iter));
    PSIM_CHECK(record_time(x->out, tl.t - tl.last_end));
    tl.last_end = tl.t;
  }
  x->out->total_s = tl.t;
  for (; next < ne; next++)
    PSIM_CHECK(after_run(x, k, &ev[next]));
  return PSIM_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, int32_t n, double q) {
  double pos = q * (n - 1);
  int32_t i = (int32_t)floor(pos);
  if (i + 1 >= n)
    return sorted[n - 1];
  return sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]);
}

static psim_status distribution(const psim_model *m, psim_fault_report *o) {
  int32_t n = o->n_times;
  if (n <= 0)
    return PSIM_OK;
  double *s = psim_malloc(sizeof *s * (size_t)n), sum = 0, sq = 0;
  if (!s)
    return psim_error(PSIM_ENOMEM, "out of memory");
  memcpy(s, o->iteration_s, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  for (int32_t i = 0; i < n; i++)
    sum += s[i];
  o->mean_s = sum / n;
  for (int32_t i = 0; i < n; i++)
    sq += (s[i] - o->mean_s) * (s[i] - o->mean_s);
  o->std_s = sqrt(sq / n);
  o->min_s = s[0];
  o->max_s = s[n - 1];
  o->p50_s = quantile(s, n, 0.5);
  o->p90_s = quantile(s, n, 0.9);
  o->p99_s = quantile(s, n, 0.99);
  psim_free(s);
  int32_t bd = m->role_dim[PSIM_ROLE_BATCH];
  double batch = bd >= 0 ? (double)m->dims[bd].size : 1;
  o->samples_per_s = o->total_s > 0 ? o->n_iterations * batch / o->total_s : 0;
  if (o->async && o->mean_s > 0)
    o->async_samples_per_s = batch / o->mean_s;
  return PSIM_OK;
}

static void model_bytes(const psim_model *m, double *weights, double *ckpt) {
  bool low = m->dtype == PSIM_DTYPE_BF16 || m->dtype == PSIM_DTYPE_FP16;
  double params = 0; /* memory.c: weights 2 (low precision) or 4, optimizer 12 or 8 bytes */
  for (int32_t t = 0; t < m->n_tensors; t++) {
    const psim_tensor *x = &m->tensors[t];
    if (x->kind != PSIM_TENSOR_WEIGHT)
      continue;
    double e = 1;
    for (int32_t j = 0; j < x->rank; j++)
      e *= (double)m->dims[x->dims[j]].size;
    params += e;
  }
  *weights = params * (low ? 2 : 4);
  *ckpt = params * (low ? 2 + 12 : 4 + 8);
}

void psim_fault_report_init(psim_fault_report *r) {
  memset(r, 0, sizeof *r);
}

void psim_fault_report_destroy(psim_fault_report *r) {
  psim_free(r->iteration_s);
  psim_free(r->staleness_hist);
  memset(r, 0, sizeof *r);
}

psim_status psim_faults_run(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                            const psim_sim_options *so, const psim_fault_options *fo,
                            psim_fault_report *out) {
  psim_sim_options defaults;
  if (!so) {
    psim_sim_options_init(&defaults);
    so = &defaults;
  }
  psim_fault_report_init(out);
  out->n_iterations = fo->iterations;
  run_ctx x = {m, so, fo, out, NULL, 0, 0};
  model_bytes(m, &x.wbytes, &x.ckpt_bytes);
  out->checkpoint_bytes = x.ckpt_bytes;
  out->checkpoint_write_s = x.ckpt_bytes / fo->checkpoint_write_bw;
  config k = {c, {0}, false, {0}, -1};
  PSIM_CHECK(psim_fault_options_check(fo, c)); /* names, before any time is spent */
  psim_status st = psim_strategy_copy(s, &k.s);
  if (st == PSIM_OK)
    st = run_timeline(&x, &k);
  if (st == PSIM_OK)
    st = distribution(m, out);
  config_destroy(&k);
  if (st != PSIM_OK)
    psim_fault_report_destroy(out);
  return st;
}

/* ---- output ------------------------------------------------------------------------ */

static const char *kind_name(psim_fault_kind k) {
  return k == PSIM_FAULT_FAIL ? "fail" : k == PSIM_FAULT_FAIL_LINK ? "fail_link" : "join";
}

static psim_status events_json(const psim_fault_report *r, cJSON *root) {
  cJSON *arr;
  PSIM_CHECK(psim_json_add_array(root, "events", &arr));
  for (int32_t i = 0; i < r->n_rec; i++) {
    const psim_fault_record *e = &r->rec[i];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o))
      return psim_error(PSIM_ENOMEM, "out of memory");
    PSIM_CHECK(psim_json_add_string(o, "kind", kind_name(e->kind)));
    PSIM_CHECK(psim_json_add_string(o, "target", e->what));
    PSIM_CHECK(psim_json_add_number(o, "time_s", e->time_s));
    PSIM_CHECK(psim_json_add_string(o, "recovery", e->recovery ? e->recovery : "none"));
    PSIM_CHECK(psim_json_add_number(o, "lost_s", e->lost_s));
    PSIM_CHECK(psim_json_add_number(o, "recovery_s", e->recovery_s));
    PSIM_CHECK(psim_json_add_number(o, "resync_s", e->resync_s));
    PSIM_CHECK(psim_json_add_number(o, "iteration_before_s", e->iteration_before_s));
    PSIM_CHECK(psim_json_add_number(o, "iteration_after_s", e->iteration_after_s));
    PSIM_CHECK(psim_json_add_number(o, "workers_after", e->workers_after));
  }
  return PSIM_OK;
}

static psim_status async_json(const psim_fault_report *r, cJSON *root) {
  cJSON *a, *h;
  PSIM_CHECK(psim_json_add_object(root, "async", &a));
  PSIM_CHECK(psim_json_add_number(a, "samples_per_s", r->async_samples_per_s));
  PSIM_CHECK(psim_json_add_number(a, "staleness_mean_updates", r->staleness_mean));
  PSIM_CHECK(psim_json_add_number(a, "staleness_mean_iterations", r->staleness_mean_iter));
  PSIM_CHECK(psim_json_add_number(a, "staleness_max_updates", r->staleness_max));
  PSIM_CHECK(psim_json_add_array(a, "staleness_histogram", &h));
  for (int32_t i = 0; i < r->n_hist; i++) {
    cJSON *v = cJSON_CreateNumber((double)r->staleness_hist[i]);
    if (!v || !cJSON_AddItemToArray(h, v))
      return psim_error(PSIM_ENOMEM, "out of memory");
  }
  return PSIM_OK;
}

psim_status psim_fault_report_to_json(const psim_fault_report *r, cJSON *root) {
  cJSON *it, *arr, *d;
  PSIM_CHECK(psim_json_add_object(root, "iterations", &it));
  PSIM_CHECK(psim_json_add_number(it, "n", r->n_iterations));
  PSIM_CHECK(psim_json_add_number(it, "total_s", r->total_s));
  PSIM_CHECK(psim_json_add_number(it, "samples_per_s", r->samples_per_s));
  PSIM_CHECK(psim_json_add_array(it, "times_s", &arr));
  for (int32_t i = 0; i < r->n_times; i++) {
    cJSON *v = cJSON_CreateNumber(r->iteration_s[i]);
    if (!v || !cJSON_AddItemToArray(arr, v))
      return psim_error(PSIM_ENOMEM, "out of memory");
  }
  PSIM_CHECK(psim_json_add_object(it, "distribution", &d));
  const double q[] = {r->mean_s, r->std_s, r->min_s, r->p50_s, r->p90_s, r->p99_s, r->max_s};
  const char *const names[] = {"mean_s", "std_s", "min_s", "p50_s", "p90_s", "p99_s", "max_s"};
  for (int i = 0; i < 7; i++)
    PSIM_CHECK(psim_json_add_number(d, names[i], q[i]));
  PSIM_CHECK(psim_json_add_number(it, "checkpoints", r->checkpoints));
  PSIM_CHECK(psim_json_add_number(it, "checkpoint_write_s", r->checkpoint_write_s));
  PSIM_CHECK(psim_json_add_number(it, "checkpoint_bytes", r->checkpoint_bytes));
  PSIM_CHECK(events_json(r, it));
  return r->async ? async_json(r, it) : PSIM_OK;
}

void psim_fault_report_print(const psim_fault_report *r, FILE *f) {
  fprintf(f,
          "  %d iterations in %.6g s (%.1f samples/s): per iteration mean %.6g s, std %.3g s, "
          "p50 %.6g s, p90 %.6g s, max %.6g s\n",
          (int)r->n_iterations, r->total_s, r->samples_per_s, r->mean_s, r->std_s, r->p50_s,
          r->p90_s, r->max_s);
  if (r->checkpoints > 0)
    fprintf(f, "  %d checkpoints of %.3g GB, %.3g s each\n", (int)r->checkpoints,
            r->checkpoint_bytes / 1e9, r->checkpoint_write_s);
  for (int32_t i = 0; i < r->n_rec; i++) {
    const psim_fault_record *e = &r->rec[i];
    if (e->after_run) {
      fprintf(f, "  %s %s at %.6g s: after_run, no effect (the run ends at %.6g s first)\n",
              kind_name(e->kind), e->what, e->time_s, r->total_s);
      continue;
    }
    fprintf(f,
            "  %s %s at %.6g s: %s, lost %.6g s, recovery %.6g s (resync %.3g s), "
            "iteration %.6g s -> %.6g s, %d workers\n",
            kind_name(e->kind), e->what, e->time_s, e->recovery ? e->recovery : "none", e->lost_s,
            e->recovery_s, e->resync_s, e->iteration_before_s, e->iteration_after_s,
            (int)e->workers_after);
  }
  if (r->async)
    fprintf(f, "  async: %.1f samples/s, staleness mean %.3g updates (%.3g iterations), max %d\n",
            r->async_samples_per_s, r->staleness_mean, r->staleness_mean_iter,
            (int)r->staleness_max);
}
