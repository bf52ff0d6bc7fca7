#!/usr/bin/env bash
# mcmc.sh - `plan --search mcmc|exhaustive`: reproducible plans (same seed and evaluation
# budget -> the same plan file, timing fields aside), a plan faster than data parallel,
# `simulate` reproducing the plan, exhaustive refusing a large space, --fix kept.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

MODEL=models/mlp.json
CLUSTER=topologies/p100-nvlink-x4.json
A="$TEST_TMP/a.json"
B="$TEST_TMP/b.json"

# Timing fields (wall clock, build and simulate seconds, proposals per second) differ
# from run to run; everything else must be byte-identical.
strip_timing() {
  jq -S 'del(.search.wall_s, .search.stats.proposals_per_s, .search.best_so_far[].wall_s,
             .search.stats.delta_wall_s, .search.stats.engine_wall_s, .search.stats.verify_wall_s,
             .prediction.sim.build_s, .prediction.sim.simulate_s,
             .baselines[]?.sim.build_s, .baselines[]?.sim.simulate_s)' "$1"
}

run plan "$MODEL" "$CLUSTER" --search mcmc --budget 2000 --seed 7 --threads 2 -o "$A"
expect "mcmc plan (run 1)" 0 stdout-nonempty any "searcher mcmc: 2000 strategies"
run plan "$MODEL" "$CLUSTER" --search mcmc --budget 2000 --seed 7 --threads 2 -o "$B"
expect "mcmc plan (run 2)" 0 stdout-nonempty any
if cmp -s <(strip_timing "$A") <(strip_timing "$B"); then
  ok "same seed and evaluation budget give the same plan"
else
  not_ok "same seed and evaluation budget give the same plan" \
    "$(diff <(strip_timing "$A") <(strip_timing "$B") | head -20)"
fi
if cmp -s <(jq -S .strategy "$A") <(jq -S .strategy "$B"); then
  ok "the two plans hold byte-identical strategies"
else
  not_ok "the two plans hold byte-identical strategies"
fi

# the plan is no slower than data parallel by the simulator
plan_t=$(jq '.prediction.iteration_time_s' "$A")
dp_t=$(jq '.baselines.data_parallel.iteration_time_s' "$A")
if awk -v p="$plan_t" -v d="$dp_t" 'BEGIN { exit !(p <= d) }'; then
  ok "mcmc plan ($plan_t s) not slower than data parallel ($dp_t s)"
else
  not_ok "mcmc plan ($plan_t s) not slower than data parallel ($dp_t s)"
fi
if jq -e '.search.stats.acceptance_rate >= 0 and .search.stats.proposals == 2000' "$A" >/dev/null; then
  ok "plan carries the search statistics"
else
  not_ok "plan carries the search statistics" "$(jq -c .search.stats "$A")"
fi

# simulate reproduces the plan's prediction exactly
run simulate "$MODEL" "$CLUSTER" "$A" --json
sim_t=$(jq '.iteration_time_s' "$OUT" 2>/dev/null)
if [ "$STATUS" -eq 0 ] && [ "$sim_t" = "$plan_t" ]; then
  ok "simulate reproduces the mcmc plan"
else
  not_ok "simulate reproduces the mcmc plan" "status $STATUS, $sim_t against $plan_t"
fi

# exhaustive refuses a space it cannot enumerate, giving its size
run plan models/alexnet.json "$CLUSTER" --search exhaustive
expect "exhaustive refuses a large space" 1 any stderr-nonempty "" "10\^[0-9.]+ strategies"

# --fix: the fixed op keeps its configuration
printf '{"ops": {"%s": {"split": {"batch": 2}, "devices": [4, 5]}}}\n' \
  "$(jq -r '.ops[1].name' "$MODEL")" >"$TEST_TMP/fix.json"
run plan "$MODEL" "$CLUSTER" --search mcmc --budget 300 --seed 3 --fix "$TEST_TMP/fix.json" -o "$A"
expect "mcmc with --fix" 0 stdout-nonempty any
op1=$(jq -r '.ops[1].name' "$MODEL")
if jq -e --arg op "$op1" '[.strategy.ops[$op].devices[]] == [4, 5]' "$A" >/dev/null 2>&1; then
  ok "--fix keeps the op's devices"
else
  not_ok "--fix keeps the op's devices" "$(jq -c --arg op "$op1" '.strategy.ops[$op]' "$A")"
fi

finish
