#!/usr/bin/env bash
# fold_refine.sh - folding folds less instead of declining (issue 19 item 1, sim/builder/
# fold_links.c): when a data-parallel ring's inter-node hops hold the NIC links that some
# columns' pipeline sends use, those columns are split from their classes and the build is
# folded again, instead of being redone with every device. The answer must stay the unfolded
# one to the last bit (all but the "sim" object), folded or not.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

S="$TEST_TMP/s.json"
# tp pp dp zero must_fold: 128 A100s in 16 DGX nodes, GPT-1.3B; a stage spans 2-4 nodes, so
# the data-parallel rings cross nodes through some columns' NICs
for c in "1 4 32 1 1" "1 4 32 3 1" "8 2 8 1 1" "4 4 8 1 0" "4 4 8 3 0" "2 2 32 1 0"; do
  read -r tp pp dp zero must <<<"$c"
  printf '{"format": "plansim.strategy/1", "template": "megatron", "tp": %s, "pp": %s, "dp": %s, "micro_batch": 1, "recompute": "full", "zero": %s}\n' \
    "$tp" "$pp" "$dp" "$zero" >"$S"
  run simulate models/gpt-1.3b.json topologies/dgx-a100-x16.json "$S" --json
  folded=$(cp "$OUT" "$TEST_TMP/f.json"; jq -c '[.sim.folded, .sim.simulated_devices]' "$OUT")
  run simulate models/gpt-1.3b.json topologies/dgx-a100-x16.json "$S" --json --no-fold
  cp "$OUT" "$TEST_TMP/u.json"
  name="tp $tp pp $pp dp $dp zero $zero: folded $folded"
  if [ "$(jq -cS 'del(.sim)' "$TEST_TMP/f.json")" != "$(jq -cS 'del(.sim)' "$TEST_TMP/u.json")" ]; then
    not_ok "$name equals --no-fold" "$(diff <(jq -S 'del(.sim)' "$TEST_TMP/f.json") \
      <(jq -S 'del(.sim)' "$TEST_TMP/u.json") | head -20)"
  elif [ "$must" = 1 ] && ! jq -e '.sim.folded and .sim.simulated_devices < 128' \
    "$TEST_TMP/f.json" >/dev/null; then
    not_ok "$name: folds (fewer than 128 devices simulated)"
  else
    ok "$name equals --no-fold"
  fi
done
finish
