#!/usr/bin/env bash
# tests/bench/alpa_table.sh - the Alpa-versus-grid table of docs/search.md:
# GPT models of Narayanan et al. 2021, Table 1 (heads, hidden, layers, GPUs,
# global batch; seq 2048, vocab 51200, bf16) on DGX A100 80 GB clusters, each
# planned with `plansim plan --search alpa`, whose summary also simulates the
# best Megatron grid plan and data parallelism.
#
#   tests/bench/alpa_table.sh [OUTDIR] [NAME...]   (default /tmp/alpa-table, every model)
#
# Prints one line per model: alpa and grid iteration times (s), alpa/grid
# throughput, the Alpa search's own time and the whole command's (with the
# grid and data-parallel baselines); leaves models, clusters and plans in OUTDIR.
# Takes 20-40 minutes on a 2-core machine (the 1T grid alone takes minutes).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-/tmp/alpa-table}
shift || true
mkdir -p "$OUT"
P=scripts/plansim
# name heads hidden layers gpus batch
ROWS="1.7b 24 2304 24 32 512
3.6b 32 3072 30 64 512
7.5b 32 4096 36 128 512
18b 48 6144 40 256 1024
39b 64 8192 48 512 1536
76b 80 10240 60 1024 1792
145b 96 12288 80 1536 2304
310b 128 16384 96 1920 2160
530b 128 20480 105 2520 2520
1t 160 25600 128 3072 3072"
want() { [ "$#" -le 1 ] && return 0; local n; for n in "${@:2}"; do [ "$n" = "$1" ] && return 0; done; return 1; }
printf '%-6s %6s %10s %10s %8s %8s %8s  %s\n' model GPUs alpa_s grid_s ratio search_s wall_s plan
while read -r name heads hidden layers gpus batch; do
  want "$name" "$@" || continue
  $P model gpt --layers "$layers" --hidden "$hidden" --heads "$heads" --batch "$batch" \
    -o "$OUT/$name.json" || exit 2
  $P cluster dgx-a100-80g --nodes $((gpus / 8)) -o "$OUT/c$gpus.json" || exit 2
  t0=$(date +%s.%N)
  $P plan "$OUT/$name.json" "$OUT/c$gpus.json" --search alpa -o "$OUT/$name.plan.json" \
    >"$OUT/$name.txt" 2>&1 || { echo "$name: plan failed (see $OUT/$name.txt)"; continue; }
  wall=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')
  alpa=$(sed -n 's/^  plan  *\([0-9.]*\) s per iteration.*/\1/p' "$OUT/$name.txt")
  grid=$(sed -n 's/^  Megatron grid  *\([0-9.]*\) s per iteration.*/\1/p' "$OUT/$name.txt")
  desc=$(sed -n 's/^  best: //p' "$OUT/$name.txt")
  search=$(sed -n 's/.*evaluated in \([0-9.]*\) s.*/\1/p' "$OUT/$name.txt")
  ratio=$(awk -v g="$grid" -v a="$alpa" 'BEGIN { printf "%.4f", g / a }')
  printf '%-6s %6s %10s %10s %8s %8s %8.1f  %s\n' "$name" "$gpus" "$alpa" "$grid" "$ratio" "$search" \
    "$wall" "$desc"
done <<<"$ROWS"
