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

M="$ROOT/models/gpt-22b.json"
C="$ROOT/topologies/dgx-h100-x1.json"
S="$ROOT/strategies/megatron-22b-x1.json"

run simulate "$M" "$C" "$S" --json
expect "simulate without --stack" 0 stdout-nonempty any 'iteration_time_s'
figures "$OUT" >"$TEST_TMP/none.json"
run simulate "$M" "$C" "$S" --json --stack megatron-lm-2021
expect "--stack megatron-lm-2021" 0 stdout-nonempty
if same "$OUT" "$TEST_TMP/none.json"; then ok "megatron-lm-2021 is the default"; else
  not_ok "megatron-lm-2021 is the default" "outputs differ"; fi

run simulate "$M" "$C" "$S" --json --stack megatron-core
expect "--stack megatron-core" 0 stdout-nonempty
figures "$OUT" >"$TEST_TMP/core.json"
if same "$OUT" "$TEST_TMP/none.json"; then not_ok "megatron-core changes the prediction"; else
  ok "megatron-core changes the prediction"; fi
run simulate "$M" "$C" "$S" --json --stack "$ROOT/stacks/megatron-core.json"
if same "$OUT" "$TEST_TMP/core.json"; then ok "stacks/megatron-core.json = the built-in"; else
  not_ok "stacks/megatron-core.json = the built-in"; fi

python3 - "$C" "$TEST_TMP/c.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["stack"] = "megatron-core"
json.dump(d, open(sys.argv[2], "w"))
PY
run simulate "$M" "$TEST_TMP/c.json" "$S" --json
if same "$OUT" "$TEST_TMP/core.json"; then ok "the cluster key selects the stack"; else
  not_ok "the cluster key selects the stack"; fi
run simulate "$M" "$TEST_TMP/c.json" "$S" --json --stack megatron-lm-2021
if same "$OUT" "$TEST_TMP/none.json"; then ok "--stack wins over the cluster key"; else
  not_ok "--stack wins over the cluster key"; fi
python3 - "$S" "$TEST_TMP/s.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["stack"] = "megatron-core"
json.dump(d, open(sys.argv[2], "w"))
PY
run simulate "$M" "$C" "$TEST_TMP/s.json" --json
if same "$OUT" "$TEST_TMP/core.json"; then ok "the strategy key selects the stack"; else
  not_ok "the strategy key selects the stack"; fi

run simulate "$M" "$C" "$S" --stack no-such-stack
expect "unknown --stack" 2 stdout-empty stderr-nonempty '' 'no-such-stack'
echo '{"format":"plansim.stack/1","name":"x","optimizer":"adam"}' >"$TEST_TMP/bad.json"
run simulate "$M" "$C" "$S" --stack "$TEST_TMP/bad.json"
expect "bad profile file" 2 stdout-empty stderr-nonempty '' 'bad.json.*optimizer'
run plan "$M" "$C" --search grid --budget 1 --stack no-such-stack
expect "plan: unknown --stack" 2 stdout-empty stderr-nonempty '' 'no-such-stack'
finish
