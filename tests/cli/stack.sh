#!/usr/bin/env bash
# stack.sh - software stacks on the command line (docs/stacks.md): --stack
# megatron-lm-2021 is the default (the same figures as no --stack), another stack
# changes the prediction, the cluster file's and the strategy's "stack" keys
# select the same profile as --stack, --stack wins over both, and an unknown
# stack or a bad profile file is a usage error (exit 2) that names it.
source "$(dirname "$0")/lib.bash"

# The --json output without its wall-clock figures (build_s, simulate_s).
figures() { grep -vE '"(build|simulate)_s"' "$1"; }
same() { [ "$(figures "$1")" = "$(figures "$2")" ]; }
# check NAME FILE: the last run's figures equal FILE's.
check() { if same "$OUT" "$2"; then ok "$1"; else not_ok "$1" "figures differ"; fi; }

M="$ROOT/models/gpt-22b.json"
C="$ROOT/topologies/dgx-h100-x1.json"
S="$ROOT/strategies/megatron-22b-x1.json"

run simulate "$M" "$C" "$S" --json
expect "simulate without --stack" 0 stdout-nonempty any 'iteration_time_s'
figures "$OUT" >"$TEST_TMP/none.json"
run simulate "$M" "$C" "$S" --json --stack megatron-lm-2021
expect "--stack megatron-lm-2021" 0 stdout-nonempty
check "megatron-lm-2021 is the default" "$TEST_TMP/none.json"

run simulate "$M" "$C" "$S" --json --stack megatron-core
expect "--stack megatron-core" 0 stdout-nonempty
figures "$OUT" >"$TEST_TMP/core.json"
if same "$OUT" "$TEST_TMP/none.json"; then not_ok "megatron-core changes the prediction"; else
  ok "megatron-core changes the prediction"; fi
run simulate "$M" "$C" "$S" --json --stack "$ROOT/stacks/megatron-core.json"
check "stacks/megatron-core.json = the built-in" "$TEST_TMP/core.json"

# with_stack IN OUT: a copy of the JSON file IN with "stack": "megatron-core".
with_stack() {
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["stack"] = "megatron-core"
json.dump(d, open(sys.argv[2], "w"))' "$1" "$2"
}
with_stack "$C" "$TEST_TMP/c.json"
run simulate "$M" "$TEST_TMP/c.json" "$S" --json
check "the cluster key selects the stack" "$TEST_TMP/core.json"
run simulate "$M" "$TEST_TMP/c.json" "$S" --json --stack megatron-lm-2021
check "--stack wins over the cluster key" "$TEST_TMP/none.json"
with_stack "$S" "$TEST_TMP/s.json"
run simulate "$M" "$C" "$TEST_TMP/s.json" --json
check "the strategy key selects the stack" "$TEST_TMP/core.json"

run simulate "$M" "$C" "$S" --stack no-such-stack
expect "unknown --stack" 2 stdout-empty stderr-nonempty '' 'no-such-stack'
echo '{"format":"plansim.stack/1","name":"x","optimizer":"adam"}' >"$TEST_TMP/bad.json"
run simulate "$M" "$C" "$S" --stack "$TEST_TMP/bad.json"
expect "bad profile file" 2 stdout-empty stderr-nonempty '' 'bad.json.*optimizer'
# moe_a2a_overlap (combined 1F1B) applies to one pipeline stage only: a warning elsewhere.
echo '{"format":"plansim.stack/1","name":"ov","base":"megatron-core","moe_a2a_overlap":true}' \
  >"$TEST_TMP/ov.json"
run simulate "$M" "$C" "$S" --json --stack "$TEST_TMP/ov.json"
expect "moe_a2a_overlap at pp 1: no warning" 0 stdout-nonempty stderr-empty
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["pp"] = 2; d["tp"] = 4
json.dump(d, open(sys.argv[2], "w"))' "$S" "$TEST_TMP/pp2.json"
run simulate "$M" "$C" "$TEST_TMP/pp2.json" --json --stack "$TEST_TMP/ov.json"
expect "moe_a2a_overlap at pp 2: a warning" 0 stdout-nonempty stderr-nonempty '' \
  'warning: .*moe_a2a_overlap.*runs without it'
run plan "$M" "$C" --search grid --budget 1 --stack no-such-stack
expect "plan: unknown --stack" 2 stdout-empty stderr-nonempty '' 'no-such-stack'
finish
