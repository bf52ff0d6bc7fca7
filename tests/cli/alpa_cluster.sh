#!/usr/bin/env bash
# alpa_cluster.sh - issue 23: a graph without layer indices (a chain of 8 large matmuls, no
# "layer" keys) on two DGX A100 nodes joined by 1 Gb/s NICs. `plan --search alpa` clusters
# its ops into layers (Alpa, OSDI'22 section 5.2) and pipelines them; the plan file keeps
# the clusters as pipeline.layer_starts, passes `check`, and `simulate` of the plan gives
# the plan's own prediction.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

M="$TEST_TMP/chain.json"
C="$TEST_TMP/pair.json"
P="$TEST_TMP/plan.json"
jq -n '{format: "plansim.model/1", name: "chain",
  dims: {batch: {size: 64, role: "batch"}, hidden: {size: 8192, role: "hidden"},
         ffn: {size: 8192, role: "ffn"}},
  inputs: {x0: {dims: ["batch", "hidden"]}},
  weights: ([range(8)] | map({key: "w\(.)", value: {dims: ["hidden", "ffn"]}}) | from_entries),
  tensors: ([range(8)] | map({key: "z\(.)", value: {dims: ["batch", "ffn"]}},
                             {key: "x\(. + 1)", value: {dims: ["batch", "hidden"]}})
            | from_entries),
  ops: [range(8) | {name: "fc\(.)", kind: "matmul", in: ["x\(.)", "w\(.)"], out: ["z\(.)"]},
                   {name: "view\(.)", kind: "reshape", in: ["z\(.)"], out: ["x\(. + 1)"]}]}' >"$M"

run cluster dgx-a100-80g --nodes 2 --nic-bandwidth "1 Gb/s" -o "$C"
expect "two nodes on 1 Gb/s" 0 any any
run plan "$M" "$C" --search alpa --no-baselines -o "$P"
expect "plan --search alpa of a graph without layer indices" 0 stdout-nonempty any
if jq -e '(.strategy.pipeline.stages | length) > 1 and (.strategy.pipeline.layer_starts | length) > 1
          and .search.stats.layer_clusters > 1' "$P" >/dev/null; then
  ok "the plan pipelines over clustered layers"
else
  not_ok "the plan pipelines over clustered layers" "$(jq -c .strategy.pipeline "$P")"
fi
run check "$P"
expect "check of the plan file" 0 stdout-nonempty any
run simulate "$M" "$C" "$P" --json
expect "simulate of the plan file" 0 stdout-nonempty any
if [ "$(jq .iteration_time_s "$OUT")" = "$(jq .prediction.iteration_time_s "$P")" ]; then
  ok "simulate of the plan gives its prediction"
else
  not_ok "simulate of the plan gives its prediction" "$(jq .iteration_time_s "$OUT")"
fi
finish
