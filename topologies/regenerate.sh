#!/bin/sh
# Regenerates the preset-made cluster files in this folder with the built
# plansim (the hand-written explicit-ring.json is left alone).
# Usage: topologies/regenerate.sh [PLANSIM]   (default: build/cli/plansim)
# Run it after changing topologies/presets.c. cpu-x4.json records the figures
# of the machine that runs this script (core count, clock, SIMD width).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
plansim=${1:-$here/../build/cli/plansim}
if [ ! -x "$plansim" ]; then
  echo "regenerate.sh: $plansim is not built; run scripts/setup or pass the binary" >&2
  exit 2
fi
gen() { out=$1; shift; "$plansim" cluster "$@" -o "$here/$out"; echo "wrote topologies/$out"; }
gen dgx-a100-x1.json dgx-a100-80g --nodes 1
gen dgx-a100-x2.json dgx-a100-80g --nodes 2
gen dgx-a100-x16.json dgx-a100-80g --nodes 16
gen dgx-a100-x128.json dgx-a100-80g --nodes 128
# 384 nodes = 3072 GPUs: the 1T-parameter run of Korthikanti et al. 2022 (Table 3).
gen dgx-a100-x384.json dgx-a100-80g --nodes 384
gen dgx-a100-40g-x1.json dgx-a100-40g --nodes 1
# Rack-oversubscribed: 4 nodes per leaf switch, uplinks at 1/4 of the rack's NIC bandwidth.
gen dgx-a100-x16-oversub4.json dgx-a100-80g --nodes 16 --nodes-per-rack 4 --oversubscription 4 \
  --name dgx-a100-80g-x16-oversub4
gen dgx-h100-x1.json dgx-h100 --nodes 1
gen dgx-h100-x32.json dgx-h100 --nodes 32
gen dgx-h200-x1.json dgx-h200 --nodes 1
gen dgx1-v100-x8.json dgx1-v100 --nodes 8
# 64 V100 with 25 Gb/s between servers: one 25 Gb/s NIC per node.
gen v100-x8-25g.json dgx1-v100 --nodes 8 --nics-per-node 1 --nic-bandwidth "25 Gb/s" \
  --name dgx1-v100-x8-25g
gen p100-nvlink-x4.json p100-nvlink --nodes 4
gen k80-pcie-x16.json k80-pcie --nodes 16
gen pcie-box.json pcie-box --nodes 1
gen cpu-x4.json cpu --nodes 4
