#!/usr/bin/env bash
# plan_moe.sh - the Megatron grid on mixture-of-experts models (issue 21 D4; search/
# grid_space.c): it tries expert parallelism (ep dividing the experts, etp x ep dividing a
# stage) with the distributed optimizer first, and its plan uses ep > 1 where ep pays. The
# case: a 103 B-parameter MoE (512 experts of width 8192, two layers) on 32 H100s, whose
# experts replicated (ep 1) do not fit any tp x pp a node allows. Brute force: every ep 1
# configuration with the least memory (micro-batch 1, full recomputation, the distributed
# optimizer) is simulated; the plan must be no slower than the fastest of them that fits,
# and must fit. PSIM_SLOW_TESTS=1 also plans Qwen3-235B-A22B on 256 H100s with the grid
# (60 s budget) and requires ep > 1.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

M="$TEST_TMP/moe.json" C="$TEST_TMP/h100x32.json" S="$TEST_TMP/s.json"
run model qwen3-moe --layers 2 --hidden 4096 --heads 32 --kv-heads 4 --seq 1024 --vocab 4096 \
  --batch 64 --experts 512 --top-k 2 --moe-ffn 8192 -o "$M"
run cluster dgx-h100 --nodes 4
cp "$OUT" "$C"
run plan "$M" "$C" --search grid --budget 60s --json -o "$TEST_TMP/plan.json"
cp "$OUT" "$TEST_TMP/p.json"
desc=$(jq -r '.search.plan' "$TEST_TMP/p.json")
plan_t=$(jq '.prediction.iteration_time_s' "$TEST_TMP/p.json")
if [[ "$desc" =~ ep\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -gt 1 ] &&
  jq -e '.prediction.fits' "$TEST_TMP/p.json" >/dev/null; then
  ok "the grid's plan uses ep > 1 and fits: $desc"
else
  not_ok "the grid's plan uses ep > 1 and fits" "$desc"
fi
best=inf
for tp in 1 2 4; do
  for pp in 1 2; do
    printf '{"format": "plansim.strategy/1", "template": "megatron", "tp": %s, "pp": %s, "dp": %s, "micro_batch": 1, "recompute": "full", "sequence_parallel": %s, "zero": 1}\n' \
      "$tp" "$pp" $((32 / tp / pp)) "$([ "$tp" -gt 1 ] && echo true || echo false)" >"$S"
    run simulate "$M" "$C" "$S" --json
    if jq -e '.fits' "$OUT" >/dev/null; then
      t=$(jq '.iteration_time_s' "$OUT")
      best=$(awk -v a="$best" -v b="$t" 'BEGIN { print (a == "inf" || b < a) ? b : a }')
    fi
  done
done
if [ "$best" = inf ] || awk -v p="$plan_t" -v b="$best" 'BEGIN { exit !(p <= b) }'; then
  ok "the plan ($plan_t s) is no slower than the fastest ep 1 configuration that fits ($best)"
else
  not_ok "the plan ($plan_t s) is no slower than the fastest ep 1 configuration that fits ($best)"
fi
if [ "${PSIM_SLOW_TESTS:-0}" = 1 ]; then
  run cluster dgx-h100 --nodes 32
  cp "$OUT" "$TEST_TMP/h100x256.json"
  run plan models/qwen3-235b-a22b.json "$TEST_TMP/h100x256.json" --search grid --budget 60s \
    --json -o "$TEST_TMP/q.json"
  desc=$(jq -r '.search.plan' "$OUT")
  if [[ "$desc" =~ ep\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -gt 1 ]; then
    ok "Qwen3-235B on 256 H100s: $desc"
  else
    not_ok "Qwen3-235B on 256 H100s uses ep > 1" "$desc"
  fi
fi
finish
