#!/usr/bin/env bash
# models.sh - the shipped model files (models/*.json) and the decoder families (issue 21
# item 1, issue 20 item 4): every shipped file is what models/regenerate.sh writes with this
# plansim; the new ones load with `plansim check` in under a second; those that fit simulate
# with a ZeRO-3 data-parallel strategy (fits, positive finite time, MFU in (0, 1]); bad MoE
# options are refused with exit status 2 and the option's name.
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 2

NEW='gpt3-175b-mlperf qwen3-8b qwen3-32b qwen3-30b-a3b qwen3-235b-a22b mixtral-8x7b deepseek-v3 gpt-oss-120b'

# regenerate.sh writes beside itself: run a copy and compare every file it writes.
mkdir -p "$TEST_TMP/models"
cp models/regenerate.sh "$TEST_TMP/models/"
if sh "$TEST_TMP/models/regenerate.sh" "$PLANSIM" >"$OUT" 2>"$ERR"; then
  differ=()
  for f in "$TEST_TMP"/models/*.json; do
    cmp -s "$f" "models/$(basename "$f")" || differ+=("$(basename "$f")")
  done
  for f in models/*.json; do
    [ -f "$TEST_TMP/models/$(basename "$f")" ] || differ+=("$(basename "$f") (not written)")
  done
  if [ "${#differ[@]}" -eq 0 ]; then ok "shipped models equal regenerate.sh's output"; else
    not_ok "shipped models equal regenerate.sh's output" "differ: ${differ[*]}" \
      "run models/regenerate.sh and commit the files"
  fi
else
  not_ok "regenerate.sh runs" "exit status $?"
fi

for m in $NEW; do
  start=$(date +%s%N)
  run check "models/$m.json"
  ms=$((($(date +%s%N) - start) / 1000000))
  if [ "$STATUS" -ne 0 ]; then
    expect "check $m" 0
  elif [ "$ms" -gt 1000 ]; then
    not_ok "check $m in under a second" "took $ms ms"
  else
    ok "check $m ($ms ms)"
  fi
done

# The same families at a small global batch on the H100 nodes that hold them with ZeRO-3.
# DeepSeek-V3 and Qwen3-235B-A22B do not fit without expert parallelism (issue 21 item 2).
# simulated NAME MODEL CLUSTER STRATEGY: the run fits, with a positive finite time and MFU <= 1.
simulated() {
  local name=$1
  run simulate "$2" "$3" "$4" --json
  if [ "$STATUS" -ne 0 ]; then
    expect "simulate $name" 0
  elif why=$(python3 - "$OUT" 2>&1 <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
t, mfu = d["iteration_time_s"], d["mfu"]
assert d["fits"] is True, "does not fit: peak %.3g B" % d["peak_memory_bytes"]
assert t > 0 and math.isfinite(t), "iteration time %r" % t
assert 0 < mfu <= 1, "MFU %r outside (0, 1]" % mfu
print("%.4g s, MFU %.3f" % (t, mfu))
PY
  ); then ok "simulate $name ($why)"; else
    not_ok "simulate $name" "$(printf '%s\n' "$why" | tail -n 1)"
  fi
}

sim() {
  local name=$1 nodes=$2 dp=$3
  shift 3
  local model="$TEST_TMP/$name.json" cluster="$TEST_TMP/h100-x$nodes.json"
  local strategy="$TEST_TMP/z3-$dp.json"
  [ -f "$cluster" ] || "$PLANSIM" cluster dgx-h100 --nodes "$nodes" -o "$cluster"
  printf '{"format": "plansim.strategy/1", "name": "z3", "template": "zero", "stage": 3, "dp": %d}\n' \
    "$dp" >"$strategy"
  "$PLANSIM" model "$@" -o "$model"
  simulated "$name with ZeRO-3 over $dp H100s" "$model" "$cluster" "$strategy"
}
sim qwen3-8b 1 8 qwen3 --batch 8
sim qwen3-30b-a3b 2 16 qwen3-moe --batch 16
sim mixtral-8x7b 8 64 mixtral --batch 64
sim gpt-oss-120b 8 64 gpt-oss --batch 64
# GPT-3 175B (MLPerf) at its batch 1536 with the reference's tp 8, pp 8 (run_gpt3.sh)
simulated "gpt3-175b-mlperf with tp 8, pp 8, dp 16" models/gpt3-175b-mlperf.json \
  topologies/dgx-a100-x128.json strategies/megatron-gpt-175b-x128.json

# Bad MoE options: exit status 2, the option named.
run model qwen3-moe --top-k 129
expect "top-k above the experts" 2 stdout-empty stderr-nonempty "" "--top-k 129 must be in \[1, --experts 128\]"
run model mixtral --experts 0
expect "zero experts" 2 stdout-empty stderr-nonempty "" "--experts"
run model deepseek-v3 --capacity-factor -1
expect "negative capacity factor" 2 stdout-empty stderr-nonempty "" "--capacity-factor"
run model deepseek-v3 --dense-layers 61
expect "dense layers not below the layers" 2 stdout-empty stderr-nonempty "" "--dense-layers 61"
run model moe --capacity-factor 0
expect "moe keeps a positive capacity factor (--dropless instead)" 2 stdout-empty stderr-nonempty "" \
  "--capacity-factor"

finish
