#!/usr/bin/env bash
# export_gspmd.sh - plans given per op (the Alpa optimizer's and MCMC's) of every generator family
# of `plansim model` (small shapes, one DGX A100) export to gspmd, or are refused naming why. An
# export must lay out every op's shards as the plan places them (tests/cli/export_specs.py) and
# obey the mesh/PartitionSpec rules (tests/cli/export_rules.py gspmd) and `export --check` reads it
# back as the plan; a refusal must be one of the three docs/export.md names (several pipeline
# stages; an op on a subset of the devices, named with the first such op; an op whose shards lie
# along no mesh axes holding the ops before it). The refused op must be the first op of the
# model, in order, whose devices are a subset (checked from the plan).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1
if ! command -v python3 >/dev/null; then
  skip "per-op plans to gspmd" "python3 is not installed"
  finish
  exit
fi
X1=topologies/dgx-a100-x1.json
small() { # small FAMILY OPTIONS...: a small model of the family in $TEST_TMP/FAMILY.json
  local f=$1
  shift
  "$PLANSIM" model "$f" "$@" -o "$TEST_TMP/$f.json" 2>"$ERR" || not_ok "plansim model $f" "$(head -2 "$ERR")"
}
TF=(--layers 2 --hidden 256 --heads 8 --seq 128 --vocab 512 --batch 16)
for f in gpt mpt llama llama3 bert moe; do
  case $f in llama3) small $f "${TF[@]}" --kv-heads 4 --flash ;; *) small $f "${TF[@]}" ;; esac
done
small mlp --batch 64
small alexnet --batch 32
small resnet --batch 32
small dlrm --batch 64
small inception --batch 32
# mcmc-fix: MCMC from data parallelism over the 8 GPUs (one stage) with every op kept on them
# in order, splitting as it likes: its ops' splits differ, so the mesh is inferred from them.
printf '{"format": "plansim.strategy/1", "ops": {"*": {"devices": [0, 1, 2, 3, 4, 5, 6, 7]}}}\n' \
  >"$TEST_TMP/fix.json"
printf '{"format": "plansim.strategy/1", "template": "data_parallel", "dp": 8}\n' >"$TEST_TMP/dp8.json"
exported=0
for f in gpt mpt llama llama3 bert moe mlp alexnet resnet dlrm inception; do
  for s in alpa mcmc mcmc-fix; do
    plan="$TEST_TMP/$f.$s.json"
    fix=()
    [ $s = mcmc-fix ] && fix=(--fix "$TEST_TMP/fix.json" --init "$TEST_TMP/dp8.json")
    STATUS=0
    timeout 120 "$PLANSIM" plan "$TEST_TMP/$f.json" $X1 --search "${s%-fix}" --budget 200 --seed 5 \
      "${fix[@]}" --no-baselines -o "$plan" >/dev/null 2>"$ERR" || STATUS=$?
    if [ "$STATUS" -ne 0 ]; then
      not_ok "$f --search $s writes a plan" "$(head -2 "$ERR")"
      continue
    fi
    run export "$plan" --format gspmd -o "$TEST_TMP/$f.$s.gspmd"
    if [ "$STATUS" -eq 0 ]; then
      exported=$((exported + 1))
      if python3 tests/cli/export_specs.py "$TEST_TMP/$f.json" "$plan" "$TEST_TMP/$f.$s.gspmd" "" \
        >"$TEST_TMP/spec.log" 2>&1 &&
        python3 tests/cli/export_rules.py gspmd "$TEST_TMP/$f.json" "$TEST_TMP/$f.$s.gspmd" \
          >>"$TEST_TMP/spec.log" 2>&1 &&
        "$PLANSIM" export "$plan" --check "$TEST_TMP/$f.$s.gspmd" >>"$TEST_TMP/spec.log" 2>&1; then
        ok "$f $s plan: gspmd lays out its shards ($(head -1 "$TEST_TMP/spec.log"))"
      else not_ok "$f $s plan: gspmd lays out its shards" "$(head -5 "$TEST_TMP/spec.log")"; fi
      continue
    fi
    msg=$(cat "$ERR")
    case "$msg" in
    *"pipeline stages: GSPMD"*)
      n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["strategy"]["pipeline"]["stages"]))' "$plan" 2>/dev/null)
      [ "$STATUS" -eq 2 ] && [ "${n:-1}" -gt 1 ] && grep -q "$n pipeline stages" "$ERR" &&
        ok "$f $s plan: refused, its $n pipeline stages" ||
        not_ok "$f $s plan: refused for its pipeline stages" "$msg" ;;
    *" runs on "*" of the "*)
      op=$(sed -n "s/.*op '\([^']*\)' runs on .*/\1/p" "$ERR")
      first=$(python3 - "$plan" <<'PY'
import json, sys
ops = json.load(open(sys.argv[1]))["strategy"].get("ops", {})
devs = lambda v: set(range(v["first"], v["first"] + v["count"])) if isinstance(v, dict) else set(v)
every = set().union(*(devs(c["devices"]) for c in ops.values()))
print(next((n for n, c in ops.items() if devs(c["devices"]) != every), ""))
PY
)
      [ "$STATUS" -eq 2 ] && [ -n "$op" ] && [ "$op" = "$first" ] &&
        ok "$f $s plan: refused naming the first op on a subset ($op)" ||
        not_ok "$f $s plan: refused naming the first op on a subset" "named '$op', first '$first'" ;;
    *"cannot be expressed on one device mesh"*)
      [ "$STATUS" -eq 2 ] && ok "$f $s plan: refused, $(cut -c1-120 "$ERR")" ||
        not_ok "$f $s plan: refused with exit 2" ;;
    *"ZeRO stage "*" is not part of per-tensor partition specs"*)
      # Alpa picks ZeRO 1 where its sharded optimizer step pays (its estimate counts the step)
      z=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["strategy"].get("zero", 0))' "$plan" 2>/dev/null)
      [ "$STATUS" -eq 2 ] && [ "${z:-0}" -gt 0 ] && grep -q "ZeRO stage $z " "$ERR" &&
        ok "$f $s plan: refused, its ZeRO stage $z" ||
        not_ok "$f $s plan: refused for its ZeRO stage" "plan zero '${z:-}': $msg" ;;
    *) not_ok "$f $s plan: exports to gspmd or is refused with a documented reason" "$msg" ;;
    esac
  done
done
[ "$exported" -ge 3 ] && ok "$exported per-op plans exported to gspmd" ||
  not_ok "at least 3 per-op plans export to gspmd" "$exported did"
finish
