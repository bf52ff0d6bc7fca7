/* cluster_hier.c - the hierarchical form of plansim.cluster/1: nodes of
 * identical devices, an intra-node fabric, NICs and a fabric between nodes,
 * expanded into vertices and links (docs/cluster.md says how each is
 * modelled). */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/cluster_impl.h"

typedef enum intra_kind {
  INTRA_NVSWITCH,
  INTRA_NVLINK_MESH,
  INTRA_HYBRID_CUBE_MESH,
  INTRA_PCIE_TREE,
  INTRA_SHARED_MEMORY,
  INTRA_NONE
} intra_kind;
static const char *const intra_names[] = {
    "nvswitch", "nvlink_mesh", "hybrid_cube_mesh", "pcie_tree", "shared_memory", "none", NULL};

typedef enum fabric_kind { FABRIC_FAT_TREE, FABRIC_SINGLE_SWITCH, FABRIC_TORUS } fabric_kind;
static const char *const fabric_names[] = {"fat_tree", "single_switch", "torus", NULL};

/* Default latencies, s, per link traversal. NCCL's latency model
 * (src/graph/tuning.cc, hwLat, LL protocol) charges about 0.6 us per NVLink
 * hop, 1.0 us per PCIe hop and 2.7-5 us per network hop: an NVSwitch path
 * (GPU -> switch -> GPU) gets 0.3 us per link, a direct NVLink 0.6 us, a PCIe
 * link 0.5 us, the NIC link 1 us; switch-to-switch 0.13 us is the port-to-port
 * latency of an InfiniBand HDR switch (NVIDIA Quantum QM8700 data sheet);
 * 0.1 us for a CPU memory access (DRAM latency). */
static const double intra_default_lat[] = {0.3e-6, 0.6e-6, 0.6e-6, 0.5e-6, 0.1e-6, 0};
#define NIC_LATENCY_S    1e-6
#define PCIE_LATENCY_S   0.5e-6
#define FABRIC_LATENCY_S 0.13e-6
/* PCIe 4.0 x16 per direction: 16 GT/s x 16 lanes x 128/130 encoding / 8 bits. */
#define PCIE4_X16_BW 31.5e9

/* DGX-1 hybrid cube-mesh wiring (NVIDIA DGX-1 System Architecture white paper
 * WP-08437-002, Figure 4; "nvidia-smi topo -m" on DGX-1V): GPU pairs and the
 * number of NVLinks between them. Each GPU has 6 links, 24 in all. */
static const int hcm_wiring[][3] = {
    {0, 1, 1}, {0, 2, 1}, {0, 3, 2}, {0, 4, 2}, {1, 2, 2}, {1, 3, 1}, {1, 5, 2}, {2, 3, 2},
    {2, 6, 1}, {3, 7, 1}, {4, 5, 1}, {4, 6, 1}, {4, 7, 2}, {5, 6, 2}, {5, 7, 1}, {6, 7, 2}};

#define MAX_TORUS_DIMS 3

typedef struct hier {
  int64_t nodes, dpn, nics;
  int32_t type;
  intra_kind intra;
  double intra_bw, intra_lat, host_bw;
  int64_t gpus_per_switch;
  double nic_bw, nic_lat, pcie_bw, pcie_lat;
  fabric_kind fabric;
  int64_t nodes_per_rack;
  double oversub, fabric_lat, torus_bw;
  int64_t dims[MAX_TORUS_DIMS];
  int ndims;
} hier;

static psim_status enum_key(psim_jctx *j, const cJSON *o, const char *key, const char *const *names,
                            int *out) {
  const char *s = NULL;
  PSIM_CHECK(psim_json_string(j, o, key, true, &s));
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], s) == 0) {
      *out = i;
      return PSIM_OK;
    }
  char list[256] = "";
  for (int i = 0; names[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
  return psim_cluster_key_err(j, key, "unknown kind '%.80s'; expected one of: %s", s, list);
}

static psim_status positive(psim_jctx *j, const cJSON *o, const char *key, bool required,
                            double *out) {
  PSIM_CHECK(psim_json_quantity(j, o, key, required, PSIM_UNIT_BANDWIDTH, out));
  if (*out > 0)
    return PSIM_OK;
  return psim_cluster_key_err(j, key, "must be greater than zero; expected %s",
                              psim_units_kind_name(PSIM_UNIT_BANDWIDTH));
}

/* ---- reading --------------------------------------------------------------- */

static psim_status read_intra(psim_jctx *j, const cJSON *o, hier *h) {
  static const char *const keys[] = {"kind",           "bandwidth", "latency", "gpus_per_switch",
                                     "host_bandwidth", NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  int k = 0;
  PSIM_CHECK(enum_key(j, o, "kind", intra_names, &k));
  h->intra = (intra_kind)k;
  h->intra_lat = intra_default_lat[k];
  if (h->intra != INTRA_NONE)
    PSIM_CHECK(positive(j, o, "bandwidth", true, &h->intra_bw));
  PSIM_CHECK(psim_json_quantity(j, o, "latency", false, PSIM_UNIT_TIME, &h->intra_lat));
  h->gpus_per_switch = h->dpn;
  PSIM_CHECK(psim_json_int(j, o, "gpus_per_switch", false, 1, h->dpn, &h->gpus_per_switch));
  h->host_bw = h->intra_bw;
  if (cJSON_GetObjectItemCaseSensitive(o, "host_bandwidth"))
    PSIM_CHECK(positive(j, o, "host_bandwidth", false, &h->host_bw));
  if (h->intra == INTRA_HYBRID_CUBE_MESH && h->dpn != 8)
    return psim_jerr(j,
                     "kind 'hybrid_cube_mesh' is the 8-GPU DGX-1 wiring; devices_per_node "
                     "is %lld",
                     (long long)h->dpn);
  if (h->intra == INTRA_NONE && h->dpn != 1)
    return psim_jerr(j, "kind 'none' needs devices_per_node 1; found %lld", (long long)h->dpn);
  return PSIM_OK;
}

static psim_status read_dims(psim_jctx *j, const cJSON *o, hier *h) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dims");
  if (!d) {
    h->ndims = 1; /* a ring of nodes */
    h->dims[0] = h->nodes;
    return PSIM_OK;
  }
  size_t sv = psim_jctx_key(j, "dims");
  psim_status s = psim_json_expect_array(j, d);
  int n = s == PSIM_OK ? cJSON_GetArraySize(d) : 0;
  if (s == PSIM_OK && (n < 1 || n > MAX_TORUS_DIMS))
    s = psim_jerr(j, "expected 1 to %d dimension sizes", MAX_TORUS_DIMS);
  int64_t prod = 1;
  for (int i = 0; s == PSIM_OK && i < n; i++) {
    size_t si = psim_jctx_index(j, (size_t)i);
    s = psim_json_value_int(j, cJSON_GetArrayItem(d, i), 1, h->nodes, &h->dims[i]);
    prod *= s == PSIM_OK ? h->dims[i] : 1;
    psim_jctx_pop(j, si);
  }
  if (s == PSIM_OK && prod != h->nodes)
    s = psim_jerr(j, "the product of the sizes (%lld) must equal nodes (%lld)", (long long)prod,
                  (long long)h->nodes);
  h->ndims = n;
  psim_jctx_pop(j, sv);
  return s;
}

static psim_status read_fabric(psim_jctx *j, const cJSON *o, hier *h) {
  static const char *const keys[] = {
      "kind", "nodes_per_rack", "oversubscription", "latency", "dims", "link_bandwidth", NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  int k = 0;
  PSIM_CHECK(enum_key(j, o, "kind", fabric_names, &k));
  h->fabric = (fabric_kind)k;
  PSIM_CHECK(psim_json_int(j, o, "nodes_per_rack", false, 1, h->nodes, &h->nodes_per_rack));
  PSIM_CHECK(psim_json_number(j, o, "oversubscription", false, 1, 1e6, &h->oversub));
  PSIM_CHECK(psim_json_quantity(j, o, "latency", false, PSIM_UNIT_TIME, &h->fabric_lat));
  if (h->fabric != FABRIC_TORUS) {
    if (cJSON_GetObjectItemCaseSensitive(o, "dims") ||
        cJSON_GetObjectItemCaseSensitive(o, "link_bandwidth"))
      return psim_jerr(j, "'dims' and 'link_bandwidth' apply to kind 'torus' only");
    return PSIM_OK;
  }
  h->torus_bw = h->nic_bw * (double)h->nics;
  if (cJSON_GetObjectItemCaseSensitive(o, "link_bandwidth"))
    PSIM_CHECK(positive(j, o, "link_bandwidth", false, &h->torus_bw));
  return read_dims(j, o, h);
}

static psim_status sub(psim_jctx *j, const cJSON *root, const char *key, hier *h,
                       psim_status (*fn)(psim_jctx *, const cJSON *, hier *)) {
  size_t sv = psim_jctx_key(j, key);
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
  psim_status s = psim_json_expect_object(j, o);
  if (s == PSIM_OK)
    s = fn(j, o, h);
  psim_jctx_pop(j, sv);
  return s;
}

static psim_status read_sizes(psim_jctx *j, const cJSON *root, hier *h) {
  const int64_t max = PSIM_CLUSTER_MAX_DEVICES;
  PSIM_CHECK(psim_json_int(j, root, "nodes", true, 1, max, &h->nodes));
  PSIM_CHECK(psim_json_int(j, root, "devices_per_node", true, 1, max, &h->dpn));
  if (h->nodes * h->dpn > max) {
    return psim_cluster_key_err(j, "nodes",
                                "%lld nodes x %lld devices_per_node = %lld devices is over the "
                                "limit of %lld devices",
                                (long long)h->nodes, (long long)h->dpn,
                                (long long)(h->nodes * h->dpn), (long long)max);
  }
  PSIM_CHECK(psim_json_int(j, root, "nics_per_node", false, 0, 64, &h->nics));
  if (h->nodes > 1 && h->nics == 0) {
    return psim_cluster_key_err(j, "nics_per_node",
                                "%lld nodes need nics_per_node >= 1 to be connected (missing "
                                "or 0)",
                                (long long)h->nodes);
  }
  if (h->nodes * h->nics > max)
    return psim_jerr(j, "nodes x nics_per_node is over the limit of %lld NICs", (long long)max);
  return PSIM_OK;
}

static psim_status read_hier(psim_jctx *j, const cJSON *root, hier *h, psim_cbuild *b) {
  PSIM_CHECK(read_sizes(j, root, h));
  const char *type = NULL;
  PSIM_CHECK(psim_json_string(j, root, "device_type", true, &type));
  size_t sv = psim_jctx_key(j, "device_type");
  psim_status s = psim_cluster_resolve_type(j, b, type, &h->type);
  psim_jctx_pop(j, sv);
  PSIM_CHECK(s);
  if (h->nics > 0 || cJSON_GetObjectItemCaseSensitive(root, "nic_bandwidth"))
    PSIM_CHECK(positive(j, root, "nic_bandwidth", true, &h->nic_bw));
  PSIM_CHECK(psim_json_quantity(j, root, "nic_latency", false, PSIM_UNIT_TIME, &h->nic_lat));
  if (cJSON_GetObjectItemCaseSensitive(root, "pcie_bandwidth"))
    PSIM_CHECK(positive(j, root, "pcie_bandwidth", false, &h->pcie_bw));
  PSIM_CHECK(psim_json_quantity(j, root, "pcie_latency", false, PSIM_UNIT_TIME, &h->pcie_lat));
  if (cJSON_GetObjectItemCaseSensitive(root, "intra_node") || h->dpn > 1)
    PSIM_CHECK(sub(j, root, "intra_node", h, read_intra));
  h->nodes_per_rack = h->nodes;
  if (cJSON_GetObjectItemCaseSensitive(root, "fabric") || h->nodes > 1)
    PSIM_CHECK(sub(j, root, "fabric", h, read_fabric));
  return PSIM_OK;
}

/* ---- building -------------------------------------------------------------- */

/* Writes v in decimal at p (room for it checked by the caller); returns the end. */
static char *put_ll(char *p, long long v) {
  char digits[24];
  int n = 0;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do
    digits[n++] = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0)
    *p++ = '-';
  while (n)
    *p++ = digits[--n];
  return p;
}

/* fmt with each "%lld" replaced by the next of x and y, the one conversion the generated
 * names use: what snprintf wrote, without its format machinery, which was 8.6% of a
 * 131,072-GPU simulation's instructions over its 279,348 names (docs/performance.md,
 * session 18). cap must hold fmt and two 20-digit numbers. */
static void name_ll(char *out, size_t cap, const char *fmt, long long x, long long y) {
  (void)cap;
  assert(strlen(fmt) + 2 * 21 < cap);
  long long args[2] = {x, y};
  int next = 0;
  char *p = out;
  for (const char *f = fmt; *f;) {
    /* the four characters compared in place: strncmp per character was 40% of this */
    if (f[0] == '%' && f[1] == 'l' && f[2] == 'l' && f[3] == 'd' && next < 2) {
      p = put_ll(p, args[next++]);
      f += 4;
    } else {
      *p++ = *f++;
    }
  }
  *p = '\0';
}

static psim_status vertexf(psim_cbuild *b, psim_vertex_kind kind, int32_t *out, const char *fmt,
                           long long x, long long y) {
  char name[96];
  name_ll(name, sizeof name, fmt, x, y);
  return psim_cb_vertex(b, name, kind, out);
}

static psim_status add_devices(psim_cbuild *b, const hier *h) {
  bool cpu = strcmp(b->c->types[h->type].name, "cpu") == 0;
  for (int64_t n = 0; n < h->nodes; n++)
    for (int64_t d = 0; d < h->dpn; d++) {
      char name[96];
      name_ll(name, sizeof name, cpu ? "node%lld.core%lld" : "node%lld.gpu%lld", (long long)n,
              (long long)d);
      int32_t rack = h->fabric == FABRIC_FAT_TREE ? (int32_t)(n / h->nodes_per_rack) : 0;
      PSIM_CHECK(psim_cb_device(b, name, h->type, (int32_t)n, (int32_t)d, rack));
    }
  return PSIM_OK;
}

static int32_t dev(const hier *h, int64_t node, int64_t d) {
  return (int32_t)(node * h->dpn + d);
}

static psim_status star(psim_cbuild *b, const hier *h, int64_t n, const char *what,
                        psim_link_kind kind, int32_t *hub) {
  PSIM_CHECK(vertexf(b, PSIM_VERTEX_SWITCH, hub, what, n, 0));
  for (int64_t d = 0; d < h->dpn; d++)
    PSIM_CHECK(psim_cb_link(b, dev(h, n, d), *hub, kind, h->intra_bw, h->intra_lat, true));
  return PSIM_OK;
}

static psim_status mesh(psim_cbuild *b, const hier *h, int64_t n) {
  for (int64_t x = 0; x < h->dpn; x++)
    for (int64_t y = x + 1; y < h->dpn; y++)
      PSIM_CHECK(psim_cb_link(b, dev(h, n, x), dev(h, n, y), PSIM_LINK_NVLINK, h->intra_bw,
                              h->intra_lat, true));
  return PSIM_OK;
}

static psim_status cube_mesh(psim_cbuild *b, const hier *h, int64_t n) {
  for (size_t i = 0; i < sizeof hcm_wiring / sizeof hcm_wiring[0]; i++) {
    const int *w = hcm_wiring[i];
    PSIM_CHECK(psim_cb_link(b, dev(h, n, w[0]), dev(h, n, w[1]), PSIM_LINK_NVLINK,
                            h->intra_bw * w[2], h->intra_lat, true));
  }
  return PSIM_OK;
}

/* GPUs under PCIe switches (gpus_per_switch each) under one host bridge.
 * *first gets the vertex of the first PCIe switch (the others follow). */
static psim_status pcie_tree(psim_cbuild *b, const hier *h, int64_t n, int32_t *first) {
  int64_t nsw = (h->dpn + h->gpus_per_switch - 1) / h->gpus_per_switch;
  int32_t host, sw;
  PSIM_CHECK(vertexf(b, PSIM_VERTEX_SWITCH, &host, "node%lld.host", n, 0));
  for (int64_t s = 0; s < nsw; s++) {
    PSIM_CHECK(vertexf(b, PSIM_VERTEX_SWITCH, &sw, "node%lld.pcie%lld", n, s));
    *first = s == 0 ? sw : *first;
    PSIM_CHECK(psim_cb_link(b, sw, host, PSIM_LINK_PCIE, h->host_bw, h->intra_lat, true));
  }
  for (int64_t d = 0; d < h->dpn; d++)
    PSIM_CHECK(psim_cb_link(b, dev(h, n, d), *first + (int32_t)(d / h->gpus_per_switch),
                            PSIM_LINK_PCIE, h->intra_bw, h->intra_lat, true));
  return PSIM_OK;
}

/* Builds node n's intra-node fabric; *attach gets the vertex NICs hang from
 * (-1: NICs hang from the devices themselves). */
static psim_status intra(psim_cbuild *b, const hier *h, int64_t n, int32_t *attach) {
  *attach = -1;
  int32_t hub;
  switch (h->intra) {
  case INTRA_NVSWITCH: return star(b, h, n, "node%lld.nvswitch", PSIM_LINK_NVLINK, &hub);
  case INTRA_NVLINK_MESH: return mesh(b, h, n);
  case INTRA_HYBRID_CUBE_MESH: return cube_mesh(b, h, n);
  case INTRA_PCIE_TREE: return pcie_tree(b, h, n, attach);
  case INTRA_SHARED_MEMORY: return star(b, h, n, "node%lld.memory", PSIM_LINK_MEMORY, attach);
  case INTRA_NONE: return PSIM_OK;
  }
  return PSIM_OK;
}

/* The vertex NIC k of node n connects to in the network. */
static int32_t nic_uplink(const hier *h, int32_t fabric0, int64_t n) {
  switch (h->fabric) {
  case FABRIC_FAT_TREE: return fabric0 + (int32_t)(n / h->nodes_per_rack);
  case FABRIC_SINGLE_SWITCH: return fabric0;
  case FABRIC_TORUS: return fabric0 + (int32_t)n;
  }
  return fabric0;
}

static psim_status nics(psim_cbuild *b, const hier *h, int64_t n, int32_t attach, int32_t fab0) {
  int64_t nsw = (h->dpn + h->gpus_per_switch - 1) / h->gpus_per_switch;
  for (int64_t k = 0; k < h->nics; k++) {
    int32_t nic;
    PSIM_CHECK(vertexf(b, PSIM_VERTEX_NIC, &nic, "node%lld.nic%lld", n, k));
    PSIM_CHECK(
        psim_cb_link(b, nic, nic_uplink(h, fab0, n), PSIM_LINK_NIC, h->nic_bw, h->nic_lat, true));
    if (attach >= 0) {
      int32_t at = attach + (h->intra == INTRA_PCIE_TREE ? (int32_t)(k % nsw) : 0);
      PSIM_CHECK(psim_cb_link(b, at, nic, PSIM_LINK_PCIE, h->pcie_bw, h->pcie_lat, true));
      continue;
    }
    for (int64_t d = k; d < h->dpn; d += h->nics) /* GPU d uses NIC d mod K */
      PSIM_CHECK(psim_cb_link(b, dev(h, n, d), nic, PSIM_LINK_PCIE, h->pcie_bw, h->pcie_lat, true));
  }
  return PSIM_OK;
}

static double rack_nodes(const hier *h, int64_t r) {
  int64_t left = h->nodes - r * h->nodes_per_rack;
  return (double)(left < h->nodes_per_rack ? left : h->nodes_per_rack);
}

static psim_status fat_tree(psim_cbuild *b, const hier *h, int32_t *fab0) {
  int64_t racks = (h->nodes + h->nodes_per_rack - 1) / h->nodes_per_rack;
  int32_t v, spine = -1;
  for (int64_t r = 0; r < racks; r++) {
    PSIM_CHECK(vertexf(b, PSIM_VERTEX_SWITCH, &v, "rack%lld.leaf", r, 0));
    *fab0 = r == 0 ? v : *fab0;
  }
  if (racks < 2)
    return PSIM_OK;
  PSIM_CHECK(psim_cb_vertex(b, "spine", PSIM_VERTEX_SWITCH, &spine));
  for (int64_t r = 0; r < racks; r++) {
    /* Uplink = the rack's NIC bandwidth (downlinks) / oversubscription. */
    double up = rack_nodes(h, r) * (double)h->nics * h->nic_bw / h->oversub;
    PSIM_CHECK(
        psim_cb_link(b, *fab0 + (int32_t)r, spine, PSIM_LINK_FABRIC, up, h->fabric_lat, true));
  }
  return PSIM_OK;
}

static psim_status torus(psim_cbuild *b, const hier *h, int32_t *fab0) {
  for (int64_t n = 0; n < h->nodes; n++) {
    int32_t v;
    PSIM_CHECK(vertexf(b, PSIM_VERTEX_SWITCH, &v, "node%lld.router", n, 0));
    *fab0 = n == 0 ? v : *fab0;
  }
  for (int64_t n = 0; n < h->nodes; n++) {
    int64_t stride = 1;
    for (int d = 0; d < h->ndims; d++) {
      int64_t size = h->dims[d], coord = (n / stride) % size;
      int64_t next = n + (((coord + 1) % size) - coord) * stride;
      if (size > 2 || (size == 2 && coord == 0)) /* a 2-ring has one cable */
        PSIM_CHECK(psim_cb_link(b, *fab0 + (int32_t)n, *fab0 + (int32_t)next, PSIM_LINK_FABRIC,
                                h->torus_bw, h->fabric_lat, true));
      stride *= size;
    }
  }
  return PSIM_OK;
}

static psim_status build(psim_cbuild *b, const hier *h) {
  PSIM_CHECK(add_devices(b, h));
  int32_t fab0 = -1;
  if (h->nics > 0) {
    if (h->fabric == FABRIC_FAT_TREE)
      PSIM_CHECK(fat_tree(b, h, &fab0));
    else if (h->fabric == FABRIC_TORUS)
      PSIM_CHECK(torus(b, h, &fab0));
    else
      PSIM_CHECK(psim_cb_vertex(b, "switch", PSIM_VERTEX_SWITCH, &fab0));
  }
  for (int64_t n = 0; n < h->nodes; n++) {
    int32_t attach;
    PSIM_CHECK(intra(b, h, n, &attach));
    PSIM_CHECK(nics(b, h, n, attach, fab0));
  }
  return PSIM_OK;
}

psim_status psim_cluster_load_hier(psim_jctx *j, const cJSON *root, psim_cbuild *b) {
  hier h;
  memset(&h, 0, sizeof h);
  h.intra = INTRA_NONE;
  h.fabric = FABRIC_SINGLE_SWITCH;
  h.oversub = 1;
  h.nic_lat = NIC_LATENCY_S;
  h.pcie_bw = PCIE4_X16_BW;
  h.pcie_lat = PCIE_LATENCY_S;
  h.fabric_lat = FABRIC_LATENCY_S;
  PSIM_CHECK(read_hier(j, root, &h, b));
  h.gpus_per_switch = h.gpus_per_switch > 0 ? h.gpus_per_switch : h.dpn;
  PSIM_CHECK(build(b, &h));
  bool unique = true;
  int32_t x, y;
  PSIM_CHECK(psim_cluster_index_names(b->c, &unique, &x, &y));
  return unique ? PSIM_OK : psim_error(PSIM_EFAILED, "internal: duplicate vertex name");
}
