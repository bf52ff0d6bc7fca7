#!/usr/bin/env bash
# simulate.sh - plansim simulate and plan end to end: the README's trace
# example loads as a Chrome/Perfetto trace (valid traceEvents JSON with
# device, link and host tracks and memory counters), --json carries the keys
# issue 3 names, a plan file reproduces its own prediction exactly, and both
# collective fidelities agree.
source "$(dirname "$0")/lib.bash"

TRACE="$TEST_TMP/t.json"
if [ "${PSIM_SANITIZED:-0}" = 1 ] || ldd "$PLANSIM" 2>/dev/null | grep -qE "libasan|libubsan"; then
  # the sanitizer pass (a memory check, several times slower) traces a smaller case; the
  # default pass runs the README's example
  run simulate "$ROOT/models/gpt-22b.json" "$ROOT/topologies/dgx-a100-x1.json" \
    "$ROOT/strategies/megatron-22b-x1.json" --trace "$TRACE"
  expect "simulate gpt-22b on a DGX A100 with a trace" 0 stdout-nonempty any 'per iteration'
else
  run simulate "$ROOT/models/gpt-175b.json" "$ROOT/topologies/dgx-a100-x128.json" \
    "$ROOT/strategies/megatron-gpt-175b-x128.json" --trace "$TRACE"
  expect "simulate gpt-175b on 128 DGX A100 with a trace" 0 stdout-nonempty any 'per iteration'
fi

if python3 - "$TRACE" >"$TEST_TMP/check" 2>&1 <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = [e for e in ev if e.get("ph") == "X"]
assert x, "no complete events"
assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in x), "negative ts/dur"
names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
for want in ("compute", "comm", "host"):
    assert want in names, "no %s track" % want
assert any(e.get("ph") == "C" for e in ev), "no memory counter"
assert any(e.get("pid") is not None and "fwd" in e.get("name", "") for e in x), "no forward task"
print(len(x), "events")
PY
  ok "the trace is valid traceEvents JSON ($(cat "$TEST_TMP/check"))"
else
  not_ok "the trace is valid traceEvents JSON" "$(cat "$TEST_TMP/check")"
fi

run simulate "$ROOT/models/gpt-22b.json" "$ROOT/topologies/dgx-a100-x1.json" \
  "$ROOT/strategies/megatron-22b-x1.json" --json
expect "simulate --json" 0 stdout-nonempty any
if python3 - "$OUT" >"$TEST_TMP/check" 2>&1 <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("iteration_time_s", "samples_per_s", "tokens_per_s", "model_flops_per_s_per_device",
          "mfu", "hfu", "fits", "peak_memory_bytes", "memory", "time_breakdown", "sim"):
    assert k in d, "missing " + k
for k in ("compute_s", "exposed_comm_s", "bubble_s"):
    assert k in d["time_breakdown"], "missing time_breakdown." + k
for k in ("tasks", "edges", "build_s", "simulate_s"):
    assert k in d["sim"], "missing sim." + k
assert 0 < d["mfu"] <= d["hfu"] < 1, "MFU %g, HFU %g" % (d["mfu"], d["hfu"])
PY
  ok "simulate --json has the keys of issue 3"
else
  not_ok "simulate --json has the keys of issue 3" "$(cat "$TEST_TMP/check")"
fi
T_AGG=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["iteration_time_s"])' "$OUT")

run simulate "$ROOT/models/gpt-22b.json" "$ROOT/topologies/dgx-a100-x1.json" \
  "$ROOT/strategies/megatron-22b-x1.json" --json --fidelity expanded
expect "simulate --fidelity expanded" 0 stdout-nonempty any
T_EXP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["iteration_time_s"])' "$OUT")
if python3 -c "import sys; a,b=$T_AGG,$T_EXP; sys.exit(0 if abs(a-b) <= 0.01*a else 1)"; then
  ok "aggregated and expanded collectives agree within 1% ($T_AGG s, $T_EXP s)"
else
  not_ok "aggregated and expanded collectives agree within 1%" "$T_AGG s vs $T_EXP s"
fi

PLAN="$TEST_TMP/plan.json"
run plan "$ROOT/models/gpt-1.3b.json" "$ROOT/topologies/dgx-a100-x2.json" --search grid -o "$PLAN"
expect "plan --search grid writes a plan" 0 stdout-nonempty any 'plan written'
run simulate "$ROOT/models/gpt-1.3b.json" "$ROOT/topologies/dgx-a100-x2.json" "$PLAN" --json
expect "simulate reproduces the plan" 0 stdout-nonempty any
if python3 - "$PLAN" "$OUT" >"$TEST_TMP/check" 2>&1 <<'PY'; then
import json, sys
plan = json.load(open(sys.argv[1]))["prediction"]["iteration_time_s"]
sim = json.load(open(sys.argv[2]))["iteration_time_s"]
assert plan == sim, "plan %r, simulate %r" % (plan, sim)
PY
  ok "the plan's prediction is reproduced exactly"
else
  not_ok "the plan's prediction is reproduced exactly" "$(cat "$TEST_TMP/check")"
fi
run check "$PLAN"
expect "the plan passes plansim check" 0 stdout-nonempty stderr-empty

# HSDP (dp_shard): the expansion writes dp_replicate and simulates to the template's figures;
# a dp_shard that does not divide dp, or at ZeRO 0, is refused naming the key
X2="$ROOT/topologies/dgx-a100-x2.json" G13="$ROOT/models/gpt-1.3b.json"
printf '{"format": "plansim.strategy/1", "template": "megatron", "tp": 2, "dp": 8, "dp_shard": 4,
  "zero": 3, "sequence_parallel": true, "overlap_grad_reduce": true}\n' >"$TEST_TMP/hsdp.json"
run expand "$G13" "$X2" "$TEST_TMP/hsdp.json"
expect "expand writes HSDP's dp_replicate" 0 stdout-nonempty stderr-empty '"dp_replicate":.2'
cp "$OUT" "$TEST_TMP/hsdp-x.json"
run simulate "$G13" "$X2" "$TEST_TMP/hsdp.json" --json
cp "$OUT" "$TEST_TMP/hsdp-t.out"
run simulate "$G13" "$X2" "$TEST_TMP/hsdp-x.json" --json
if python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); sys.exit(a["iteration_time_s"]!=b["iteration_time_s"] or a["memory"]!=b["memory"])' "$TEST_TMP/hsdp-t.out" "$OUT"; then
  ok "HSDP: the explicit form simulates to the template's figures"
else not_ok "HSDP: the explicit form simulates to the template's figures"; fi
for bad in '"dp_shard": 3, "zero": 3|dp_shard: 3 does not divide dp = 8' \
  '"dp_shard": 4|shards nothing at ZeRO 0'; do
  printf '{"format": "plansim.strategy/1", "template": "megatron", "tp": 2, "dp": 8, %s}\n' \
    "${bad%%|*}" >"$TEST_TMP/hsdp-bad.json"
  run simulate "$G13" "$X2" "$TEST_TMP/hsdp-bad.json"
  expect "HSDP refused: ${bad#*|}" 2 stdout-empty stderr-nonempty "" "${bad#*|}"
done

# async_tp: the run's own async TP over the stack's tp_overlap, to the bit either way
X1="$ROOT/topologies/dgx-a100-x1.json"
printf '{"format": "plansim.stack/1", "name": "fsdp2-async", "base": "pytorch-fsdp2", "tp_overlap": true}\n' \
  >"$TEST_TMP/async-stack.json"
for v in none true false; do
  extra=$([ $v = none ] || echo ", \"async_tp\": $v")
  printf '{"format": "plansim.strategy/1", "template": "megatron", "tp": 8, "dp": 1,
    "sequence_parallel": true%s}\n' "$extra" >"$TEST_TMP/async-$v.json"
done
t_of() { python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["iteration_time_s"]))' "$OUT"; }
L7="$ROOT/models/llama2-7b.json"
run simulate "$L7" "$X1" "$TEST_TMP/async-true.json" --stack pytorch-fsdp2 --json && A_ON=$(t_of)
run simulate "$L7" "$X1" "$TEST_TMP/async-none.json" --stack "$TEST_TMP/async-stack.json" --json && S_ON=$(t_of)
run simulate "$L7" "$X1" "$TEST_TMP/async-false.json" --stack "$TEST_TMP/async-stack.json" --json && A_OFF=$(t_of)
run simulate "$L7" "$X1" "$TEST_TMP/async-none.json" --stack pytorch-fsdp2 --json && S_OFF=$(t_of)
if [ "$A_ON" = "$S_ON" ] && [ "$A_OFF" = "$S_OFF" ] && [ "$A_ON" != "$A_OFF" ]; then
  ok "async_tp on/off equals the stack's tp_overlap on/off ($A_ON s / $A_OFF s)"
else not_ok "async_tp equals the stack's tp_overlap" "on $A_ON vs $S_ON, off $A_OFF vs $S_OFF"; fi
run expand "$L7" "$X1" "$TEST_TMP/async-true.json"
expect "expand writes async_tp" 0 stdout-nonempty stderr-empty '"async_tp":.true'

finish
