#!/usr/bin/env bash
# cli_basics.sh - the command-line skeleton: help, version, exit codes, unbuilt commands,
# and `plansim check` over the shipped models, topologies and strategies.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1

# DESIGN.md section 8, plus report.
COMMANDS=(plan simulate profile sweep export model cluster expand check report)
UNBUILT=() # every command is built (sweep, export and report: issue 7)

run --help
expect "--help exits 0" 0 stdout-nonempty stderr-empty "^usage: plansim"
for c in "${COMMANDS[@]}"; do
  if grep -qE "^  $c " "$OUT"; then ok "--help lists $c"; else not_ok "--help lists $c"; fi
done
run -h
expect "-h exits 0" 0 stdout-nonempty stderr-empty "^usage: plansim"
run
expect "no arguments: usage on stderr, exit 2" 2 stdout-empty stderr-nonempty "" "^usage: plansim"
run --version
expect "--version" 0 stdout-nonempty stderr-empty "^plansim [0-9]+\.[0-9]+\.[0-9]+"
run help
expect "help with no command lists commands" 0 stdout-nonempty any "^  check "

for c in "${COMMANDS[@]}"; do
  run help "$c"
  expect "help $c" 0 stdout-nonempty stderr-empty "^usage: plansim $c"
done
run simulate --help
expect "simulate --help is help simulate" 0 stdout-nonempty stderr-empty "^usage: plansim simulate"
run help no-such-command
expect "help of an unknown command exits 2" 2 stdout-empty stderr-nonempty "" "no-such-command"
run frobnicate
expect "unknown command exits 2" 2 stdout-empty stderr-nonempty "" "unknown command 'frobnicate'"

for c in "${UNBUILT[@]}"; do
  run "$c" x.json
  expect "$c is not built yet: exit 1 with a message" 1 stdout-empty stderr-nonempty "" "not built"
done

# check: usage errors and a missing file.
run check
expect "check with no files exits 2" 2 stdout-empty stderr-nonempty "" "expected one or more files"
run check --frobnicate
expect "check with an unknown option exits 2" 2 stdout-empty stderr-nonempty "" "unknown option"
run check tests/data/no-such-file.json
expect "check of a missing file names it" 2 stdout-empty stderr-nonempty "" "no-such-file\.json"

# check: plans (their members and strategy, tests/cli/policy.sh) and sweeps (format key only,
# for now); a good and a bad file together.
printf '{"format": "plansim.plan/1", "strategy": {"format": "plansim.strategy/1", "template": "data_parallel"}}\n' >"$TEST_TMP/plan.json"
printf '{"format": "plansim.sweep/1"}\n' >"$TEST_TMP/sweep.json"
run check "$TEST_TMP/plan.json" "$TEST_TMP/sweep.json"
expect "check a plan and a sweep" 0 stdout-nonempty stderr-empty "plan\.json: ok"
if [ "$(wc -l <"$OUT")" -eq 2 ]; then ok "one ok line per good file"; else not_ok "one ok line per good file"; fi
run check "$TEST_TMP/plan.json" tests/data/bad/no-format.json "$TEST_TMP/sweep.json"
expect "good files still checked after a bad one" 2 stdout-nonempty stderr-nonempty \
  "sweep\.json: ok" "no-format\.json"
if ! grep -q "no-format" "$OUT"; then ok "bad file absent from stdout"; else not_ok "bad file absent from stdout"; fi

# check: every shipped file is valid (globs that match nothing are skipped).
shipped=()
for pat in models/*.json topologies/*.json strategies/*.json; do
  [ -f "$pat" ] && shipped+=("$pat")
done
if [ "${#shipped[@]}" -eq 0 ]; then
  skip "check shipped files" "no models/, topologies/ or strategies/ JSON files yet"
else
  run check "${shipped[@]}"
  expect "check ${#shipped[@]} shipped files" 0 stdout-nonempty stderr-empty
  if [ "$(grep -c ': ok (' "$OUT")" -eq "${#shipped[@]}" ]; then
    ok "an ok line for each shipped file"
  else
    not_ok "an ok line for each shipped file"
  fi
fi
# plan names the grid baseline's configuration; --no-baselines skips both baselines.
run plan tests/data/tiny-gpt.json topologies/dgx-a100-x1.json --search alpa
expect "plan names the grid baseline's configuration" 0 stdout-nonempty any \
  "^ +\(Megatron tp [0-9]+, pp [0-9]+, dp [0-9]+"
run plan tests/data/tiny-gpt.json topologies/dgx-a100-x1.json --search alpa --no-baselines \
  -o "$TEST_TMP/nobase.json"
if [ "$STATUS" -eq 0 ] && ! grep -qE "Megatron grid|data parallel" "$OUT" &&
  python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['baselines'] != {})" \
    "$TEST_TMP/nobase.json"; then
  ok "--no-baselines: no baseline lines, an empty baselines object"
else not_ok "--no-baselines: no baseline lines, an empty baselines object" "$(cat "$OUT" "$ERR")"; fi
finish
