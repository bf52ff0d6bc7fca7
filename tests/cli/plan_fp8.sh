#!/usr/bin/env bash
# plan_fp8.sh - FP8 linears as a searched knob (issue 23; plan --fp8, the strategy's "fp8",
# docs/search.md): on one DGX H100 under megatron-core the grid's plan of a compute-bound Llama
# has FP8 linears and is faster than the BF16 plan; its strategy carries "fp8": true and
# re-simulates to the plan's prediction; the Megatron-LM export says --fp8-format hybrid and
# obeys Megatron-LM's rules (export_rules.py reads the precision back); where FP8 cannot apply
# (A100, a stack without FP8 recipes) --fp8 says so and changes nothing.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

M="$TEST_TMP/llama.json"
C="$ROOT/topologies/dgx-h100-x1.json"
run model llama3 --layers 2 --hidden 4096 --heads 32 --ffn 14336 --seq 2048 --batch 16 \
  --vocab 32768 -o "$M"
expect "model llama3 (2 layers)" 0 any any
GRID=(--search grid --no-baselines --reproducible --stack megatron-core)

# fp8_pair LABEL NAME ARGS...: plans without and with --fp8 (TEST_TMP/NAME16.json and
# NAME8.json); the --fp8 plan has FP8 linears, is faster and re-simulates to its prediction.
fp8_pair() {
  local label=$1 name=$2 a16 a8 again
  shift 2
  run plan "$M" "$C" "$@" -o "$TEST_TMP/${name}16.json"
  expect "$label plan (BF16)" 0 stdout-nonempty any
  run plan "$M" "$C" "$@" --fp8 -o "$TEST_TMP/${name}8.json"
  expect "$label plan --fp8" 0 stdout-nonempty any 'FP8 linears'
  a16=$(jq .prediction.iteration_time_s "$TEST_TMP/${name}16.json")
  a8=$(jq .prediction.iteration_time_s "$TEST_TMP/${name}8.json")
  if jq -e '.strategy.fp8 == true' "$TEST_TMP/${name}8.json" >/dev/null &&
    jq -e '.strategy | has("fp8") | not' "$TEST_TMP/${name}16.json" >/dev/null &&
    awk -v a="$a8" -v b="$a16" 'BEGIN { exit !(a < b) }'; then
    ok "$label: the --fp8 plan has FP8 linears and is faster ($a8 s < $a16 s)"
  else
    not_ok "$label: the --fp8 plan has FP8 linears and is faster" "fp8 $a8 s, bf16 $a16 s"
  fi
  run simulate "$M" "$C" "$TEST_TMP/${name}8.json" --stack megatron-core --json
  expect "$label: simulate the --fp8 plan" 0 stdout-nonempty any
  again=$(jq .iteration_time_s "$OUT")
  if [ "$again" = "$a8" ]; then ok "$label: the FP8 plan re-simulates to its prediction"; else
    not_ok "$label: the FP8 plan re-simulates to its prediction" "plan $a8 s, simulate $again s"; fi
}

fp8_pair grid grid "${GRID[@]}"
cp "$TEST_TMP/grid8.json" "$TEST_TMP/fp8.json"
# The Alpa optimizer tries its plan with FP8 linears too (alpa_plan.c try_variant).
fp8_pair alpa alpa --search alpa --no-baselines --reproducible --stack megatron-core

run export "$TEST_TMP/fp8.json" --format megatron -o "$TEST_TMP/fp8.sh"
expect "export the FP8 plan to Megatron-LM" 0 any any
if grep -q -- '--fp8-format hybrid' "$TEST_TMP/fp8.sh" && grep -q -- '--bf16' "$TEST_TMP/fp8.sh"; then
  ok "the export trains BF16 with FP8 GEMMs"
else
  not_ok "the export trains BF16 with FP8 GEMMs" "$(grep -- '--fp8\|--bf16' "$TEST_TMP/fp8.sh")"
fi
if out=$(python3 tests/cli/export_rules.py megatron "$M" "$TEST_TMP/fp8.sh" 8 "$TEST_TMP/fp8.json" 2>&1); then
  ok "the FP8 export obeys Megatron-LM's rules and reads back"
else
  not_ok "the FP8 export obeys Megatron-LM's rules and reads back" "$out"
fi

# Where FP8 cannot apply: a note, and the same plan as without --fp8.
run plan "$M" "$C" --search grid --no-baselines --reproducible --fp8 -o "$TEST_TMP/old.json"
expect "plan --fp8 under megatron-lm-2021" 0 stdout-nonempty any '' 'no FP8 recipe'
run plan "$M" "$ROOT/topologies/dgx-a100-x1.json" "${GRID[@]}" --fp8 -o "$TEST_TMP/a100.json"
expect "plan --fp8 on A100" 0 stdout-nonempty any '' 'has no FP8 rate'
if jq -e '.strategy | has("fp8") | not' "$TEST_TMP/a100.json" "$TEST_TMP/old.json" >/dev/null; then
  ok "no FP8 plan where FP8 cannot apply"
else
  not_ok "no FP8 plan where FP8 cannot apply"
fi
finish
