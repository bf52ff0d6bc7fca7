#!/usr/bin/env bash
# tests/bench/published_table.sh - the "published" columns of docs/search.md's
# Alpa table: each GPT of Narayanan et al. 2021, Table 1, simulated with that
# paper's tp x pp (dp = GPUs / (tp pp), micro-batch 1, 1F1B) twice: with full
# recomputation (what the paper ran) and with selective recomputation +
# sequence parallelism (Korthikanti et al. 2022).
#
#   tests/bench/published_table.sh [OUTDIR]   (default /tmp/alpa-table; the models and
#                                              clusters alpa_table.sh wrote there are reused)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-/tmp/alpa-table}
mkdir -p "$OUT"
P=scripts/plansim
# name heads hidden layers gpus batch tp pp
ROWS="1.7b 24 2304 24 32 512 1 1
3.6b 32 3072 30 64 512 2 1
7.5b 32 4096 36 128 512 4 1
18b 48 6144 40 256 1024 8 1
39b 64 8192 48 512 1536 8 2
76b 80 10240 60 1024 1792 8 4
145b 96 12288 80 1536 2304 8 8
310b 128 16384 96 1920 2160 8 16
530b 128 20480 105 2520 2520 8 35
1t 160 25600 128 3072 3072 8 64"
time_of() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[\"iteration_time_s\"], 3))" "$1"; }
printf '%-6s %6s %4s %4s %12s %12s\n' model GPUs tp pp full_s sel+sp_s
while read -r name heads hidden layers gpus batch tp pp; do
  [ -f "$OUT/$name.json" ] || $P model gpt --layers "$layers" --hidden "$hidden" \
    --heads "$heads" --batch "$batch" -o "$OUT/$name.json" || exit 2
  [ -f "$OUT/c$gpus.json" ] || $P cluster dgx-a100-80g --nodes $((gpus / 8)) \
    -o "$OUT/c$gpus.json" || exit 2
  dp=$((gpus / tp / pp))
  res=()
  for mode in full selective; do
    sp=false
    [ "$mode" = selective ] && [ "$tp" -gt 1 ] && sp=true
    cat >"$OUT/$name.pub-$mode.json" <<JSON
{"format": "plansim.strategy/1", "template": "megatron", "tp": $tp, "pp": $pp, "dp": $dp,
 "micro_batch": 1, "schedule": "1f1b", "recompute": "$mode", "sequence_parallel": $sp}
JSON
    $P simulate "$OUT/$name.json" "$OUT/c$gpus.json" "$OUT/$name.pub-$mode.json" --json \
      >"$OUT/$name.pub-$mode.out" 2>&1 || { res+=(failed); continue; }
    res+=("$(time_of "$OUT/$name.pub-$mode.out")")
  done
  printf '%-6s %6s %4s %4s %12s %12s\n' "$name" "$gpus" "$tp" "$pp" "${res[0]}" "${res[1]}"
done <<<"$ROWS"
