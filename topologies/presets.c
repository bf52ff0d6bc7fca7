/* presets.c - known machines as hierarchical plansim.cluster/1 files.
 *
 * Bandwidths are per direction. Device figures live in sim/ir/device_types.c
 * (hardware.csv); the GPU presets name the built-in type, so refitted
 * efficiency figures reach every preset file without regenerating it. */
#include "topologies/presets.h"

#include <stdio.h>
#include <string.h>

#include "sim/core/json.h"
#include "sim/ir/cluster.h"

/* PCIe per direction, x16: lanes x GT/s x 128/130 encoding / 8 bits.
 * Gen3 8 GT/s -> 15.75 GB/s; Gen4 16 GT/s -> 31.5 GB/s; Gen5 32 GT/s -> 63 GB/s. */
#define PCIE3_X16 15.75e9
#define PCIE4_X16 31.5e9
#define PCIE5_X16 63e9
/* Gen6 64 GT/s, PAM4 with FLIT mode (PCI-SIG PCIe 6.0): 128 GB/s raw per
 * direction x16, 121 GB/s after FLIT overhead (242 of 256 bytes). */
#define PCIE6_X16 121e9
/* PCIe 3.0 x16 as achieved GPU-to-GPU through a PCIe switch: about 12 GB/s
 * per direction (CUDA sample p2pBandwidthLatencyTest on Gen3 systems reports
 * 10-13 GB/s unidirectional of the 15.75 GB/s line rate). */
#define PCIE3_ACHIEVED 12e9
/* InfiniBand data rates per port and direction: FDR 56 Gb/s, EDR 100 Gb/s,
 * HDR 200 Gb/s, NDR 400 Gb/s (hardware.csv note; IBTA). */
#define IB_FDR  (56e9 / 8)
#define IB_EDR  (100e9 / 8)
#define IB_HDR  (200e9 / 8)
#define IB_NDR  (400e9 / 8)
#define IB_XDR  (800e9 / 8)
#define ETH_25G (25e9 / 8)

typedef struct preset {
  const char *name, *type, *description;
  int32_t dpn;
  const char *intra;
  double intra_bw;         /* per direction: per GPU port (nvswitch), per link otherwise */
  int32_t gpus_per_switch; /* pcie_tree */
  int32_t nics;
  double nic_bw, nic_lat, pcie_bw;
  int32_t rack; /* nodes per leaf switch */
} preset;

/* Sources:
 * DGX A100: NVIDIA DGX A100 System Architecture white paper (WP-10083-001):
 *   8 A100 on 6 NVSwitches, 12 NVLink3 links per GPU = 600 GB/s both
 *   directions (hardware.csv) = 300 GB/s per direction; 8 single-port
 *   ConnectX-6 HDR 200 Gb/s compute NICs, one per GPU, PCIe Gen4.
 *   Rack size: the DGX SuperPOD scalable unit of 20 DGX A100 (DGX SuperPOD
 *   reference architecture).
 * DGX H100/H200: DGX H100 data sheet / DGX SuperPOD H100 reference
 *   architecture: 4 NVSwitches, 18 NVLink4 links = 900 GB/s both directions
 *   = 450 GB/s per direction; 8 ConnectX-7 NDR 400 Gb/s, PCIe Gen5; scalable
 *   unit of 32 nodes.
 * DGX-1 V100: DGX-1 System Architecture white paper (WP-08437-002): hybrid
 *   cube mesh of NVLink2 links, 25 GB/s per link per direction (hardware.csv:
 *   300 GB/s both directions over 6 links); 4 EDR 100 Gb/s InfiniBand, PCIe Gen3.
 * P100 NVLink: FlexFlow (Jia et al., SysML'19, section 8) P100 cluster: 4
 *   P100 per node joined by NVLink, 100 Gb/s EDR InfiniBand between nodes;
 *   NVLink1 20 GB/s per link per direction (hardware.csv: 160 GB/s both
 *   directions over 4 links).
 * K80 PCIe: FlexFlow's K80 cluster: 4 K80 GPUs per node on PCIe switches,
 *   56 Gb/s InfiniBand; each K80 board carries a PCIe switch joining its two
 *   GK210 GPUs (Tesla K80 board spec), so two devices per PCIe switch.
 * PCIe box: 8 V100 (built-in v100 figures; a V100 PCIe card peaks at 112
 *   TFLOP/s fp16, 10% under SXM2) under two PCIe 3.0 switches of 4 GPUs,
 *   12 GB/s achieved per direction, one EDR NIC.
 * DGX B200: DGX B200 data sheet and user guide: 8 B200 on 2 fifth-generation
 *   NVSwitch chips, NVLink 5 at 1.8 TB/s per GPU both directions = 900 GB/s
 *   per direction (14.4 TB/s per system); 8 single-port ConnectX-7 at 400
 *   Gb/s for the compute fabric, PCIe Gen5 host; DGX SuperPOD B200 reference
 *   architecture: scalable unit of 32 DGX B200, rail-optimised non-blocking
 *   fat tree.
 * GB200 NVL72: GB200 NVL72 data sheet: 72 Blackwell GPUs (18 compute trays
 *   of 2 GB200 superchips = 4 GPUs each, 36 Grace CPUs) in one NVLink domain
 *   through 9 NVLink switch trays, 130 TB/s = 1.8 TB/s per GPU both
 *   directions; one ConnectX-7 400 Gb/s per GPU for the compute fabric (DGX
 *   GB200 user guide: 4 per compute tray), PCIe Gen5. A preset "node" is one
 *   NVLink domain (a rack). The cluster format allows at most 64 NICs per
 *   node, so the rack's 72 x 400 Gb/s are written as 36 x 800 Gb/s, GPUs d
 *   and d + 36 sharing one: the same aggregate, and the same 400 Gb/s per GPU
 *   when all of them send (collectives). DGX SuperPOD GB200: scalable unit of
 *   8 racks (576 GPUs).
 * GB300 NVL72: GB300 NVL72 data sheet: the same rack of 72 Blackwell Ultra
 *   GPUs, NVLink 130 TB/s; one ConnectX-8 SuperNIC of 800 Gb/s per GPU
 *   (written as 36 x 1.6 Tb/s as above), whose host interface is PCIe Gen6
 *   x16 (ConnectX-8 SuperNIC data sheet); scalable unit of 8 racks.
 * DGX B300: DGX B300 data sheet: 8 Blackwell Ultra GPUs on NVLink 5
 *   switches, 1.8 TB/s per GPU both directions (14.4 TB/s per system); 8
 *   single-port ConnectX-8 SuperNICs at 800 Gb/s for the compute fabric (HGX
 *   B300 data sheet: networking 1.6 TB/s both directions = 8 x 800 Gb/s),
 *   whose host interface is PCIe Gen6 x16 (ConnectX-8 SuperNIC data sheet);
 *   scalable unit of 32 nodes as for DGX B200 (assumed: the DGX SuperPOD
 *   B300 reference architecture was not read).
 * CPU: this machine's cores (sim/ir/device_types.c), one shared memory bus per
 *   node, 25 Gb/s Ethernet; 10 us per Ethernet hop (typical kernel TCP
 *   latency on 25 GbE; estimate). */
static const preset presets[] = {
    {"dgx-a100-80g", "a100-80g", "NVIDIA DGX A100 80GB: 8 A100 on NVSwitch, 8x HDR 200 Gb/s", 8,
     "nvswitch", 300e9, 0, 8, IB_HDR, 1e-6, PCIE4_X16, 20},
    {"dgx-a100-40g", "a100-40g", "NVIDIA DGX A100 40GB: 8 A100 on NVSwitch, 8x HDR 200 Gb/s", 8,
     "nvswitch", 300e9, 0, 8, IB_HDR, 1e-6, PCIE4_X16, 20},
    {"dgx-h100", "h100", "NVIDIA DGX H100: 8 H100 on NVSwitch, 8x NDR 400 Gb/s", 8, "nvswitch",
     450e9, 0, 8, IB_NDR, 1e-6, PCIE5_X16, 32},
    {"dgx-h200", "h200", "NVIDIA DGX H200: 8 H200 on NVSwitch, 8x NDR 400 Gb/s", 8, "nvswitch",
     450e9, 0, 8, IB_NDR, 1e-6, PCIE5_X16, 32},
    {"dgx-b200", "b200", "NVIDIA DGX B200: 8 B200 on NVSwitch (NVLink 5), 8x NDR 400 Gb/s", 8,
     "nvswitch", 900e9, 0, 8, IB_NDR, 1e-6, PCIE5_X16, 32},
    {"gb200-nvl72", "gb200",
     "NVIDIA GB200 NVL72: 72 B200 GPUs (18 trays of 4) in one NVLink 5 domain, 400 Gb/s per GPU",
     72, "nvswitch", 900e9, 0, 36, IB_XDR, 1e-6, PCIE5_X16, 8},
    {"gb300-nvl72", "gb300",
     "NVIDIA GB300 NVL72: 72 Blackwell Ultra GPUs (18 trays of 4) in one NVLink 5 domain, 800 "
     "Gb/s per GPU",
     72, "nvswitch", 900e9, 0, 36, 2 * IB_XDR, 1e-6, PCIE6_X16, 8},
    {"dgx-b300", "b300", "NVIDIA DGX B300: 8 B300 on NVSwitch (NVLink 5), 8x ConnectX-8 800 Gb/s",
     8, "nvswitch", 900e9, 0, 8, IB_XDR, 1e-6, PCIE6_X16, 32},
    {"dgx1-v100", "v100", "NVIDIA DGX-1 V100: 8 V100 in a hybrid cube mesh, 4x EDR 100 Gb/s", 8,
     "hybrid_cube_mesh", 25e9, 0, 4, IB_EDR, 1e-6, PCIE3_X16, 16},
    {"p100-nvlink", "p100", "4 P100 per node on all-to-all NVLink, 1x EDR 100 Gb/s", 4,
     "nvlink_mesh", 20e9, 0, 1, IB_EDR, 1e-6, PCIE3_X16, 16},
    {"k80-pcie", "k80", "4 K80 GPUs per node on PCIe switches, 1x FDR 56 Gb/s", 4, "pcie_tree",
     PCIE3_ACHIEVED, 2, 1, IB_FDR, 1e-6, PCIE3_X16, 16},
    {"pcie-box", "v100", "8 V100 behind two PCIe 3.0 switches, 1x EDR 100 Gb/s", 8, "pcie_tree",
     PCIE3_ACHIEVED, 4, 1, IB_EDR, 1e-6, PCIE3_X16, 16},
    {"cpu", "cpu", "nodes of this machine's CPU cores on a shared memory bus, 25 Gb/s Ethernet", 0,
     "shared_memory", 0, 0, 1, ETH_25G, 10e-6, PCIE3_X16, 16},
    {NULL, NULL, NULL, 0, NULL, 0, 0, 0, 0, 0, 0, 0}};

static const char *const names[] = {
    "dgx-a100-80g", "dgx-a100-40g", "dgx-h100", "dgx-h200",  "dgx-b200",
    "gb200-nvl72",  "gb300-nvl72",  "dgx-b300", "dgx1-v100", "p100-nvlink",
    "k80-pcie",     "pcie-box",     "cpu",      NULL};

const char *const *psim_preset_names(void) {
  return names;
}

static const preset *find(const char *name) {
  for (const preset *p = presets; p->name; p++)
    if (name && strcmp(p->name, name) == 0)
      return p;
  return NULL;
}

const char *psim_preset_description(const char *name) {
  const preset *p = find(name);
  return p ? p->description : NULL;
}

void psim_preset_opts_init(psim_preset_opts *o) {
  memset(o, 0, sizeof *o);
  o->nodes = 1;
  o->oversubscription = 1;
}

/* ---- writing ---------------------------------------------------------------- */

/* "300 GB/s", "200 Gb/s" (bits when bits is set), "0.5 us". */
static psim_status add_qty(cJSON *o, const char *key, double v, const char *unit, double scale) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.6g %s", v / scale, unit);
  return psim_json_add_string(o, key, buf);
}

static psim_status add_cpu_type(cJSON *root) {
  cJSON *types, *t;
  psim_device_type cpu;
  PSIM_CHECK(psim_json_add_object(root, "device_types", &types));
  PSIM_CHECK(psim_json_add_object(types, "cpu", &t));
  PSIM_CHECK(psim_device_type_builtin("cpu", &cpu));
  psim_status s = psim_json_add_string(t, "description",
                                       "one core of the machine that wrote "
                                       "this file (sim/ir/device_types.c)");
  if (s == PSIM_OK)
    s = psim_device_type_to_json(&cpu, t);
  psim_device_type_destroy(&cpu);
  return s;
}

static psim_status add_intra(cJSON *root, const preset *p, double intra_bw) {
  cJSON *in;
  PSIM_CHECK(psim_json_add_object(root, "intra_node", &in));
  PSIM_CHECK(psim_json_add_string(in, "kind", p->intra));
  PSIM_CHECK(add_qty(in, "bandwidth", intra_bw, "GB/s", 1e9));
  if (p->gpus_per_switch > 0)
    PSIM_CHECK(psim_json_add_number(in, "gpus_per_switch", p->gpus_per_switch));
  return PSIM_OK;
}

static psim_status add_fabric(cJSON *root, const psim_preset_opts *o, int32_t rack) {
  cJSON *f;
  PSIM_CHECK(psim_json_add_object(root, "fabric", &f));
  PSIM_CHECK(psim_json_add_string(f, "kind", "fat_tree"));
  PSIM_CHECK(psim_json_add_number(f, "nodes_per_rack", rack));
  PSIM_CHECK(psim_json_add_number(f, "oversubscription", o->oversubscription));
  return add_qty(f, "latency", 0.13e-6, "us", 1e-6); /* HDR switch hop, sim/ir/cluster_hier.c */
}

static psim_status check_opts(const psim_preset_opts *o, const preset *p) {
  if (!p) {
    char list[256] = "";
    for (const char *const *n = names; *n; n++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "", *n);
    return psim_error(PSIM_EINPUT, "unknown preset '%.80s'; expected one of: %s",
                      o->preset ? o->preset : "", list);
  }
  if (o->nodes < 1 || o->nodes > PSIM_CLUSTER_MAX_DEVICES)
    return psim_error(PSIM_EINPUT, "--nodes must be in [1, %d]", PSIM_CLUSTER_MAX_DEVICES);
  if (o->nics_per_node < 0 || o->nics_per_node > 64)
    return psim_error(PSIM_EINPUT, "--nics-per-node must be in [1, 64]");
  if (o->nodes_per_rack < 0 || o->nodes_per_rack > o->nodes)
    return psim_error(PSIM_EINPUT, "--nodes-per-rack must be in [1, nodes = %d]", (int)o->nodes);
  if (!(o->oversubscription >= 1) || o->oversubscription > 1e6)
    return psim_error(PSIM_EINPUT, "--oversubscription must be >= 1 (1 = non-blocking)");
  if (o->nic_bw < 0)
    return psim_error(PSIM_EINPUT, "--nic-bandwidth must be greater than zero");
  return PSIM_OK;
}

/* Measured all-reduce bus bandwidth on one DGX A100 node, GB/s, for groups of
 * 2..8 GPUs at 1, 2, 4, ... 1024 MiB: nccl-tests all_reduce_perf (fp32), the
 * mean of the out-of-place and in-place columns of vTrain's public
 * measurements (../shared/calibration/vtrain/allreduce_a100_{2..8}gpu.lut,
 * Bang et al., MICRO'24, MIT licence). All-gather and reduce-scatter take the
 * same bus bandwidth: NCCL runs all three as rings over the same NVLink
 * channels, and nccl-tests reports their busbw alike (collectives.md). */
static const double a100_allreduce_busbw_gbs[7][11] = {
    {23.48, 40.13, 69.08, 96.28, 128.41, 146.2, 165.95, 175.53, 184.48, 189.31, 197.08},
    {21.95, 39.55, 71.04, 108.56, 146.14, 168.7, 179.09, 192.63, 200.38, 206.5, 211.81},
    {30.21, 56.33, 82.19, 109.27, 140.84, 177.89, 185.66, 201.4, 208.81, 216.46, 221.62},
    {26.87, 54.06, 86.12, 110.03, 135.91, 166.45, 189.28, 201.62, 210.89, 218.35, 224.57},
    {23.83, 47.08, 85.97, 111.73, 139.09, 184.24, 198.66, 199.58, 211.4, 222.56, 226.95},
    {23.09, 45.86, 85.88, 108.89, 126.28, 172.61, 192.15, 200.72, 210.09, 223.94, 226.78},
    {19.84, 39.41, 77.34, 111.19, 126.7, 164.53, 202.56, 201.78, 217.47, 224.25, 229.3}};

static psim_status add_table(cJSON *list, const char *op, int32_t n, double scale) {
  cJSON *t = cJSON_CreateObject(), *pts = NULL;
  if (!t || !cJSON_AddItemToArray(list, t)) {
    cJSON_Delete(t);
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  }
  PSIM_CHECK(psim_json_add_string(t, "op", op));
  PSIM_CHECK(psim_json_add_number(t, "group_size", n));
  PSIM_CHECK(psim_json_add_string(t, "scope", "intra_node"));
  PSIM_CHECK(psim_json_add_array(t, "points", &pts));
  for (int k = 0; k < 11; k++) {
    double pt[2] = {(double)(1048576L << k), a100_allreduce_busbw_gbs[n - 2][k] * scale * 1e9};
    cJSON *a = cJSON_CreateDoubleArray(pt, 2);
    if (!a || !cJSON_AddItemToArray(pts, a)) {
      cJSON_Delete(a);
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
    }
  }
  return PSIM_OK;
}

/* H100 SXM, 8 GPUs on NVSwitch: about 370 GB/s ring bus bandwidth for large
 * messages against 450 GB/s line rate (../shared/calibration/collectives.md).
 * No per-size H100 curve is published there: the A100 curves' shape is kept and
 * scaled so that the 8-GPU plateau (1 GiB: 229.3 GB/s) becomes 370 GB/s. */
static const double h100_over_a100_busbw = 370.0 / 229.3;

static psim_status add_nvswitch_collectives(cJSON *root, double scale) {
  static const char *const ops[] = {"all_reduce", "all_gather", "reduce_scatter"};
  cJSON *list;
  PSIM_CHECK(psim_json_add_array(root, "collectives", &list));
  for (int i = 0; i < 3; i++)
    for (int32_t n = 2; n <= 8; n++)
      PSIM_CHECK(add_table(list, ops[i], n, scale));
  return PSIM_OK;
}

static psim_status build(cJSON *root, const psim_preset_opts *o, const preset *p) {
  char name[128];
  snprintf(name, sizeof name, "%s-x%d", p->name, (int)o->nodes);
  PSIM_CHECK(psim_json_add_string(root, "format", "plansim.cluster/1"));
  PSIM_CHECK(psim_json_add_string(root, "name", o->name ? o->name : name));
  PSIM_CHECK(psim_json_add_string(root, "description", p->description));
  psim_cpu_info ci;
  psim_cpu_info_detect(&ci);
  bool cpu = strcmp(p->type, "cpu") == 0;
  if (cpu)
    PSIM_CHECK(add_cpu_type(root));
  PSIM_CHECK(psim_json_add_number(root, "nodes", o->nodes));
  PSIM_CHECK(psim_json_add_number(root, "devices_per_node", cpu ? ci.cores : p->dpn));
  PSIM_CHECK(psim_json_add_string(root, "device_type", p->type));
  /* CPU cores share the node's memory bus: each core's link gets its share. */
  PSIM_CHECK(add_intra(root, p, cpu ? ci.node_mem_bw / ci.cores : p->intra_bw));
  PSIM_CHECK(
      psim_json_add_number(root, "nics_per_node", o->nics_per_node ? o->nics_per_node : p->nics));
  PSIM_CHECK(
      add_qty(root, "nic_bandwidth", o->nic_bw > 0 ? o->nic_bw : p->nic_bw, "Gb/s", 1e9 / 8));
  PSIM_CHECK(add_qty(root, "nic_latency", p->nic_lat, "us", 1e-6));
  PSIM_CHECK(add_qty(root, "pcie_bandwidth", p->pcie_bw, "GB/s", 1e9));
  int32_t rack = o->nodes_per_rack ? o->nodes_per_rack : p->rack;
  PSIM_CHECK(add_fabric(root, o, rack < o->nodes ? rack : o->nodes));
  if (strncmp(p->type, "a100", 4) == 0)
    PSIM_CHECK(add_nvswitch_collectives(root, 1.0));
  if (strcmp(p->type, "h100") == 0)
    PSIM_CHECK(add_nvswitch_collectives(root, h100_over_a100_busbw));
  return PSIM_OK;
}

psim_status psim_preset_cluster(const psim_preset_opts *o, cJSON **out) {
  const preset *p = find(o->preset);
  PSIM_CHECK(check_opts(o, p));
  psim_json_init_hooks();
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  psim_status s = build(root, o, p);
  if (s != PSIM_OK) {
    cJSON_Delete(root);
    return s;
  }
  *out = root;
  return PSIM_OK;
}
