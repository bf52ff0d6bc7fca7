#!/usr/bin/env bash
# fold_scale.sh - the cluster-size case of issue 19 (docs/performance.md, "Exact folding and
# cluster size"; tests/bench/scale_table.sh measures all sizes): GPT-175B, Megatron tp 8, pp 8,
# full recomputation, micro-batch 1, batch 8 x dp, on 1,024 DGX A100 nodes (8,192 GPUs, dp 128).
# Routes found by the goal-directed pair search (sim/ir/route.c) and groups of any size
# (sim/builder/colls.c) must leave the figure as main computed it with the full search per
# source before them: 5.064476982879803 s (main at a4d92fb, `plansim simulate ... --json`),
# folded to 8 simulated devices; 5.10644966936302 s since session 23's recompute gate (main at
# 3d2c2e1: a backward slot's recompute waits for the next stage's gradient, sim/builder/
# schedules.c psim_build_gate_recompute; +0.83%, as the corpus's full-recompute pipeline cases).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

M="$TEST_TMP/m.json" C="$TEST_TMP/c.json" S="$TEST_TMP/s.json"
run cluster dgx-a100-80g --nodes 1024 -o "$C"
expect "the 1,024-node cluster" 0
sed "0,/\"size\":[[:space:]]*1536/s//\"size\": 1024/" models/gpt-175b.json >"$M"
cat >"$S" <<'JSON'
{"format": "plansim.strategy/1", "template": "megatron", "tp": 8, "pp": 8, "dp": 128,
 "micro_batch": 1, "virtual_stages": 1, "schedule": "1f1b", "recompute": "full",
 "sequence_parallel": false, "zero": 0, "overlap_grad_reduce": false, "allreduce": "auto"}
JSON
run simulate "$M" "$C" "$S" --json
expect "GPT-175B on 8,192 GPUs simulates" 0 stdout-nonempty
if python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
ok = r["iteration_time_s"] == 5.10644966936302 and r["sim"]["folded"] and r["sim"]["simulated_devices"] == 8
print("# iteration %r s, %s devices simulated" % (r["iteration_time_s"], r["sim"]["simulated_devices"]))
sys.exit(0 if ok else 1)' "$OUT"; then
  ok "the 8,192-GPU figure is main's to the last bit, 8 devices simulated"
else
  not_ok "the 8,192-GPU figure is main's to the last bit, 8 devices simulated"
fi
finish
