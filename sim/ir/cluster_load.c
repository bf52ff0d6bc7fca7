/* cluster_load.c - reading plansim.cluster/1 (both forms share the device
 * types of cluster_types.c and the collective tables and slowdowns read here;
 * the explicit form is read here, the hierarchical one in cluster_hier.c) and
 * writing the explicit form. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/cluster_impl.h"

#define FORMAT "plansim.cluster/1"

psim_status psim_cluster_key_err(psim_jctx *j, const char *key, const char *fmt, ...) {
  char msg[1024]; /* psim_jerr's own bound */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t sv = psim_jctx_key(j, key);
  psim_status s = psim_jerr(j, "%s", msg);
  psim_jctx_pop(j, sv);
  return s;
}

/* ---- collective tables ----------------------------------------------------- */

static psim_status load_point(psim_jctx *j, const cJSON *p, psim_coll_table *t, int32_t i) {
  PSIM_CHECK(psim_json_expect_array(j, p));
  if (cJSON_GetArraySize(p) != 2)
    return psim_jerr(j, "expected a pair [bytes, busbw]");
  size_t sv = psim_jctx_index(j, 0);
  psim_status s =
      psim_json_value_quantity(j, cJSON_GetArrayItem(p, 0), PSIM_UNIT_BYTES, &t->bytes[i]);
  if (s == PSIM_OK && i > 0 && !(t->bytes[i] > t->bytes[i - 1]))
    s = psim_jerr(j, "message sizes must increase from point to point");
  psim_jctx_pop(j, sv);
  if (s != PSIM_OK)
    return s;
  sv = psim_jctx_index(j, 1);
  s = psim_json_value_quantity(j, cJSON_GetArrayItem(p, 1), PSIM_UNIT_BANDWIDTH, &t->busbw[i]);
  if (s == PSIM_OK && !(t->busbw[i] > 0))
    s = psim_jerr(j, "bus bandwidth must be greater than zero");
  psim_jctx_pop(j, sv);
  return s;
}

static psim_status load_points(psim_jctx *j, const cJSON *pts, psim_coll_table *t) {
  PSIM_CHECK(psim_json_expect_array(j, pts));
  int n = cJSON_GetArraySize(pts);
  if (n < 1)
    return psim_jerr(j, "expected at least one [bytes, busbw] point");
  t->bytes = psim_calloc((size_t)n, sizeof(double));
  t->busbw = psim_calloc((size_t)n, sizeof(double));
  if (!t->bytes || !t->busbw)
    return psim_error(PSIM_ENOMEM, "out of memory");
  t->n_points = n;
  int32_t i = 0;
  for (const cJSON *p = pts->child; p; p = p->next, i++) {
    size_t sv = psim_jctx_index(j, (size_t)i);
    psim_status s = load_point(j, p, t, i);
    psim_jctx_pop(j, sv);
    PSIM_CHECK(s);
  }
  return PSIM_OK;
}

static psim_status load_table(psim_jctx *j, const cJSON *o, psim_coll_table *t) {
  static const char *const keys[] = {"op", "group_size", "scope", "points", "source", NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  const char *op = NULL, *scope = NULL, *source = NULL;
  int64_t g = 0;
  PSIM_CHECK(psim_json_string(j, o, "source", false, &source));
  PSIM_CHECK(psim_json_string(j, o, "op", true, &op));
  if (psim_coll_kind_parse(op, &t->kind) != PSIM_OK) {
    return psim_cluster_key_err(j, "op", "%s", psim_error_message());
  }
  PSIM_CHECK(psim_json_int(j, o, "group_size", true, 2, PSIM_CLUSTER_MAX_DEVICES, &g));
  t->group_size = (int32_t)g;
  PSIM_CHECK(psim_json_string(j, o, "scope", true, &scope));
  if (strcmp(scope, "intra_node") != 0 && strcmp(scope, "inter_node") != 0) {
    return psim_cluster_key_err(j, "scope", "expected \"intra_node\" or \"inter_node\"");
  }
  t->intra_node = strcmp(scope, "intra_node") == 0;
  size_t sv = psim_jctx_key(j, "points");
  psim_status s = cJSON_GetObjectItemCaseSensitive(o, "points")
                      ? load_points(j, cJSON_GetObjectItemCaseSensitive(o, "points"), t)
                      : psim_jerr(j, "missing required key");
  psim_jctx_pop(j, sv);
  return s;
}

static psim_status load_collectives(psim_jctx *j, const cJSON *root, psim_cluster *c) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "collectives");
  if (!arr)
    return PSIM_OK;
  size_t sv = psim_jctx_key(j, "collectives");
  psim_status s = psim_json_expect_array(j, arr);
  int n = s == PSIM_OK ? cJSON_GetArraySize(arr) : 0;
  if (n > 0) {
    c->coll_tables = psim_calloc((size_t)n, sizeof *c->coll_tables);
    s = c->coll_tables ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  }
  const cJSON *it = arr->child;
  for (int i = 0; s == PSIM_OK && i < n; i++, it = it->next) {
    c->n_coll_tables = i + 1;
    size_t si = psim_jctx_index(j, (size_t)i);
    s = load_table(j, it, &c->coll_tables[i]);
    psim_jctx_pop(j, si);
  }
  psim_jctx_pop(j, sv);
  return s;
}

/* ---- slowdowns -------------------------------------------------------------- */

static psim_status load_slowdown(psim_jctx *j, const cJSON *root, psim_cluster *c) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "slowdown");
  if (!o)
    return PSIM_OK;
  size_t sv = psim_jctx_key(j, "slowdown");
  psim_status s = psim_json_expect_object(j, o);
  for (const cJSON *it = o->child; it && s == PSIM_OK; it = it->next) {
    size_t sk = psim_jctx_key(j, it->string);
    int32_t d = psim_cluster_find_device(c, it->string);
    double f = 0;
    if (d < 0)
      s = psim_jerr(j, "unknown device '%.80s'", it->string);
    else if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || !(it->valuedouble > 0) ||
             it->valuedouble > 1e6)
      s = psim_jerr(j, "expected a slowdown factor in (0, 1e6] (1 = nominal speed)");
    else
      f = it->valuedouble;
    if (s == PSIM_OK)
      c->devices[d].slowdown = f;
    psim_jctx_pop(j, sk);
  }
  psim_jctx_pop(j, sv);
  return s;
}

/* ---- explicit form ------------------------------------------------------------ */

static psim_status load_device(psim_jctx *j, const cJSON *o, psim_cbuild *b, int32_t index) {
  static const char *const keys[] = {"name", "type", "node", "rack", NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  const char *name = NULL, *type = NULL;
  int64_t node = 0, rack = 0;
  PSIM_CHECK(psim_json_string(j, o, "name", true, &name));
  PSIM_CHECK(psim_json_string(j, o, "type", true, &type));
  PSIM_CHECK(psim_json_int(j, o, "node", false, 0, PSIM_CLUSTER_MAX_DEVICES - 1, &node));
  PSIM_CHECK(psim_json_int(j, o, "rack", false, 0, PSIM_CLUSTER_MAX_DEVICES - 1, &rack));
  if (!*name)
    return psim_jerr(j, "'name' must not be empty");
  int32_t t;
  size_t sv = psim_jctx_key(j, "type");
  psim_status s = psim_cluster_resolve_type(j, b, type, &t);
  psim_jctx_pop(j, sv);
  PSIM_CHECK(s);
  int32_t local = 0; /* index among earlier devices of the same node */
  for (int32_t i = 0; i < index; i++)
    local += b->c->devices[i].node == node;
  return psim_cb_device(b, name, t, (int32_t)node, local, (int32_t)rack);
}

static psim_status load_devices(psim_jctx *j, const cJSON *root, psim_cbuild *b) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "devices");
  size_t sv = psim_jctx_key(j, "devices");
  psim_status s = psim_json_expect_array(j, arr);
  int n = s == PSIM_OK ? cJSON_GetArraySize(arr) : 0;
  if (s == PSIM_OK && (n < 1 || n > PSIM_CLUSTER_MAX_DEVICES))
    s = psim_jerr(j, "expected 1 to %d devices, found %d", PSIM_CLUSTER_MAX_DEVICES, n);
  int32_t i = 0;
  for (const cJSON *it = arr ? arr->child : NULL; it && s == PSIM_OK; it = it->next, i++) {
    size_t si = psim_jctx_index(j, (size_t)i);
    s = load_device(j, it, b, i);
    psim_jctx_pop(j, si);
  }
  psim_jctx_pop(j, sv);
  return s;
}

static psim_status load_switches(psim_jctx *j, const cJSON *root, psim_cbuild *b) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "switches");
  if (!arr)
    return PSIM_OK;
  size_t sv = psim_jctx_key(j, "switches");
  psim_status s = psim_json_expect_array(j, arr);
  size_t i = 0;
  for (const cJSON *it = s == PSIM_OK ? arr->child : NULL; it && s == PSIM_OK; it = it->next) {
    size_t si = psim_jctx_index(j, i++);
    int32_t v;
    if (!cJSON_IsString(it) || !*it->valuestring)
      s = psim_jerr(j, "expected a switch name (a non-empty string)");
    else
      s = psim_cb_vertex(b, it->valuestring, PSIM_VERTEX_SWITCH, &v);
    psim_jctx_pop(j, si);
  }
  psim_jctx_pop(j, sv);
  return s;
}

static psim_status endpoint(psim_jctx *j, const cJSON *o, const char *key, psim_cluster *c,
                            int32_t *v) {
  const char *name = NULL;
  PSIM_CHECK(psim_json_string(j, o, key, true, &name));
  *v = psim_cluster_find_vertex(c, name);
  if (*v >= 0)
    return PSIM_OK;
  return psim_cluster_key_err(j, key, "unknown device or switch '%.80s'", name);
}

static psim_status load_link(psim_jctx *j, const cJSON *o, psim_cbuild *b) {
  static const char *const keys[] = {"a", "b", "bandwidth", "latency", "duplex", "kind", NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  int32_t a, bv;
  double bw = 0, lat = 0;
  bool duplex = true;
  const char *kind = "other";
  psim_link_kind k;
  PSIM_CHECK(endpoint(j, o, "a", b->c, &a));
  PSIM_CHECK(endpoint(j, o, "b", b->c, &bv));
  if (a == bv)
    return psim_jerr(j, "a link must join two different vertices ('%.80s' twice)",
                     b->c->vertex_names[a]);
  PSIM_CHECK(psim_cluster_positive(j, o, "bandwidth", true, PSIM_UNIT_BANDWIDTH, &bw));
  PSIM_CHECK(psim_json_quantity(j, o, "latency", false, PSIM_UNIT_TIME, &lat));
  PSIM_CHECK(psim_json_bool(j, o, "duplex", false, &duplex));
  PSIM_CHECK(psim_json_string(j, o, "kind", false, &kind));
  if (psim_link_kind_parse(kind, &k) != PSIM_OK) {
    return psim_cluster_key_err(j, "kind",
                                "unknown link kind '%.80s'; expected nvlink, pcie, nic, "
                                "fabric, memory or other",
                                kind);
  }
  return psim_cb_link(b, a, bv, k, bw, lat, duplex);
}

static psim_status load_links(psim_jctx *j, const cJSON *root, psim_cbuild *b) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "links");
  if (!arr)
    return b->c->n_devices > 1 ? psim_jerr(j, "missing required key 'links'") : PSIM_OK;
  size_t sv = psim_jctx_key(j, "links");
  psim_status s = psim_json_expect_array(j, arr);
  size_t i = 0;
  for (const cJSON *it = s == PSIM_OK ? arr->child : NULL; it && s == PSIM_OK; it = it->next) {
    size_t si = psim_jctx_index(j, i++);
    s = load_link(j, it, b);
    psim_jctx_pop(j, si);
  }
  psim_jctx_pop(j, sv);
  return s;
}

/* JSON path of vertex v in the explicit form. */
static void vertex_path(psim_jctx *j, const psim_cluster *c, int32_t v) {
  if (v < c->n_devices) {
    psim_jctx_key(j, "devices");
    psim_jctx_index(j, (size_t)v);
    psim_jctx_key(j, "name");
  } else {
    psim_jctx_key(j, "switches");
    psim_jctx_index(j, (size_t)(v - c->n_devices));
  }
}

static psim_status load_explicit(psim_jctx *j, const cJSON *root, psim_cbuild *b) {
  PSIM_CHECK(load_devices(j, root, b));
  PSIM_CHECK(load_switches(j, root, b));
  bool unique = true;
  int32_t x = 0, y = 0;
  PSIM_CHECK(psim_cluster_index_names(b->c, &unique, &x, &y));
  if (!unique) {
    vertex_path(j, b->c, y);
    return psim_jerr(j, "duplicate name '%.80s' (also used by %s %d)", b->c->vertex_names[y],
                     x < b->c->n_devices ? "device" : "switch",
                     x < b->c->n_devices ? (int)x : (int)(x - b->c->n_devices));
  }
  return load_links(j, root, b);
}

/* ---- top level ------------------------------------------------------------------ */

static const char *const explicit_keys[] = {"format",   "name",     "description", "device_types",
                                            "devices",  "switches", "links",       "collectives",
                                            "slowdown", "stack",    NULL};
static const char *const hier_keys[] = {"format",        "name",        "description",
                                        "device_types",  "nodes",       "devices_per_node",
                                        "device_type",   "intra_node",  "nics_per_node",
                                        "nic_bandwidth", "nic_latency", "pcie_bandwidth",
                                        "pcie_latency",  "fabric",      "collectives",
                                        "slowdown",      "stack",       NULL};

static psim_status check_format(psim_jctx *j, const cJSON *root) {
  PSIM_CHECK(psim_json_expect_object(j, root));
  const char *format = NULL;
  PSIM_CHECK(psim_json_string(j, root, "format", true, &format));
  if (strcmp(format, FORMAT) != 0) {
    return psim_cluster_key_err(j, "format", "expected \"" FORMAT "\", found \"%.80s\"", format);
  }
  return PSIM_OK;
}

static psim_status check_connected(psim_jctx *j, psim_cluster *c, bool is_explicit) {
  bool ok = true;
  int32_t a = 0, d = 0;
  PSIM_CHECK(psim_cluster_check_connected(c, &ok, &a, &d));
  if (ok)
    return PSIM_OK;
  if (is_explicit) {
    psim_jctx_key(j, "devices");
    psim_jctx_index(j, (size_t)d);
  }
  return psim_jerr(j,
                   "device '%.80s' and device '%.80s' are not connected both ways; every "
                   "device must reach every other over the links",
                   c->vertex_names[a], c->vertex_names[d]);
}

static psim_status from_json(psim_jctx *j, const cJSON *root, psim_cluster *c) {
  PSIM_CHECK(check_format(j, root));
  bool is_explicit = cJSON_GetObjectItemCaseSensitive(root, "devices") != NULL;
  PSIM_CHECK(psim_json_check_keys(j, root, is_explicit ? explicit_keys : hier_keys));
  const char *name = "", *desc = NULL;
  PSIM_CHECK(psim_json_string(j, root, "name", false, &name));
  PSIM_CHECK(psim_json_string(j, root, "description", false, &desc));
  c->name = psim_strdup(name);
  if (!c->name)
    return psim_error(PSIM_ENOMEM, "out of memory");
  psim_cbuild b;
  psim_cb_init(&b, c);
  PSIM_CHECK(psim_cluster_load_types(j, root, &b));
  PSIM_CHECK(is_explicit ? load_explicit(j, root, &b) : psim_cluster_load_hier(j, root, &b));
  psim_cluster_count_nodes(c);
  PSIM_CHECK(load_collectives(j, root, c));
  PSIM_CHECK(load_slowdown(j, root, c));
  PSIM_CHECK(psim_stack_from_key(j, root, &c->stack)); /* docs/stacks.md */
  return check_connected(j, c, is_explicit);
}

psim_status psim_cluster_from_json(const char *file, const struct cJSON *root, psim_cluster *c) {
  psim_cluster_destroy(c);
  psim_jctx j;
  psim_jctx_init(&j, file);
  psim_status s = from_json(&j, root, c);
  if (s == PSIM_OK) {
    c->file = psim_strdup(file);
    s = c->file ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  }
  if (s != PSIM_OK)
    psim_cluster_destroy(c);
  return s;
}

psim_status psim_cluster_load(const char *file, psim_cluster *c) {
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_status s = psim_cluster_from_json(file, root, c);
  cJSON_Delete(root);
  return s;
}

/* ---- writing the explicit form ---------------------------------------------------- */

static psim_status add_peaks(cJSON *o, const psim_device_type *t) {
  static const char *const keys[] = {"bf16", "fp16", "fp32", "fp8", "fp64"};
  static const psim_dtype dts[] = {PSIM_DTYPE_BF16, PSIM_DTYPE_FP16, PSIM_DTYPE_FP32,
                                   PSIM_DTYPE_FP8, PSIM_DTYPE_FP64};
  for (int i = 0; i < 5; i++)
    if (t->peak_flops[dts[i]] > 0)
      PSIM_CHECK(psim_json_add_number(o, keys[i], t->peak_flops[dts[i]]));
  if (t->peak_tf32 > 0)
    PSIM_CHECK(psim_json_add_number(o, "tf32", t->peak_tf32));
  return PSIM_OK;
}

psim_status psim_device_type_to_json(const psim_device_type *t, cJSON *o) {
  cJSON *peaks, *eff;
  PSIM_CHECK(psim_json_add_object(o, "peak_flops", &peaks));
  PSIM_CHECK(add_peaks(peaks, t));
  PSIM_CHECK(psim_json_add_number(o, "memory", t->mem_bytes));
  PSIM_CHECK(psim_json_add_number(o, "memory_bandwidth", t->mem_bw));
  PSIM_CHECK(psim_json_add_number(o, "launch_overhead", t->launch_s));
  PSIM_CHECK(psim_json_add_object(o, "efficiency", &eff));
  PSIM_CHECK(psim_json_add_number(eff, "gemm_max", t->eff.gemm_max));
  PSIM_CHECK(psim_json_add_number(eff, "gemm_half_flops", t->eff.gemm_half_flops));
  PSIM_CHECK(psim_json_add_number(eff, "mem", t->eff.mem));
  /* the runtime's overheads, so that the explicit form simulates as the cluster it was
   * written from (a built-in GPU type's are not zero) */
  cJSON *rt;
  PSIM_CHECK(psim_json_add_object(o, "runtime", &rt));
  PSIM_CHECK(psim_json_add_number(rt, "host_issue", t->rt.host_issue_s));
  PSIM_CHECK(psim_json_add_number(rt, "collective_skew", t->rt.coll_sync_s));
  return psim_json_add_number(rt, "iteration_overhead", t->rt.iteration_s);
}

static psim_status add_types(cJSON *root, const psim_cluster *c) {
  cJSON *types, *o;
  PSIM_CHECK(psim_json_add_object(root, "device_types", &types));
  for (int32_t i = 0; i < c->n_types; i++) {
    PSIM_CHECK(psim_json_add_object(types, c->types[i].name, &o));
    PSIM_CHECK(psim_device_type_to_json(&c->types[i], o));
  }
  return PSIM_OK;
}

static psim_status add_devices(cJSON *root, const psim_cluster *c) {
  cJSON *arr, *sw;
  PSIM_CHECK(psim_json_add_array(root, "devices", &arr));
  for (int32_t i = 0; i < c->n_devices; i++) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
    PSIM_CHECK(psim_json_add_string(o, "name", c->devices[i].name));
    PSIM_CHECK(psim_json_add_string(o, "type", c->types[c->devices[i].type].name));
    PSIM_CHECK(psim_json_add_number(o, "node", c->devices[i].node));
    PSIM_CHECK(psim_json_add_number(o, "rack", c->devices[i].rack));
  }
  PSIM_CHECK(psim_json_add_array(root, "switches", &sw));
  for (int32_t v = c->n_devices; v < c->n_vertices; v++) {
    cJSON *s = cJSON_CreateString(c->vertex_names[v]);
    if (!s || !cJSON_AddItemToArray(sw, s))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  }
  return PSIM_OK;
}

/* True when link i+1 is the reverse of link i with the same figures. */
static bool duplex_pair(const psim_cluster *c, int32_t i) {
  if (i + 1 >= c->n_links)
    return false;
  const psim_link *x = &c->links[i], *y = &c->links[i + 1];
  return x->src == y->dst && x->dst == y->src && x->bw == y->bw && x->latency_s == y->latency_s &&
         x->kind == y->kind;
}

static psim_status add_links(cJSON *root, const psim_cluster *c) {
  cJSON *arr;
  PSIM_CHECK(psim_json_add_array(root, "links", &arr));
  for (int32_t i = 0; i < c->n_links; i++) {
    const psim_link *l = &c->links[i];
    bool duplex = duplex_pair(c, i);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
    PSIM_CHECK(psim_json_add_string(o, "a", c->vertex_names[l->src]));
    PSIM_CHECK(psim_json_add_string(o, "b", c->vertex_names[l->dst]));
    PSIM_CHECK(psim_json_add_number(o, "bandwidth", l->bw));
    PSIM_CHECK(psim_json_add_number(o, "latency", l->latency_s));
    PSIM_CHECK(psim_json_add_bool(o, "duplex", duplex));
    PSIM_CHECK(psim_json_add_string(o, "kind", psim_link_kind_name(l->kind)));
    i += duplex;
  }
  return PSIM_OK;
}

static psim_status add_tables(cJSON *root, const psim_cluster *c) {
  if (c->n_coll_tables == 0)
    return PSIM_OK;
  cJSON *arr, *pts;
  PSIM_CHECK(psim_json_add_array(root, "collectives", &arr));
  for (int32_t i = 0; i < c->n_coll_tables; i++) {
    const psim_coll_table *t = &c->coll_tables[i];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
    PSIM_CHECK(psim_json_add_string(o, "op", psim_coll_kind_name(t->kind)));
    PSIM_CHECK(psim_json_add_number(o, "group_size", t->group_size));
    PSIM_CHECK(psim_json_add_string(o, "scope", t->intra_node ? "intra_node" : "inter_node"));
    PSIM_CHECK(psim_json_add_array(o, "points", &pts));
    for (int32_t k = 0; k < t->n_points; k++) {
      double pair[2] = {t->bytes[k], t->busbw[k]};
      cJSON *p = cJSON_CreateDoubleArray(pair, 2);
      if (!p || !cJSON_AddItemToArray(pts, p))
        return psim_error(PSIM_ENOMEM, "out of memory building JSON");
    }
  }
  return PSIM_OK;
}

static psim_status add_slowdowns(cJSON *root, const psim_cluster *c) {
  cJSON *o = NULL;
  for (int32_t i = 0; i < c->n_devices; i++) {
    if (c->devices[i].slowdown == 1.0)
      continue;
    if (!o)
      PSIM_CHECK(psim_json_add_object(root, "slowdown", &o));
    PSIM_CHECK(psim_json_add_number(o, c->devices[i].name, c->devices[i].slowdown));
  }
  return PSIM_OK;
}

static psim_status to_json(const psim_cluster *c, cJSON *root) {
  PSIM_CHECK(psim_json_add_string(root, "format", FORMAT));
  PSIM_CHECK(psim_json_add_string(root, "name", c->name ? c->name : ""));
  PSIM_CHECK(add_types(root, c));
  PSIM_CHECK(add_devices(root, c));
  PSIM_CHECK(add_links(root, c));
  PSIM_CHECK(add_tables(root, c));
  return add_slowdowns(root, c);
}

psim_status psim_cluster_to_json(const psim_cluster *c, struct cJSON **out) {
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  psim_status s = to_json(c, root);
  if (s != PSIM_OK) {
    cJSON_Delete(root);
    return s;
  }
  *out = root;
  return PSIM_OK;
}
