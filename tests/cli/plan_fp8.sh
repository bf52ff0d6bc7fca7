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

run plan "$M" "$C" "${GRID[@]}" -o "$TEST_TMP/bf16.json"
expect "plan (BF16)" 0 stdout-nonempty any
run plan "$M" "$C" "${GRID[@]}" --fp8 -o "$TEST_TMP/fp8.json"
expect "plan --fp8" 0 stdout-nonempty any 'FP8 linears'
bf16=$(jq .prediction.iteration_time_s "$TEST_TMP/bf16.json")
fp8=$(jq .prediction.iteration_time_s "$TEST_TMP/fp8.json")
if jq -e '.strategy.fp8 == true' "$TEST_TMP/fp8.json" >/dev/null &&
  jq -e '.strategy | has("fp8") | not' "$TEST_TMP/bf16.json" >/dev/null &&
  awk -v a="$fp8" -v b="$bf16" 'BEGIN { exit !(a < b) }'; then
  ok "the --fp8 plan has FP8 linears and is faster ($fp8 s < $bf16 s)"
else
  not_ok "the --fp8 plan has FP8 linears and is faster" "fp8 $fp8 s, bf16 $bf16 s"
fi

run simulate "$M" "$C" "$TEST_TMP/fp8.json" --stack megatron-core --json
expect "simulate the --fp8 plan" 0 stdout-nonempty any
again=$(jq .iteration_time_s "$OUT")
if [ "$again" = "$fp8" ]; then ok "the FP8 plan re-simulates to its prediction ($again s)"; else
  not_ok "the FP8 plan re-simulates to its prediction" "plan $fp8 s, simulate $again s"; fi

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

# The Alpa optimizer tries its plan with FP8 linears too (alpa_plan.c try_variant): with
# --fp8 its plan has them and is faster than its BF16 plan on the same compute-bound model.
ALPA=(--search alpa --no-baselines --reproducible --stack megatron-core)
run plan "$M" "$C" "${ALPA[@]}" -o "$TEST_TMP/alpa16.json"
expect "plan --search alpa (BF16)" 0 stdout-nonempty any
run plan "$M" "$C" "${ALPA[@]}" --fp8 -o "$TEST_TMP/alpa8.json"
expect "plan --search alpa --fp8" 0 stdout-nonempty any 'FP8 linears'
a16=$(jq .prediction.iteration_time_s "$TEST_TMP/alpa16.json")
a8=$(jq .prediction.iteration_time_s "$TEST_TMP/alpa8.json")
if jq -e '.strategy.fp8 == true' "$TEST_TMP/alpa8.json" >/dev/null &&
  jq -e '.strategy | has("fp8") | not' "$TEST_TMP/alpa16.json" >/dev/null &&
  awk -v a="$a8" -v b="$a16" 'BEGIN { exit !(a < b) }'; then
  ok "Alpa's --fp8 plan has FP8 linears and is faster ($a8 s < $a16 s)"
else
  not_ok "Alpa's --fp8 plan has FP8 linears and is faster" "fp8 $a8 s, bf16 $a16 s"
fi
run simulate "$M" "$C" "$TEST_TMP/alpa8.json" --stack megatron-core --json
expect "simulate Alpa's --fp8 plan" 0 stdout-nonempty any
again=$(jq .iteration_time_s "$OUT")
if [ "$again" = "$a8" ]; then ok "Alpa's FP8 plan re-simulates to its prediction"; else
  not_ok "Alpa's FP8 plan re-simulates to its prediction" "plan $a8 s, simulate $again s"; fi

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
