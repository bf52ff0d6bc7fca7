#!/usr/bin/env bash
# export_readme.sh - the README's plan-then-export flow, run exactly as printed (the block between
# <!-- export-flow begin --> and <!-- export-flow end -->, with scripts/plansim as $PLANSIM, and the
# plan file of each <!-- export-plan FILE --> block written first), in a folder that sees the
# repository's models/ and topologies/. A line marked "# exit 2" must be refused with the reason
# after it (its words must be in the message); every other line must exit 0. Each exported
# Megatron-LM, Megatron-Bridge, DeepSpeed and torchtitan file must obey the runtime's rules and
# round-trip the model (tests/cli/export_rules.py), and `export --check` must read it back as the
# plan.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1
if ! command -v python3 >/dev/null || ! python3 -c 'import tomllib' 2>/dev/null; then
  skip "the README's export flow" "python3 with tomllib is not installed"
  finish
  exit
fi
W="$TEST_TMP/flow"
mkdir -p "$W"
ln -s "$ROOT/models" "$W/models"
ln -s "$ROOT/topologies" "$W/topologies"

# The hand-written plans: the JSON block after each <!-- export-plan FILE --> marker.
awk -v dir="$W" '/^<!-- export-plan / { f = dir "/" $3; next }
  f && /^```json/ { on = 1; next } on && /^```/ { on = 0; close(f); f = ""; next }
  on { print > f }' README.md
for f in $(sed -n 's/^<!-- export-plan \([^ ]*\) -->$/\1/p' README.md); do
  [ -s "$W/$f" ] && ok "README's plan $f is written from its block" ||
    not_ok "README's plan $f is written from its block"
done

sed -n '/^<!-- export-flow begin -->$/,/^<!-- export-flow end -->$/p' README.md |
  grep '^scripts/plansim ' >"$TEST_TMP/flow.txt"
n=$(wc -l <"$TEST_TMP/flow.txt")
[ "$n" -ge 10 ] && ok "the README's export flow has $n commands" ||
  not_ok "the README's export flow has commands" "found $n"
grep -q -- "--format megatron .*llama" "$TEST_TMP/flow.txt" &&
  grep -q -- "--format torchtitan .*llama" "$TEST_TMP/flow.txt" &&
  grep -q -- "moe.json --format megatron " "$TEST_TMP/flow.txt" &&
  grep -q -- "moe.json --format torchtitan" "$TEST_TMP/flow.txt" &&
  ok "the flow exports a Llama and a MoE plan to Megatron-LM and torchtitan" ||
  not_ok "the flow exports a Llama and a MoE plan to Megatron-LM and torchtitan"

while IFS= read -r line; do
  cmd=$(printf "%s" "${line%%#*}" | sed "s/ *$//")
  why=""
  case "$line" in *"# exit 2:"*) why=${line#*# exit 2: } ;; esac
  read -r -a words <<<"${cmd#scripts/plansim }"
  STATUS=0
  (cd "$W" && timeout 120 "$PLANSIM" "${words[@]}" >"$OUT" 2>"$ERR" </dev/null) || STATUS=$?
  if [ -n "$why" ]; then
    # the refusal names the runtime's reason: the comment's key words are in the message
    key=$(printf '%s' "$why" | grep -o -E "DDP|pipeline|dropless|capacity|SPMD" | head -1)
    if [ "$STATUS" -eq 2 ] && [ ! -s "$OUT" ] && grep -q -i -- "${key:-cannot export}" "$ERR"; then
      ok "README: ${cmd% } is refused: $(cut -c1-100 "$ERR")"
    else not_ok "README: ${cmd% } is refused (exit 2, '$key')" "status $STATUS" "$(head -3 "$ERR")"; fi
    continue
  fi
  if [ "$STATUS" -ne 0 ]; then
    not_ok "README: ${cmd% } exits 0" "status $STATUS" "$(head -3 "$ERR")"
    continue
  fi
  ok "README: ${cmd% }"
  # what it wrote: the runtime's rules and the round trip back to the plan
  fmt="" file="" plan=${words[1]}
  for ((i = 0; i < ${#words[@]}; i++)); do
    case "${words[$i]}" in --format) fmt=${words[$((i + 1))]} ;; -o) file=${words[$((i + 1))]} ;; esac
  done
  [ "${words[0]}" = export ] && [ -n "$file" ] || continue
  model=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_file"])' "$W/$plan")
  world=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["strategy"]
st = s.get("pipeline", {}).get("stages")
t = s.get("template_info", s)  # a searched plan: the explicit form with its template_info
n = sum(x["devices"]["count"] if isinstance(x["devices"], dict) else len(x["devices"]) for x in st) if st else t["tp"] * t["pp"] * t["dp"] * t.get("cp", 1)
pp = len(st) if st else t["pp"]
print("%d/%d" % (n, pp) if sys.argv[2] == "deepspeed" else n)' "$W/$plan" "$fmt")
  if (cd "$W" && python3 "$ROOT/tests/cli/export_rules.py" "$fmt" "$model" "$file" "$world" "$plan") \
    >"$TEST_TMP/rules.log" 2>&1; then
    ok "README: $file obeys $fmt's rules and round-trips the model"
  else not_ok "README: $file obeys $fmt's rules" "$(head -5 "$TEST_TMP/rules.log")"; fi
  (cd "$W" && "$PLANSIM" export "$plan" --check "$file" >"$OUT" 2>"$ERR") || STATUS=$?
  if [ "$STATUS" -eq 0 ] && grep -q "^matches the plan" "$OUT"; then
    ok "README: export $plan --check $file reads it back as the plan"
  else not_ok "README: export $plan --check $file reads it back as the plan" "$(tail -3 "$OUT")"; fi
done <"$TEST_TMP/flow.txt"
# The grid's MoE plan spreads the experts (expert parallelism pays on this model, README).
ep=$(sed -n 's/^ *--expert-model-parallel-size \([0-9]*\)$/\1/p' "$W/moe.sh" 2>/dev/null)
[ "${ep:-0}" -gt 1 ] && ok "README: the MoE plan exports with expert parallelism $ep" ||
  not_ok "README: the MoE plan exports with expert parallelism > 1" "got '${ep}'"
finish
