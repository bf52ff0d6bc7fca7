/* test_cluster.c - cluster loader (both forms), validation, routes, presets,
 * shipped topologies. Expected figures come from the hardware (data sheets,
 * hardware.csv) and from the topology's structure, not from the code. */
#include <check.h>
#include <glob.h>
#include <igraph/igraph.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/core/alloc.h"
#include "sim/core/clock.h"
#include "sim/core/json.h"
#include "sim/ir/cluster.h"
#include "sim/ir/cluster_impl.h"
#include "topologies/presets.h"

#define ROOT PSIM_SOURCE_ROOT

/* Timing limits are for optimised builds; sanitizers slow code about tenfold. */
#if defined(__SANITIZE_THREAD__)
#define TIME_SCALE 100.0
#elif defined(__SANITIZE_ADDRESS__)
#define TIME_SCALE 10.0
#else
#define TIME_SCALE 1.0
#endif

static void load_text(const char *text, psim_cluster *c) {
  cJSON *root = NULL;
  ck_assert_int_eq(psim_json_parse("t.json", text, strlen(text), &root), PSIM_OK);
  psim_cluster_init(c);
  psim_status s = psim_cluster_from_json("t.json", root, c);
  if (s != PSIM_OK)
    fprintf(stderr, "%s\n", psim_error_message());
  ck_assert_int_eq(s, PSIM_OK);
  cJSON_Delete(root);
}

static psim_status load_preset(const char *name, int nodes, int rack, double oversub,
                               psim_cluster *c) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = name;
  o.nodes = nodes;
  o.nodes_per_rack = rack;
  o.oversubscription = oversub;
  cJSON *root = NULL;
  PSIM_CHECK(psim_preset_cluster(&o, &root));
  psim_cluster_init(c);
  psim_status s = psim_cluster_from_json(name, root, c);
  cJSON_Delete(root);
  return s;
}

static int32_t dev(const psim_cluster *c, const char *name) {
  int32_t d = psim_cluster_find_device(c, name);
  ck_assert_msg(d >= 0, "no device %s", name);
  return d;
}

static int32_t route(psim_cluster *c, const char *a, const char *b, double *bw, double *lat) {
  const int32_t *links = NULL;
  int32_t n = 0;
  ck_assert_int_eq(psim_cluster_route(c, dev(c, a), dev(c, b), &links, &n), PSIM_OK);
  psim_cluster_route_cost(c, links, n, bw, lat);
  /* A route is a chain from a to b. */
  int32_t v = dev(c, a);
  for (int32_t i = 0; i < n; i++) {
    ck_assert_int_eq(c->links[links[i]].src, v);
    v = c->links[links[i]].dst;
  }
  ck_assert_int_eq(v, dev(c, b));
  return n;
}

/* Sum of a device's out-link bandwidth of one kind (bytes/s per direction). */
static double port_bw(const psim_cluster *c, int32_t d, psim_link_kind k) {
  double sum = 0;
  for (int32_t i = 0; i < c->n_links; i++)
    if (c->links[i].src == d && c->links[i].kind == k)
      sum += c->links[i].bw;
  return sum;
}

/* ---- hierarchical form, DGX A100 ------------------------------------------- */

START_TEST(dgx_a100_structure_and_routes) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("dgx-a100-80g", 2, 0, 1, &c), PSIM_OK);
  ck_assert_int_eq(c.n_devices, 16);
  ck_assert_int_eq(c.n_nodes, 2);
  ck_assert_int_eq(c.devices_per_node, 8);
  const psim_device_type *t = &c.types[c.devices[0].type];
  /* hardware.csv a100-sxm-80g: 312 TFLOP/s bf16, 80 GB, 2039 GB/s. */
  ck_assert_double_eq_tol(t->peak_flops[PSIM_DTYPE_BF16], 312e12, 1e9);
  ck_assert_double_eq_tol(t->mem_bytes, 80e9, 1);
  ck_assert_double_eq_tol(t->mem_bw, 2.039e12, 1e6);
  /* NVSwitch port: 600 GB/s both directions = 300 GB/s per direction. */
  ck_assert_double_eq_tol(port_bw(&c, 0, PSIM_LINK_NVLINK), 300e9, 1);
  double bw, lat;
  /* Same node: GPU -> NVSwitch -> GPU. */
  ck_assert_int_eq(route(&c, "node0.gpu0", "node0.gpu5", &bw, &lat), 2);
  ck_assert_double_eq_tol(bw, 300e9, 1);
  /* Across nodes in one rack: GPU -> NIC -> leaf -> NIC -> GPU, HDR 200 Gb/s. */
  ck_assert_int_eq(route(&c, "node0.gpu3", "node1.gpu3", &bw, &lat), 4);
  ck_assert_double_eq_tol(bw, 25e9, 1);
  ck_assert(lat > 0);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(fat_tree_racks_and_oversubscription) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("dgx-a100-80g", 4, 2, 4, &c), PSIM_OK);
  ck_assert_int_eq(c.n_racks, 2);
  double bw, lat;
  const int32_t *links;
  int32_t n;
  /* Across racks: GPU -> NIC -> leaf -> spine -> leaf -> NIC -> GPU. */
  ck_assert_int_eq(route(&c, "node0.gpu0", "node3.gpu0", &bw, &lat), 6);
  ck_assert_int_eq(psim_cluster_route(&c, dev(&c, "node0.gpu0"), dev(&c, "node3.gpu0"), &links, &n),
                   PSIM_OK);
  /* Uplink of a rack: 2 nodes x 8 NICs x 25 GB/s / 4 = 100 GB/s. */
  ck_assert_int_eq(c.links[links[2]].kind, PSIM_LINK_FABRIC);
  ck_assert_double_eq_tol(c.links[links[2]].bw, 2 * 8 * 25e9 / 4, 1);
  ck_assert_int_eq(c.devices[dev(&c, "node2.gpu0")].rack, 1);
  /* Within a rack no spine hop. */
  ck_assert_int_eq(route(&c, "node0.gpu0", "node1.gpu7", &bw, &lat), 4);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(hybrid_cube_mesh_wiring) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("dgx1-v100", 1, 0, 1, &c), PSIM_OK);
  /* Every V100 has 6 NVLink2 links of 25 GB/s per direction (hardware.csv:
   * 300 GB/s both directions). */
  for (int32_t d = 0; d < 8; d++)
    ck_assert_double_eq_tol(port_bw(&c, d, PSIM_LINK_NVLINK), 150e9, 1);
  double bw, lat;
  ck_assert_int_eq(route(&c, "node0.gpu0", "node0.gpu4", &bw, &lat), 1); /* double link */
  ck_assert_double_eq_tol(bw, 50e9, 1);
  ck_assert_int_eq(route(&c, "node0.gpu0", "node0.gpu1", &bw, &lat), 1);
  ck_assert_double_eq_tol(bw, 25e9, 1);
  /* GPU0 and GPU5 share no NVLink: two NVLink hops, not through a NIC. */
  const int32_t *links;
  int32_t n;
  ck_assert_int_eq(psim_cluster_route(&c, 0, 5, &links, &n), PSIM_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(c.links[links[0]].kind, PSIM_LINK_NVLINK);
  ck_assert_int_eq(c.links[links[1]].kind, PSIM_LINK_NVLINK);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(pcie_tree_routes) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("pcie-box", 1, 0, 1, &c), PSIM_OK);
  double bw, lat;
  ck_assert_int_eq(route(&c, "node0.gpu0", "node0.gpu3", &bw, &lat), 2); /* same switch */
  ck_assert_double_eq_tol(bw, 12e9, 1);
  ck_assert_int_eq(route(&c, "node0.gpu0", "node0.gpu4", &bw, &lat), 4); /* via host */
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(shared_nic_is_not_a_shortcut) {
  /* One NIC shared by 8 GPUs on an NVSwitch: GPU-to-GPU stays on NVLink. */
  psim_cluster c;
  load_text("{\"format\": \"plansim.cluster/1\", \"nodes\": 2, \"devices_per_node\": 8,"
            "\"device_type\": \"a100-80g\", \"intra_node\": {\"kind\": \"nvswitch\","
            "\"bandwidth\": \"300 GB/s\"}, \"nics_per_node\": 1, \"nic_bandwidth\": \"200 Gb/s\","
            "\"fabric\": {\"kind\": \"single_switch\"}}",
            &c);
  const int32_t *links;
  int32_t n;
  for (int32_t b = 1; b < 8; b++) {
    ck_assert_int_eq(psim_cluster_route(&c, 0, b, &links, &n), PSIM_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(c.links[links[0]].kind, PSIM_LINK_NVLINK);
  }
  double bw, lat;
  ck_assert_int_eq(route(&c, "node0.gpu1", "node1.gpu6", &bw, &lat), 4);
  ck_assert_double_eq_tol(bw, 25e9, 1);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(torus_fabric) {
  psim_cluster c;
  load_text("{\"format\": \"plansim.cluster/1\", \"nodes\": 8, \"devices_per_node\": 1,"
            "\"device_type\": \"v100\", \"nics_per_node\": 1, \"nic_bandwidth\": \"100 Gb/s\","
            "\"fabric\": {\"kind\": \"torus\", \"dims\": [4, 2]}}",
            &c);
  int fabric = 0;
  for (int32_t i = 0; i < c.n_links; i++)
    fabric += c.links[i].kind == PSIM_LINK_FABRIC;
  /* 4x2 torus: 8 links along the 4-ring dimension, 4 along the 2-ring: 12 cables, 24 directed. */
  ck_assert_int_eq(fabric, 24);
  double bw, lat;
  /* node0 -> node2: two router hops along the ring + NIC links. */
  ck_assert_int_eq(route(&c, "node0.gpu0", "node2.gpu0", &bw, &lat), 6);
  ck_assert_double_eq_tol(bw, 12.5e9, 1);
  psim_cluster_destroy(&c);
}
END_TEST

/* ---- explicit form and units ------------------------------------------------ */

static const char *ring_text =
    "{\"format\": \"plansim.cluster/1\", \"name\": \"ring\","
    " \"device_types\": {\"g\": {\"peak_flops\": {\"fp32\": \"10 TFLOP/s\", \"fp16\": 4e13},"
    "   \"memory\": \"16 GiB\", \"memory_bandwidth\": \"900 GB/s\", \"launch_overhead\": \"5 "
    "us\"}},"
    " \"devices\": [{\"name\": \"a\", \"type\": \"g\", \"node\": 0}, {\"name\": \"b\", \"type\": "
    "\"g\", \"node\": 0},"
    "   {\"name\": \"c\", \"type\": \"v100\", \"node\": 1}, {\"name\": \"d\", \"type\": \"v100\", "
    "\"node\": 1}],"
    " \"switches\": [\"sw\"],"
    " \"links\": [{\"a\": \"a\", \"b\": \"b\", \"bandwidth\": \"200 Gb/s\", \"latency\": \"2 us\"},"
    "   {\"a\": \"b\", \"b\": \"c\", \"bandwidth\": 1e10, \"kind\": \"nic\"},"
    "   {\"a\": \"c\", \"b\": \"d\", \"bandwidth\": \"50 GB/s\", \"latency\": 1e-6},"
    "   {\"a\": \"d\", \"b\": \"sw\", \"bandwidth\": \"1 GB/s\"},"
    "   {\"a\": \"sw\", \"b\": \"a\", \"bandwidth\": \"1 GB/s\"}],"
    " \"slowdown\": {\"c\": 1.5},"
    " \"collectives\": [{\"op\": \"all_reduce\", \"group_size\": 2, \"scope\": \"intra_node\","
    "   \"points\": [[\"1 MiB\", \"10 GB/s\"], [\"1 GiB\", \"20 GB/s\"]]}]}";

START_TEST(explicit_form_and_units) {
  psim_cluster c;
  load_text(ring_text, &c);
  ck_assert_int_eq(c.n_devices, 4);
  ck_assert_int_eq(c.n_vertices, 5);
  ck_assert_int_eq(c.n_links, 10);
  ck_assert_int_eq(c.n_nodes, 2);
  ck_assert_int_eq(c.devices_per_node, 2);
  ck_assert_int_eq(c.n_types, 2);
  const psim_device_type *g = &c.types[psim_cluster_find_type(&c, "g")];
  ck_assert_double_eq_tol(g->peak_flops[PSIM_DTYPE_FP32], 10e12, 1);
  ck_assert_double_eq(g->mem_bytes, 16.0 * 1073741824.0);
  ck_assert_double_eq_tol(g->launch_s, 5e-6, 1e-15);
  /* bf16 unsupported -> falls back to fp32. */
  ck_assert_double_eq_tol(psim_device_peak_flops(&c, 0, PSIM_DTYPE_BF16), 10e12, 1);
  ck_assert_double_eq_tol(psim_device_peak_flops(&c, 0, PSIM_DTYPE_FP16), 40e12, 1);
  /* "200 Gb/s" is 25e9 bytes/s; "2 us" is 2e-6 s. */
  ck_assert_double_eq_tol(c.links[0].bw, 25e9, 1);
  ck_assert_double_eq_tol(c.links[0].latency_s, 2e-6, 1e-15);
  ck_assert_int_eq(c.links[2].kind, PSIM_LINK_NIC);
  ck_assert_double_eq_tol(c.devices[2].slowdown, 1.5, 1e-12);
  ck_assert_int_eq(c.n_coll_tables, 1);
  ck_assert_double_eq(c.coll_tables[0].bytes[1], 1073741824.0);
  ck_assert_double_eq_tol(c.coll_tables[0].busbw[1], 20e9, 1);
  double bw, lat;
  /* a -> c: a-b-c (2 hops) beats a-sw-d-c (3 hops) despite its bandwidth. */
  ck_assert_int_eq(route(&c, "a", "c", &bw, &lat), 2);
  ck_assert_double_eq_tol(bw, 10e9, 1);
  ck_assert_double_eq_tol(lat, 2e-6, 1e-15);
  /* a -> d: 2 hops both ways (a-sw-d at 1 GB/s, latency 0; a-b-c-d is 3): the 2-hop one. */
  ck_assert_int_eq(route(&c, "a", "d", &bw, &lat), 2);
  ck_assert_double_eq_tol(bw, 1e9, 1);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(ties_break_by_latency) {
  /* Two 2-hop paths a->x->b (1 us per hop) and a->y->b (2 us); x is listed
   * second, so only latency can pick it. */
  psim_cluster c;
  load_text("{\"format\": \"plansim.cluster/1\", \"devices\": [{\"name\": \"a\", \"type\": "
            "\"v100\"}, {\"name\": \"b\", \"type\": \"v100\"}], \"switches\": [\"y\", \"x\"],"
            "\"links\": [{\"a\": \"a\", \"b\": \"y\", \"bandwidth\": 1e9, \"latency\": 2e-6},"
            "{\"a\": \"y\", \"b\": \"b\", \"bandwidth\": 1e9, \"latency\": 2e-6},"
            "{\"a\": \"a\", \"b\": \"x\", \"bandwidth\": 1e9, \"latency\": 1e-6},"
            "{\"a\": \"x\", \"b\": \"b\", \"bandwidth\": 1e9, \"latency\": 1e-6}]}",
            &c);
  double bw, lat;
  ck_assert_int_eq(route(&c, "a", "b", &bw, &lat), 2);
  ck_assert_double_eq_tol(lat, 2e-6, 1e-15);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(round_trip_explicit) {
  psim_cluster c, d;
  ck_assert_int_eq(load_preset("dgx1-v100", 2, 0, 1, &c), PSIM_OK);
  cJSON *j = NULL;
  ck_assert_int_eq(psim_cluster_to_json(&c, &j), PSIM_OK);
  psim_cluster_init(&d);
  ck_assert_int_eq(psim_cluster_from_json("rt.json", j, &d), PSIM_OK);
  cJSON_Delete(j);
  ck_assert_int_eq(d.n_links, c.n_links);
  ck_assert_int_eq(d.n_vertices, c.n_vertices);
  ck_assert_int_eq(d.n_nodes, 2);
  for (int32_t a = 0; a < c.n_devices; a++)
    for (int32_t b = 0; b < c.n_devices; b++) {
      const int32_t *l1, *l2;
      int32_t n1, n2;
      double bw1, bw2, lat1, lat2;
      ck_assert_int_eq(psim_cluster_route(&c, a, b, &l1, &n1), PSIM_OK);
      ck_assert_int_eq(psim_cluster_route(&d, a, b, &l2, &n2), PSIM_OK);
      psim_cluster_route_cost(&c, l1, n1, &bw1, &lat1);
      psim_cluster_route_cost(&d, l2, n2, &bw2, &lat2);
      ck_assert_int_eq(n1, n2);
      ck_assert(bw1 == bw2 && lat1 == lat2);
    }
  /* the software's overheads travel too: a built-in GPU type's are the fitted Megatron-LM
   * figures, not zero, and the explicit form must simulate as the cluster it came from */
  ck_assert_int_eq(d.n_types, c.n_types);
  for (int32_t t = 0; t < c.n_types; t++) {
    ck_assert(c.types[t].rt.host_issue_s > 0);
    ck_assert(d.types[t].rt.host_issue_s == c.types[t].rt.host_issue_s);
    ck_assert(d.types[t].rt.coll_sync_s == c.types[t].rt.coll_sync_s);
    ck_assert(d.types[t].rt.iteration_s == c.types[t].rt.iteration_s);
  }
  psim_cluster_destroy(&c);
  psim_cluster_destroy(&d);
}
END_TEST

/* ---- validation: every bad file names its JSON path ---------------------------- */

typedef struct bad_case {
  const char *file, *expect;
} bad_case;

static const bad_case bad_cases[] = {
    {"cluster-bad-format.json", "format: expected \"plansim.cluster/1\""},
    {"cluster-unknown-key.json", "unknown key 'nodez'"},
    {"cluster-zero-bandwidth.json", "links[0].bandwidth: must be greater than zero"},
    {"cluster-negative-bandwidth.json", "intra_node.bandwidth"},
    {"cluster-unknown-device-type.json", "device_type: unknown device type 'a100-999'"},
    {"cluster-duplicate-device.json", "devices[1].name: duplicate name 'g0'"},
    {"cluster-unknown-endpoint.json", "links[1].b: unknown device or switch 'nope'"},
    {"cluster-disconnected.json", "devices[2]: device 'g0' and device 'g2' are not connected"},
    {"cluster-too-many-devices.json", "nodes: 2000 nodes x 1000 devices_per_node"},
    {"cluster-bad-unit.json", "nic_bandwidth"},
    {"cluster-no-nics.json", "nics_per_node"},
    {"cluster-unknown-intra-kind.json", "intra_node.kind: unknown kind 'nvswich'"},
    {"cluster-cube-mesh-size.json", "intra_node: kind 'hybrid_cube_mesh'"},
    {"cluster-torus-dims.json", "fabric.dims: the product"},
    {"cluster-collective-order.json", "collectives[0].points[1][0]: message sizes must increase"},
    {"cluster-slowdown-unknown.json", "slowdown.node0.gpu9: unknown device"},
    {"cluster-self-link.json", "links[0]: a link must join two different vertices"},
    {"cluster-one-way.json", "not connected both ways"},
    {"cluster-type-missing-memory.json", "device_types.mygpu: missing required key 'memory'"},
    {"cluster-oversubscription.json", "fabric.oversubscription"},
    {"cluster-duplicate-type.json", "device_types.x: duplicate device type name"},
    {"cluster-empty-devices.json", "devices: expected 1 to"},
    {"cluster-link-kind.json", "links[0].kind: unknown link kind 'infiniband'"},
    {"cluster-nodes-per-rack.json", "fabric.nodes_per_rack"},
    {"cluster-efficiency-range.json", "device_types.g.efficiency.gemm_max"},
    {"cluster-runtime-range.json",
     "device_types.g.runtime.host_issue: must be a time in [0, 10 s]"},
    {"cluster-truncated.json", "cluster-truncated.json:2:"},
    {NULL, NULL}};

START_TEST(bad_files_name_the_path) {
  for (const bad_case *b = bad_cases; b->file; b++) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/bad/%s", ROOT, b->file);
    psim_cluster c;
    psim_cluster_init(&c);
    psim_status s = psim_cluster_load(path, &c);
    ck_assert_msg(s == PSIM_EINPUT, "%s: status %d", b->file, s);
    const char *msg = psim_error_message();
    ck_assert_msg(strstr(msg, b->file) != NULL, "%s: message lacks the file: %s", b->file, msg);
    ck_assert_msg(strstr(msg, b->expect) != NULL, "%s: expected '%s' in: %s", b->file, b->expect,
                  msg);
    ck_assert_int_eq(c.n_devices, 0); /* left empty */
    psim_cluster_destroy(&c);
  }
}
END_TEST

START_TEST(every_bad_cluster_file_is_listed) {
  glob_t g;
  ck_assert_int_eq(glob(ROOT "/tests/data/bad/cluster-*.json", 0, NULL, &g), 0);
  ck_assert_int_ge((int)g.gl_pathc, 12);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    const char *base = strrchr(g.gl_pathv[i], '/') + 1;
    bool found = false;
    for (const bad_case *b = bad_cases; b->file; b++)
      found = found || strcmp(b->file, base) == 0;
    ck_assert_msg(found, "%s has no expected message in bad_cases", base);
  }
  globfree(&g);
}
END_TEST

/* ---- presets and shipped files --------------------------------------------------- */

START_TEST(every_preset_loads) {
  for (const char *const *p = psim_preset_names(); *p; p++)
    for (int nodes = 1; nodes <= 3; nodes++) {
      psim_cluster c;
      psim_status s = load_preset(*p, nodes, 0, 1, &c);
      ck_assert_msg(s == PSIM_OK, "%s x%d: %s", *p, nodes, psim_error_message());
      ck_assert_int_eq(c.n_nodes, nodes);
      ck_assert_int_eq(c.n_devices, nodes * c.devices_per_node);
      psim_cluster_destroy(&c);
    }
  psim_cluster c;
  ck_assert_int_eq(load_preset("nope", 1, 0, 1, &c), PSIM_EINPUT);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "dgx-a100-80g"));
}
END_TEST

START_TEST(cpu_preset_uses_this_machine) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("cpu", 2, 0, 1, &c), PSIM_OK);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  ck_assert_int_eq(c.devices_per_node, (int32_t)cores);
  psim_cpu_info ci;
  psim_cpu_info_detect(&ci);
  const psim_device_type *t = &c.types[c.devices[0].type];
  /* Per-core peak = lanes x 2 FLOP per FMA x FMA units (1 or 2) x clock. */
  double per_unit = ci.simd_fp32_lanes * 2.0 * ci.clock_hz;
  ck_assert(fabs(t->peak_flops[PSIM_DTYPE_FP32] - per_unit) < 1 ||
            fabs(t->peak_flops[PSIM_DTYPE_FP32] - 2 * per_unit) < 1);
  /* Cores share the node's memory bandwidth. */
  ck_assert_double_eq_tol(t->mem_bw * cores, ci.node_mem_bw, 1);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(shipped_topologies_load) {
  glob_t g;
  ck_assert_int_eq(glob(ROOT "/topologies/*.json", 0, NULL, &g), 0);
  ck_assert_int_ge((int)g.gl_pathc, 10);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    psim_cluster c;
    psim_cluster_init(&c);
    psim_status s = psim_cluster_load(g.gl_pathv[i], &c);
    ck_assert_msg(s == PSIM_OK, "%s", psim_error_message());
    ck_assert_int_ge(c.n_devices, 1);
    psim_cluster_destroy(&c);
  }
  globfree(&g);
}
END_TEST

START_TEST(preset_node_counts_of_shipped_files) {
  static const struct {
    const char *file;
    int devices;
  } want[] = {{"dgx-a100-x1.json", 8},      {"dgx-a100-x2.json", 16},
              {"dgx-a100-x16.json", 128},   {"dgx-a100-x128.json", 1024},
              {"dgx-a100-x384.json", 3072}, {"dgx-h100-x1.json", 8},
              {"dgx-h100-x32.json", 256},   {"dgx1-v100-x8.json", 64},
              {"v100-x8-25g.json", 64},     {"p100-nvlink-x4.json", 16},
              {"pcie-box.json", 8},         {"dgx-a100-x16-oversub4.json", 128},
              {"explicit-ring.json", 4},    {NULL, 0}};
  for (int i = 0; want[i].file; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/topologies/%s", ROOT, want[i].file);
    psim_cluster c;
    psim_cluster_init(&c);
    ck_assert_msg(psim_cluster_load(path, &c) == PSIM_OK, "%s", psim_error_message());
    ck_assert_int_eq(c.n_devices, want[i].devices);
    psim_cluster_destroy(&c);
  }
}
END_TEST

/* Among routes of equal hop count the wider wins, then the lower latency (NCCL's rule,
 * sim/ir/route.c): in explicit-ring.json gpu0 reaches gpu2 in two hops either through gpu1
 * (NVLink 50 GB/s, 0.6 + 0.6 us) or through the host bridge (PCIe 15.75 GB/s, 0.5 + 0.5 us);
 * the route is the NVLink one, though its latency is higher. */
START_TEST(equal_hop_routes_take_the_wider) {
  char path[512];
  snprintf(path, sizeof path, "%s/topologies/explicit-ring.json", ROOT);
  psim_cluster c;
  psim_cluster_init(&c);
  ck_assert_msg(psim_cluster_load(path, &c) == PSIM_OK, "%s", psim_error_message());
  int32_t a = psim_cluster_find_device(&c, "gpu0"), b = psim_cluster_find_device(&c, "gpu2");
  const int32_t *links;
  int32_t n;
  ck_assert_int_eq(psim_cluster_route(&c, a, b, &links, &n), PSIM_OK);
  double bw, lat;
  psim_cluster_route_cost(&c, links, n, &bw, &lat);
  ck_assert_int_eq(n, 2);
  ck_assert_double_eq_tol(bw, 50e9, 1);
  ck_assert_double_eq_tol(lat, 1.2e-6, 1e-12);
  ck_assert_str_eq(c.vertex_names[c.links[links[0]].dst], "gpu1");
  psim_cluster_destroy(&c);
}
END_TEST

/* An explicit ring of n GPUs on NVLink (30 GB/s), each on PCIe (12 GB/s) to one switch unless
 * it is `cut` (-1: none) or there is no switch (with_switch false). */
static void nvlink_ring(int n, bool with_switch, int cut, psim_cluster *c) {
  char text[4096];
  int k = snprintf(text, sizeof text, "{\"format\": \"plansim.cluster/1\", \"devices\": [");
  for (int i = 0; i < n; i++)
    k += snprintf(text + k, sizeof text - (size_t)k,
                  "%s{\"name\": \"d%d\", \"type\": \"a100-80g\"}", i ? ", " : "", i);
  k += snprintf(text + k, sizeof text - (size_t)k, "], \"switches\": [%s], \"links\": [",
                with_switch ? "\"sw\"" : "");
  for (int i = 0; i < n; i++) {
    k += snprintf(text + k, sizeof text - (size_t)k,
                  "%s{\"a\": \"d%d\", \"b\": \"d%d\", \"bandwidth\": 3e10, \"kind\": \"nvlink\"}",
                  i ? ", " : "", i, (i + 1) % n);
    if (with_switch && i != cut)
      k += snprintf(text + k, sizeof text - (size_t)k,
                    ", {\"a\": \"d%d\", \"b\": \"sw\", \"bandwidth\": 1.2e10, \"kind\": \"pcie\"}",
                    i);
  }
  snprintf(text + k, sizeof text - (size_t)k, "]}");
  load_text(text, c);
}

/* A GPU forwards NVLink traffic only as NCCL's NVB and PXN paths (route.c, may_follow): one
 * NVLink hop from the source onward. Before, a GPU that lost its PCIe link routed over three
 * NVLink hops through two peers, wider than the PCIe route, so removing a link made an
 * iteration faster (issue 18, invariant (b), case seeds 9002362 and 9002933). */
START_TEST(gpus_forward_only_as_nccl_nvb_and_pxn) {
  psim_cluster c;
  double bw, lat;
  nvlink_ring(8, true, -1, &c);
  ck_assert_int_eq(route(&c, "d0", "d4", &bw, &lat), 2); /* d0-sw-d4 */
  ck_assert_double_eq_tol(bw, 1.2e10, 1);
  ck_assert_int_eq(route(&c, "d0", "d2", &bw, &lat), 2); /* NVB over d1, wider than PCIe */
  ck_assert_double_eq_tol(bw, 3e10, 1);
  psim_cluster_destroy(&c);
  nvlink_ring(8, true, 7, &c); /* d7 without PCIe: PXN over a neighbour's PCIe */
  ck_assert_int_eq(route(&c, "d7", "d4", &bw, &lat), 3);
  ck_assert_double_eq_tol(bw, 1.2e10, 1);
  ck_assert_int_eq(route(&c, "d4", "d7", &bw, &lat), 3); /* the receiving end's mirror */
  ck_assert_double_eq_tol(bw, 1.2e10, 1);
  psim_cluster_destroy(&c);
  nvlink_ring(6, false, -1, &c); /* no host side: only NVB pairs have a route */
  ck_assert_int_eq(route(&c, "d0", "d2", &bw, &lat), 2);
  const int32_t *links;
  int32_t n;
  ck_assert_int_eq(psim_cluster_route(&c, dev(&c, "d0"), dev(&c, "d3"), &links, &n), PSIM_EFAILED);
  ck_assert_ptr_nonnull(strstr(psim_error_message(), "no route from device 'd0' to device 'd3'"));
  psim_cluster_destroy(&c);
}
END_TEST

/* ---- route cache and scale --------------------------------------------------------- */

START_TEST(route_cache_returns_same_route) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("dgx-h100", 2, 0, 1, &c), PSIM_OK);
  const int32_t *l1, *l2;
  int32_t n1, n2;
  ck_assert_int_eq(psim_cluster_route(&c, 3, 12, &l1, &n1), PSIM_OK);
  ck_assert_int_eq(psim_cluster_route(&c, 5, 9, &l2, &n2), PSIM_OK); /* another source between */
  ck_assert_int_eq(psim_cluster_route(&c, 3, 12, &l2, &n2), PSIM_OK);
  ck_assert_ptr_eq(l1, l2);
  ck_assert_int_eq(n1, n2);
  ck_assert_int_eq(psim_cluster_route(&c, 4, 4, &l1, &n1), PSIM_OK);
  ck_assert_int_eq(n1, 0);
  ck_assert_int_eq(psim_cluster_route(&c, 0, 16, &l1, &n1), PSIM_EINPUT);
  /* H100 NDR 400 Gb/s = 50 GB/s per direction. */
  double bw, lat;
  ck_assert_int_eq(route(&c, "node0.gpu2", "node1.gpu2", &bw, &lat), 4);
  ck_assert_double_eq_tol(bw, 50e9, 1);
  psim_cluster_destroy(&c);
}
END_TEST

/* The name map: every vertex of a generated cluster is found by its own name, a name
 * one character off is not, and a duplicate names the first repeat and its original. */
START_TEST(every_vertex_found_by_name) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("dgx-a100-80g", 64, 0, 1, &c), PSIM_OK);
  char buf[256];
  for (int32_t v = 0; v < c.n_vertices; v++) {
    ck_assert_int_eq(psim_cluster_find_vertex(&c, c.vertex_names[v]), v);
    snprintf(buf, sizeof buf, "%s~", c.vertex_names[v]);
    ck_assert_int_eq(psim_cluster_find_vertex(&c, buf), -1);
  }
  ck_assert_int_eq(psim_cluster_find_vertex(&c, ""), -1);
  /* vertices 5 and 9 take the names of 2 and 3: 5 is the first repeat */
  char *n5 = c.vertex_names[5], *n9 = c.vertex_names[9];
  c.vertex_names[5] = c.vertex_names[2];
  c.vertex_names[9] = c.vertex_names[3];
  bool unique = true;
  int32_t a = -1, b = -1;
  ck_assert_int_eq(psim_cluster_index_names(&c, &unique, &a, &b), PSIM_OK);
  ck_assert(!unique);
  ck_assert_int_eq(a, 2);
  ck_assert_int_eq(b, 5);
  c.vertex_names[5] = n5;
  c.vertex_names[9] = n9;
  ck_assert_int_eq(psim_cluster_index_names(&c, &unique, &a, &b), PSIM_OK);
  ck_assert(unique);
  ck_assert_int_eq(psim_cluster_find_vertex(&c, n9), 9);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(large_cluster_routes_fast) {
  psim_cluster c;
  double t0 = psim_clock_now_s();
  ck_assert_int_eq(load_preset("dgx-a100-80g", 384, 0, 1, &c), PSIM_OK);
  ck_assert_int_eq(c.n_devices, 3072);
  double t1 = psim_clock_now_s();
  srand(12345);
  for (int i = 0; i < 10000; i++) {
    int32_t a = rand() % 3072, b = rand() % 3072, n;
    const int32_t *links;
    ck_assert_int_eq(psim_cluster_route(&c, a, b, &links, &n), PSIM_OK);
    /* 20 nodes per rack: same node 2 hops, same rack 4, else 6. */
    int na = a / 8, nb = b / 8;
    int want = a == b ? 0 : na == nb ? 2 : na / 20 == nb / 20 ? 4 : 6;
    ck_assert_int_eq(n, want);
  }
  double t2 = psim_clock_now_s();
  ck_assert_msg(t1 - t0 < 1.0 * TIME_SCALE, "load took %.2f s", t1 - t0);
  ck_assert_msg(t2 - t1 < 5.0 * TIME_SCALE, "10,000 routes took %.2f s", t2 - t1);
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(hop_counts_match_igraph) {
  /* igraph's unweighted distances are the oracle for hop counts. */
  psim_cluster c;
  ck_assert_int_eq(load_preset("dgx1-v100", 3, 2, 2, &c), PSIM_OK);
  const void *g = NULL;
  ck_assert_int_eq(psim_cluster_igraph(&c, &g), PSIM_OK);
  igraph_matrix_t m;
  igraph_matrix_init(&m, 0, 0);
  igraph_vs_t all;
  igraph_vs_range(&all, 0, c.n_devices);
  ck_assert_int_eq(igraph_distances((const igraph_t *)g, &m, all, all, IGRAPH_OUT), 0);
  for (int32_t a = 0; a < c.n_devices; a++)
    for (int32_t b = 0; b < c.n_devices; b++) {
      const int32_t *links;
      int32_t n;
      ck_assert_int_eq(psim_cluster_route(&c, a, b, &links, &n), PSIM_OK);
      ck_assert_int_eq(n, (int32_t)MATRIX(m, a, b));
    }
  igraph_matrix_destroy(&m);
  psim_cluster_destroy(&c);
}
END_TEST

/* The load's connectivity check (cluster.c: a forward and a backward search from device 0)
 * against igraph's strongly connected components, the check it replaces: on presets with
 * random one-way links removed (fixed seed), the same verdict and the same first device
 * outside device 0's component. Both verdicts occur. */
static void igraph_verdict(const psim_cluster *c, bool *ok, int32_t *dev_b) {
  igraph_vector_int_t edges, memb;
  igraph_vector_int_init(&edges, 2 * (igraph_integer_t)c->n_links);
  for (int32_t i = 0; i < c->n_links; i++) {
    VECTOR(edges)[2 * i] = c->links[i].src;
    VECTOR(edges)[2 * i + 1] = c->links[i].dst;
  }
  igraph_t g;
  ck_assert_int_eq(igraph_create(&g, &edges, c->n_vertices, IGRAPH_DIRECTED), 0);
  igraph_vector_int_init(&memb, 0);
  igraph_integer_t ncomp = 0;
  ck_assert_int_eq(igraph_connected_components(&g, &memb, NULL, &ncomp, IGRAPH_STRONG), 0);
  *ok = true;
  for (int32_t i = 1; i < c->n_devices && *ok; i++)
    if (VECTOR(memb)[i] != VECTOR(memb)[0]) {
      *ok = false;
      *dev_b = i;
    }
  igraph_vector_int_destroy(&memb);
  igraph_vector_int_destroy(&edges);
  igraph_destroy(&g);
}

START_TEST(connectivity_matches_igraph) {
  static const char *const presets[] = {"dgx-a100-80g", "dgx1-v100", "dgx-h100"};
  unsigned seed = 19;
  int n_ok = 0, n_cut = 0;
  for (int t = 0; t < 60; t++) {
    psim_cluster c;
    ck_assert_int_eq(load_preset(presets[t % 3], 2 + t % 3, t % 2 ? 2 : 0, 1, &c), PSIM_OK);
    int drop = 1 + (int)(rand_r(&seed) % (unsigned)(1 + t));
    for (int k = 0; k < drop && c.n_links > 0; k++) { /* one-way links gone */
      int32_t i = (int32_t)(rand_r(&seed) % (unsigned)c.n_links);
      c.links[i] = c.links[--c.n_links];
    }
    int32_t cut = t % 4 == 0 ? (int32_t)(rand_r(&seed) % (unsigned)c.n_vertices) : -1;
    for (int32_t i = c.n_links - 1; i >= 0 && cut >= 0; i--) /* every link into one vertex */
      if (c.links[i].dst == cut)
        c.links[i] = c.links[--c.n_links];
    bool ok = false, ok_ref = false;
    int32_t a = -1, b = -1, b_ref = -1;
    ck_assert_int_eq(psim_cluster_check_connected(&c, &ok, &a, &b), PSIM_OK);
    igraph_verdict(&c, &ok_ref, &b_ref);
    ck_assert_int_eq(ok, ok_ref);
    if (!ok) {
      ck_assert_int_eq(a, 0);
      ck_assert_int_eq(b, b_ref);
    }
    n_ok += ok;
    n_cut += !ok;
    psim_cluster_destroy(&c);
  }
  ck_assert_int_gt(n_ok, 0);
  ck_assert_int_gt(n_cut, 0);
}
END_TEST

typedef struct thread_arg {
  psim_cluster *c;
  int seed, bad;
} thread_arg;

static void *route_many(void *p) {
  thread_arg *a = p;
  unsigned s = (unsigned)a->seed;
  for (int i = 0; i < 2000; i++) {
    int32_t x = (int32_t)(rand_r(&s) % 256), y = (int32_t)(rand_r(&s) % 256), n;
    const int32_t *links;
    if (psim_cluster_route(a->c, x, y, &links, &n) != PSIM_OK)
      a->bad++;
    else if (n > 0 && (a->c->links[links[0]].src != x || a->c->links[links[n - 1]].dst != y))
      a->bad++;
  }
  return NULL;
}

START_TEST(routes_are_thread_safe) {
  psim_cluster c;
  ck_assert_int_eq(load_preset("dgx-h100", 32, 4, 2, &c), PSIM_OK);
  pthread_t t[4];
  thread_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (thread_arg){&c, 7, 0}; /* same pairs in every thread: maximal contention */
    ck_assert_int_eq(pthread_create(&t[i], NULL, route_many, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    ck_assert_int_eq(a[i].bad, 0);
  }
  psim_cluster_destroy(&c);
}
END_TEST

START_TEST(allocation_failures_are_clean) {
  cJSON *root = NULL;
  ck_assert_int_eq(psim_json_parse("t.json", ring_text, strlen(ring_text), &root), PSIM_OK);
  int failures = 0;
  for (long n = 1; n < 400; n++) {
    psim_cluster c;
    psim_cluster_init(&c);
    psim_alloc_fail_at(n);
    psim_status s = psim_cluster_from_json("t.json", root, &c);
    if (s == PSIM_OK) {
      const int32_t *links;
      int32_t k;
      s = psim_cluster_route(&c, 0, 3, &links, &k);
    }
    psim_alloc_fail_at(0);
    ck_assert(s == PSIM_OK || s == PSIM_ENOMEM);
    failures += s == PSIM_ENOMEM;
    psim_cluster_destroy(&c);
  }
  ck_assert_int_gt(failures, 10);
  cJSON_Delete(root);
}
END_TEST

int main(void) {
  psim_json_init_hooks();
  Suite *s = suite_create("cluster");
  TCase *tc = tcase_create("cluster");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, dgx_a100_structure_and_routes);
  tcase_add_test(tc, fat_tree_racks_and_oversubscription);
  tcase_add_test(tc, hybrid_cube_mesh_wiring);
  tcase_add_test(tc, pcie_tree_routes);
  tcase_add_test(tc, shared_nic_is_not_a_shortcut);
  tcase_add_test(tc, torus_fabric);
  tcase_add_test(tc, explicit_form_and_units);
  tcase_add_test(tc, ties_break_by_latency);
  tcase_add_test(tc, round_trip_explicit);
  tcase_add_test(tc, bad_files_name_the_path);
  tcase_add_test(tc, every_bad_cluster_file_is_listed);
  tcase_add_test(tc, every_preset_loads);
  tcase_add_test(tc, cpu_preset_uses_this_machine);
  tcase_add_test(tc, shipped_topologies_load);
  tcase_add_test(tc, preset_node_counts_of_shipped_files);
  tcase_add_test(tc, equal_hop_routes_take_the_wider);
  tcase_add_test(tc, gpus_forward_only_as_nccl_nvb_and_pxn);
  tcase_add_test(tc, route_cache_returns_same_route);
  tcase_add_test(tc, every_vertex_found_by_name);
  tcase_add_test(tc, large_cluster_routes_fast);
  tcase_add_test(tc, hop_counts_match_igraph);
  tcase_add_test(tc, connectivity_matches_igraph);
  tcase_add_test(tc, routes_are_thread_safe);
  tcase_add_test(tc, allocation_failures_are_clean);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
