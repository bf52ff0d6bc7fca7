/* cmd_cluster.c - plansim cluster PRESET [options] [-o FILE]: writes a
 * cluster file from a preset (topologies/presets.c). The generated file is
 * loaded back through the cluster loader before it is written, so a preset
 * never emits a file that `plansim check` would refuse. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sim/core/json.h"
#include "sim/ir/cluster.h"
#include "topologies/presets.h"

const char psim_cmd_cluster_help[] =
    "Writes a plansim.cluster/1 file (hierarchical form) for a known machine. PRESET is\n"
    "one of: dgx-a100-80g, dgx-a100-40g, dgx-h100, dgx-h200, dgx-b200, dgx-b300 (8 GPUs on\n"
    "NVSwitch, one InfiniBand NIC per GPU), gb200-nvl72, gb300-nvl72 (one 72-GPU NVLink domain "
    "per\n"
    "node), dgx1-v100 (hybrid cube mesh, 4 EDR NICs), p100-nvlink (4\n"
    "P100 on NVLink, 1 EDR NIC), k80-pcie, pcie-box (GPUs behind PCIe switches), cpu\n"
    "(this machine's cores). Nodes are joined by a non-blocking fat tree unless\n"
    "--oversubscription says otherwise. docs/cluster.md gives every figure and its source.\n"
    "\n"
    "Options:\n"
    "  --nodes N              servers (default 1)\n"
    "  --nics-per-node K      NICs per server (GPU i uses NIC i mod K)\n"
    "  --nic-bandwidth BW     per NIC and direction, e.g. \"25 Gb/s\" or 3.125e9\n"
    "  --nodes-per-rack R     servers under one leaf switch\n"
    "  --oversubscription X   leaf uplink = rack NIC bandwidth / X (default 1)\n"
    "  --name NAME            cluster name (default PRESET-xN)\n"
    "  --list                 list the presets\n"
    "  -o FILE                write to FILE (atomically) instead of standard output\n"
    "\n"
    "Example:\n"
    "  plansim cluster dgx-a100-80g --nodes 16 -o dgx-a100-x16.json\n";

static psim_status int_arg(const char *flag, const char *v, long min, long max, int32_t *out) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < min || x > max)
    return psim_cli_usage("cluster", "%s expects an integer in [%ld, %ld], found '%.40s'", flag,
                          min, max, v);
  *out = (int32_t)x;
  return PSIM_OK;
}

/* A quantity in [min, max] (min > 0 here: an explicit 0 would read as "the
 * preset's figure" in psim_preset_opts). */
static psim_status num_arg(const char *flag, const char *v, psim_unit_kind kind, double min,
                           double max, const char *range, double *out) {
  if (psim_units_parse(v, kind, out) != PSIM_OK) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s", psim_error_message());
    return psim_cli_usage("cluster", "%s: %s", flag, msg);
  }
  if (!(*out >= min && *out <= max))
    return psim_cli_usage("cluster", "%s '%.40s' is out of range; expected %s", flag, v, range);
  return PSIM_OK;
}

static psim_status list_presets(void) {
  for (const char *const *n = psim_preset_names(); *n; n++)
    printf("%-14s %s\n", *n, psim_preset_description(*n));
  return PSIM_OK;
}

/* Applies one "--flag value" option. */
static psim_status option(const char *flag, const char *v, psim_preset_opts *o, const char **out) {
  if (strcmp(flag, "--nodes") == 0)
    return int_arg(flag, v, 1, PSIM_CLUSTER_MAX_DEVICES, &o->nodes);
  if (strcmp(flag, "--nics-per-node") == 0)
    return int_arg(flag, v, 1, 64, &o->nics_per_node);
  if (strcmp(flag, "--nodes-per-rack") == 0)
    return int_arg(flag, v, 1, PSIM_CLUSTER_MAX_DEVICES, &o->nodes_per_rack);
  if (strcmp(flag, "--oversubscription") == 0) /* 1 = non-blocking; presets.c allows 1e6 */
    return num_arg(flag, v, PSIM_UNIT_NONE, 1, 1e6, "1 (non-blocking) to 1e6",
                   &o->oversubscription);
  if (strcmp(flag, "--nic-bandwidth") == 0) /* 1 byte/s up to psim_units_check's bound */
    return num_arg(flag, v, PSIM_UNIT_BANDWIDTH, 1, 1e18,
                   "a bandwidth above 0 (\"25 Gb/s\", 3.125e9) and at most 1e18 bytes/s",
                   &o->nic_bw);
  if (strcmp(flag, "--name") == 0) {
    o->name = v;
    return PSIM_OK;
  }
  if (strcmp(flag, "-o") == 0) {
    *out = v;
    return PSIM_OK;
  }
  return psim_cli_usage("cluster", "unknown option '%.40s'", flag);
}

static const char *const value_options[] = {"--nodes",
                                            "--nics-per-node",
                                            "--nodes-per-rack",
                                            "--oversubscription",
                                            "--nic-bandwidth",
                                            "--name",
                                            "-o",
                                            NULL};

static bool takes_value(const char *a) {
  for (const char *const *v = value_options; *v; v++)
    if (strcmp(*v, a) == 0)
      return true;
  return false;
}

static psim_status parse(int argc, char **argv, psim_preset_opts *o, const char **out, bool *list) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--list") == 0) {
      *list = true;
    } else if (takes_value(a)) {
      PSIM_CHECK(psim_cli_need_value("cluster", argc, argv, i));
      PSIM_CHECK(option(a, argv[++i], o, out));
    } else if (a[0] == '-' && a[1]) {
      return psim_cli_usage("cluster", "unknown option '%.40s'", a);
    } else if (!o->preset) {
      o->preset = a;
    } else {
      return psim_cli_usage("cluster", "unexpected argument '%.40s'", a);
    }
  }
  if (!o->preset && !*list)
    return psim_cli_usage("cluster", "missing PRESET");
  return PSIM_OK;
}

/* --list prints the presets and nothing else: say so when other arguments
 * were given (they are checked, then have no effect). */
static void note_list(int argc) {
  if (argc > 2)
    fprintf(stderr, "plansim cluster: note: --list only lists the presets; the other arguments "
                    "(PRESET, -o, options) have no effect\n");
}

psim_status psim_cmd_cluster(int argc, char **argv) {
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  const char *out = "-";
  bool list = false;
  PSIM_CHECK(parse(argc, argv, &o, &out, &list));
  if (list) {
    note_list(argc);
    return list_presets();
  }
  PSIM_CHECK(psim_file_check_output("-o", out));
  cJSON *root = NULL;
  PSIM_CHECK(psim_preset_cluster(&o, &root));
  psim_cluster c;
  psim_cluster_init(&c);
  psim_status s = psim_cluster_from_json(o.preset, root, &c);
  psim_cluster_destroy(&c);
  if (s == PSIM_OK)
    s = psim_json_write_file(out, root);
  cJSON_Delete(root);
  return s;
}
