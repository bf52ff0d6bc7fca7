#!/usr/bin/env bash
# policy.sh - the search policy of `plan` (issue 18): the plan is never slower than a baseline
# it evaluated (models x clusters x searchers; a faster baseline becomes the plan and
# search.plan_from says so), the phases and progress on stderr with --progress, the grid's
# time budget; `check` validates a plan's members and strategy; a cost database measured on
# another kind of device than the cluster's gets a warning.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

P="$TEST_TMP/plan.json"

# never_slower NAME ARGS...: plan ARGS; the plan fits and no baseline that fits is faster.
never_slower() {
  local name=$1
  shift
  run plan "$@" --budget 100 --seed 1 -o "$P"
  expect "plan $name" 0 stdout-nonempty any
  if jq -e '.prediction.iteration_time_s as $p | .prediction.fits and
            ([.baselines[] | select(.fits) | .iteration_time_s >= $p] | all) and
            (.baselines | length) > 0' "$P" >/dev/null; then
    ok "$name: plan $(jq .prediction.iteration_time_s "$P") s <= baselines $(jq -c '[.baselines[].iteration_time_s]' "$P") (from $(jq -r '.search.plan_from // .search.searcher' "$P"))"
  else
    not_ok "$name: the plan is no slower than a baseline" \
      "$(jq -c '[.prediction.iteration_time_s, [.baselines[] | [.iteration_time_s, .fits]], .search.plan]' "$P")"
  fi
}

never_slower "auto mlp dgx-a100-x1" models/mlp.json topologies/dgx-a100-x1.json
if jq -e '.search.plan_from == "data_parallel" or .search.plan_from == "mcmc" or
          .search.plan_from == "megatron_grid"' "$P" >/dev/null; then
  ok "mlp on dgx-a100-x1: the plan comes from $(jq -r .search.plan_from "$P"), not Alpa's slower plan"
else
  not_ok "mlp on dgx-a100-x1: the plan is a data-parallel baseline (plain or with the distributed optimizer) or its refinement" \
    "$(jq -c .search "$P")"
fi
never_slower "auto tiny-gpt dgx-a100-x1" tests/data/tiny-gpt.json topologies/dgx-a100-x1.json
never_slower "auto mlp p100-nvlink-x4" models/mlp.json topologies/p100-nvlink-x4.json
never_slower "alpa tiny-gpt p100-nvlink-x4" tests/data/tiny-gpt.json \
  topologies/p100-nvlink-x4.json --search alpa
never_slower "mcmc mlp dgx1-v100-x8" models/mlp.json topologies/dgx1-v100-x8.json --search mcmc
never_slower "grid tiny-gpt dgx-a100-x1" tests/data/tiny-gpt.json topologies/dgx-a100-x1.json \
  --search grid

# --progress: one line per phase (alpa, baselines, refinement) with the time against the
# budget, and the searchers' lines (grid: configurations done/total, time left)
run plan models/mlp.json topologies/dgx-a100-x1.json --progress
expect "plan --progress" 0 stdout-nonempty stderr-nonempty "" 'plan \[[0-9.]+ s of 40 s\]: alpa search'
for re in 'plan \[[0-9.]+ s of 40 s\]: baselines: data parallel over 8 devices, the Megatron grid' \
  'grid: [0-9]+/[0-9]+ candidates \([0-9]+ pruned: [0-9]+ divisibility, [0-9]+ memory, [0-9]+ dominated, [0-9]+ bound\), [0-9]+ simulated, [0-9.]+ s, ~[0-9]+ s left' \
  'plan \[[0-9.]+ s of 40 s\]: MCMC refinement of '; do
  if grep -aqE "$re" "$ERR"; then ok "progress: /$re/"; else not_ok "progress: /$re/" "$(tr '\r' '\n' <"$ERR" | head -c 600)"; fi
done

# the grid takes a time budget: it stops before a configuration expected to end past it
run plan models/gpt-1.3b.json topologies/dgx-a100-x16.json --search grid --budget 1s -o "$P"
expect "grid --budget 1s" 0 stdout-nonempty any
if jq -e '(.search.plan | test("time budget: [0-9]+ of [0-9]+ configurations")) and .search.wall_s < 10' "$P" >/dev/null; then
  ok "grid --budget 1s: $(jq -r .search.plan "$P") in $(jq .search.wall_s "$P") s"
else
  not_ok "grid --budget 1s stops by time" "$(jq -c '[.search.plan, .search.wall_s, .search.evaluations]' "$P")"
fi

# check validates plans (it took any member before): a plan written by plan is ok, nonsense
# members, a missing or bad strategy, bad figures and unknown baselines are refused
run plan models/mlp.json topologies/p100-nvlink-x4.json --budget 20 -o "$P"
run check "$P"
expect "check a written plan" 0 stdout-nonempty stderr-empty 'ok \(plan of mlp'
bad=(
  '{"format": "plansim.plan/1", "strategy": {"format": "plansim.strategy/1"}, "bogus": 1}'
  '{"format": "plansim.plan/1"}'
  '{"format": "plansim.plan/1", "strategy": {"nonsense": true}}'
  '{"format": "plansim.plan/1", "strategy": {}, "prediction": {"iteration_time_s": "fast", "fits": true}}'
  '{"format": "plansim.plan/1", "strategy": {}, "baselines": {"magic": {"iteration_time_s": 1, "fits": true}}}'
  '{"format": "plansim.plan/1", "strategy": {}, "search": {"searcher": "alpa", "plan_from": 3}}'
)
for doc in "${bad[@]}"; do
  printf '%s\n' "$doc" >"$TEST_TMP/bad-plan.json"
  run check "$TEST_TMP/bad-plan.json"
  expect "check refuses $doc" 2 stdout-empty stderr-nonempty "" "bad-plan\.json: "
done

# a cost database measured on a CPU applied to a GPU cluster: a warning; on CPUs: none
DB="$TEST_TMP/cpu.costdb.json"
run profile --device cpu --model models/mlp.json --cluster topologies/cpu-x4.json --budget 0.002 -o "$DB"
expect "profile mlp on cpu-x4" 0 any any
run simulate models/mlp.json topologies/dgx-a100-x1.json strategies/data-parallel.json --costdb "$DB"
expect "CPU database on A100s: a warning" 0 stdout-nonempty stderr-nonempty "" \
  'warning: .*measured on cpu .*cluster dgx-a100-80g-x1 has a100-80g devices'
run simulate models/mlp.json topologies/cpu-x4.json strategies/data-parallel.json --costdb "$DB"
expect "CPU database on CPUs: no warning" 0 stdout-nonempty stderr-empty

# The whole process keeps to a time budget (CPU, search/budget.h): loading counts from the
# process's start (budget_from_start), the refinement stops before an evaluation that would end
# past it; the tail (writing the plan) is allowed 0.5 s.
TIMEFORMAT='%3U %3S'
cpu=$({ time "$PLANSIM" plan tests/data/tiny-gpt.json topologies/dgx-a100-x1.json --budget 3s \
  -o "$P" >/dev/null 2>&1; } 2>&1 | awk '{print $1 + $2}')
if awk -v c="$cpu" 'BEGIN { exit !(c > 1.5 && c <= 3.5) }'; then
  ok "plan --budget 3s: the whole process took $cpu s of CPU"
else
  not_ok "plan --budget 3s keeps the whole process within 3 s of CPU (+0.5 s) and uses it" "$cpu s"
fi

finish
