#!/usr/bin/env bash
# fold_moe.sh - folding whole exchange blocks (sim/builder/fold_blocks.c; docs/simulator.md,
# "Folding symmetric devices"): a mixture-of-experts model split over its experts exchanges
# tokens inside each stage (all-to-all), which used to decline folding (every device
# simulated). Folded by blocks of positions (one expert-data-parallel rank's etp x ep x tp
# devices), every figure must stay the unfolded one to the last bit (all but the "sim"
# object), under skewed (the default maxvio:0.72, zipf:1) and uniform routing; the cases marked
# must_fold simulate fewer devices than the cluster has (before fold_blocks.c every one of
# them simulated all 32).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

M="$TEST_TMP/moe.json" C="$TEST_TMP/h100x32.json" S="$TEST_TMP/s.json"
run model qwen3-moe --layers 4 --hidden 512 --heads 8 --kv-heads 4 --seq 1024 --vocab 4096 \
  --batch 64 --experts 16 --top-k 2 --moe-ffn 256 -o "$M"
run cluster dgx-h100 --nodes 4
cp "$OUT" "$C"
# tp pp dp ep etp micro-batch recompute zero must_fold: 32 H100s in 4 DGX nodes
for c in "1 2 16 8 1 1 full 1 1" "1 1 32 8 1 1 full 1 1" "2 1 16 8 1 1 full 1 1" \
  "1 2 16 4 1 1 full 1 1" "2 2 8 4 2 1 full 1 1" "4 2 4 4 1 1 full 1 1" "2 4 4 2 1 1 full 1 1" \
  "2 2 8 4 1 2 selective 0 1" "1 2 16 8 1 2 none 3 1" "4 2 4 4 4 1 full 1 0" \
  "2 2 8 16 1 1 full 1 0"; do
  read -r tp pp dp ep etp mb rc zero must <<<"$c"
  sp=false
  [ "$tp" -gt 1 ] && sp=true
  printf '{"format": "plansim.strategy/1", "template": "megatron", "tp": %s, "pp": %s, "dp": %s, "ep": %s, "etp": %s, "micro_batch": %s, "recompute": "%s", "sequence_parallel": %s, "zero": %s}\n' \
    "$tp" "$pp" "$dp" "$ep" "$etp" "$mb" "$rc" "$sp" "$zero" >"$S"
  for routing in default uniform zipf:1; do
    r=()
    [ "$routing" != default ] && r=(--routing "$routing")
    run simulate "$M" "$C" "$S" --json "${r[@]}"
    cp "$OUT" "$TEST_TMP/f.json"
    folded=$(jq -c '[.sim.folded, .sim.simulated_devices]' "$TEST_TMP/f.json")
    run simulate "$M" "$C" "$S" --json --no-fold "${r[@]}"
    cp "$OUT" "$TEST_TMP/u.json"
    name="tp $tp pp $pp dp $dp ep $ep etp $etp mb $mb $rc zero $zero, $routing routing: folded $folded"
    if [ "$(jq -cS 'del(.sim)' "$TEST_TMP/f.json")" != "$(jq -cS 'del(.sim)' "$TEST_TMP/u.json")" ]; then
      not_ok "$name equals --no-fold" "$(diff <(jq -S 'del(.sim)' "$TEST_TMP/f.json") \
        <(jq -S 'del(.sim)' "$TEST_TMP/u.json") | head -20)"
    elif [ "$must" = 1 ] && ! jq -e '.sim.folded and .sim.simulated_devices < 32' \
      "$TEST_TMP/f.json" >/dev/null; then
      not_ok "$name: folds (fewer than 32 devices simulated)"
    else
      ok "$name equals --no-fold"
    fi
  done
done
finish
