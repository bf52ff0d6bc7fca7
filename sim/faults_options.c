/* faults_options.c - the fault options: parsing --slow, --fail, --join and
 * the recovery durations, checking the names they give against a cluster, and
 * applying the fixed slowdowns (faults.h, docs/faults.md). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/units.h"
#include "sim/faults.h"
#include "sim/faults_impl.h"

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

const char *psim_faults_option_name(psim_fault_kind k) {
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
psim_status psim_faults_find_vertex(const psim_cluster *c, const char *opt, const char *name,
                                    bool device_only, int32_t *out) {
  *out = -1; /* set on every path: callers read it after PSIM_CHECK */
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
  PSIM_CHECK(psim_faults_find_vertex(c, opt, a, false, va));
  PSIM_CHECK(psim_faults_find_vertex(c, opt, b, false, vb));
  for (int32_t l = 0; l < c->n_links; l++)
    if (joins(&c->links[l], *va, *vb))
      return PSIM_OK;
  return psim_error(PSIM_EINPUT, "%s: no link between '%s' and '%s' in cluster %s", opt, a, b,
                    c->name);
}

psim_status psim_fault_options_check(const psim_fault_options *o, const psim_cluster *c) {
  int32_t v, w;
  for (int32_t i = 0; i < o->n_slow; i++)
    PSIM_CHECK(psim_faults_find_vertex(c, "--slow", o->slow[i].a, true, &v));
  for (int32_t i = 0; i < o->n_slow_link; i++)
    PSIM_CHECK(find_link(c, "--slow-link", o->slow_link[i].a, o->slow_link[i].b, &v, &w));
  for (int32_t i = 0; i < o->n_events; i++) {
    const psim_fault_event *e = &o->events[i];
    if (e->kind == PSIM_FAULT_FAIL_LINK)
      PSIM_CHECK(find_link(c, psim_faults_option_name(e->kind), e->a, e->b, &v, &w));
    else
      PSIM_CHECK(psim_faults_find_vertex(c, psim_faults_option_name(e->kind), e->a, true, &v));
  }
  return PSIM_OK;
}

/* ---- slowdowns ----------------------------------------------------------------- */

psim_status psim_faults_apply_slowdowns(const psim_fault_options *o, psim_cluster *c) {
  for (int32_t i = 0; i < o->n_slow; i++) {
    int32_t d;
    PSIM_CHECK(psim_faults_find_vertex(c, "--slow", o->slow[i].a, true, &d));
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
