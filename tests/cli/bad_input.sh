#!/usr/bin/env bash
# bad_input.sh - every file in tests/data/bad/ is refused by `plansim check`: exit status 2,
# a message on stderr that names the file, nothing on stdout, no crash or sanitizer report
# (under a sanitizer build a report aborts with another status, so 2 also means clean).
# Then bad options and paths for every command: syntax error positions, directories as
# inputs, budgets, output paths checked before any work, integer overflow, explicit zeros,
# and notes for options that have no effect.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"

cd "$ROOT" || exit 1
n=0
for f in tests/data/bad/*; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  run check "$f"
  expect "check $f" 2 stdout-empty stderr-nonempty "" "$(re_quote "$f")"
done
if [ "$n" -ge 40 ]; then ok "corpus holds $n files (>= 40)"; else not_ok "corpus holds $n files, expected >= 40"; fi

# All bad files at once: every one reported, nothing on stdout, still exit 2.
run check tests/data/bad/*
expect "check all bad files in one run" 2 stdout-empty stderr-nonempty "" "$n of $n files failed"

M=tests/data/tiny-gpt.json
C=topologies/dgx-a100-x1.json
S=strategies/data-parallel.json
NODIR="$TEST_TMP/no-such-folder"
mkdir "$TEST_TMP/adir"
# refused NAME STDERR-REGEX ARGS...: exit 2, nothing on stdout, the message on stderr.
refused() {
  local name=$1 re=$2
  shift 2
  run "$@"
  expect "$name" 2 stdout-empty stderr-nonempty "" "$re"
}

# JSON syntax errors: the line:column of the first offending character (columns count
# UTF-8 characters, not bytes) and what was expected there.
refused "a bare word where a key goes: its own column" \
  'key-not-quoted-after-member\.json:1:46: .*expected a string key in double quotes, found .x.' \
  check tests/data/bad/key-not-quoted-after-member.json
refused "the column counts UTF-8 characters" 'utf8-before-syntax-error\.json:1:56: ' \
  check tests/data/bad/utf8-before-syntax-error.json
refused "an unquoted key is reported where it starts" \
  "unquoted-key\.json:1:2: .*expected a string key in double quotes or '}', found 'format'" \
  check tests/data/bad/unquoted-key.json
refused "a trailing comma is named" "trailing-comma\.json:1:29: .*no comma before '}'" \
  check tests/data/bad/trailing-comma.json
refused "a truncated object: end of input, and what was expected" \
  "truncated-object\.json:4:1: .*unexpected end of input; expected ',' or '}'" \
  check tests/data/bad/truncated-object.json

# A directory where a JSON file is expected: exit 2, "is a directory" (it was exit 1,
# "read error"). /dev/stdin still reads; FIFOs are refused (hostile.sh).
dir_msg="adir: is a directory; expected a JSON file"
refused "check DIR" "$dir_msg" check "$TEST_TMP/adir"
refused "simulate with a directory as MODEL" "$dir_msg" simulate "$TEST_TMP/adir" "$C" "$S"
refused "simulate with a directory as CLUSTER" "$dir_msg" simulate "$M" "$TEST_TMP/adir" "$S"
refused "simulate with a directory as STRATEGY" "$dir_msg" simulate "$M" "$C" "$TEST_TMP/adir"
refused "--costdb DIR" "$dir_msg" simulate "$M" "$C" "$S" --costdb "$TEST_TMP/adir"
refused "plan --fix DIR" "$dir_msg" plan "$M" "$C" --fix "$TEST_TMP/adir"
refused "plan --init DIR" "$dir_msg" plan "$M" "$C" --search mcmc --init "$TEST_TMP/adir"
refused "export DIR" "$dir_msg" export "$TEST_TMP/adir" --format plansim
refused "sweep DIR" "$dir_msg" sweep "$TEST_TMP/adir" -o "$TEST_TMP/sw"
STATUS=0
"$PLANSIM" check /dev/stdin <"$M" >"$OUT" 2>"$ERR" || STATUS=$?
expect "check /dev/stdin still reads" 0 stdout-nonempty stderr-empty "/dev/stdin: ok"

# --budget: a whole number of evaluations >= 1 or a finite time with a unit; 0.5 ran the
# 60 s default, nan/inf/1e99 were undefined behaviour, infs ran forever.
for b in 0.5 0.0001 nan inf 1e99 infs 0 0s -5 0x10 5x; do
  PSIM_CLI_TIMEOUT=20 run plan "$M" "$C" --search mcmc --no-baselines --budget "$b"
  expect "--budget $b is refused" 2 stdout-empty stderr-nonempty "" "--budget '$b': "
done

# Output paths are checked before any work, with the path as given (not a temporary
# file), and a failed run leaves an existing output alone.
t0=$(date +%s)
refused "plan -o into a missing folder: refused before the search" \
  "-o $NODIR/p\.json: folder .* does not exist" \
  plan "$M" "$C" --search mcmc --budget 3s -o "$NODIR/p.json"
if [ $(($(date +%s) - t0)) -lt 3 ] && ! grep -q '\.tmp\.' "$ERR"; then
  ok "refused at once, naming the user's path"
else not_ok "refused at once, naming the user's path"; fi
refused "plan -o DIR" "-o $TEST_TMP/adir: is a directory; expected a file name" \
  plan "$M" "$C" -o "$TEST_TMP/adir"
refused 'plan -o ""' "-o: empty file name" plan "$M" "$C" -o ""
refused "plan --trace into a missing folder" "--trace $NODIR/t\.json: folder" \
  plan "$M" "$C" --trace "$NODIR/t.json"
refused "simulate --trace into a missing folder" "--trace $NODIR/t\.json: folder" \
  simulate "$M" "$C" "$S" --trace "$NODIR/t.json"
refused "simulate --trace DIR" "is a directory" simulate "$M" "$C" "$S" --trace "$TEST_TMP/adir"
refused "model -o into a missing folder" "-o $NODIR/m\.json: folder" model gpt -o "$NODIR/m.json"
refused "cluster -o DIR" "is a directory" cluster dgx-h100 -o "$TEST_TMP/adir"
refused "expand -o into a missing folder" "-o $NODIR/e\.json: folder" \
  expand "$M" "$C" "$S" -o "$NODIR/e.json"
refused "profile -o into a missing folder" "-o $NODIR/db\.json: folder" \
  profile --grid -o "$NODIR/db.json"
echo x >"$TEST_TMP/afile"
refused "sweep -o an existing file" "afile: exists and is not a folder" \
  sweep tests/sweeps/smoke.json -o "$TEST_TMP/afile"
refused "sweep -o in a missing folder" "folder .* does not exist" \
  sweep tests/sweeps/smoke.json -o "$NODIR/results"

run plan "$M" "$C" --search grid --no-baselines -o "$TEST_TMP/plan.json"
expect "a plan for the cases below" 0 stdout-nonempty any
refused "report -o into a missing folder" "-o $NODIR/r\.html: folder" \
  report "$TEST_TMP/plan.json" -o "$NODIR/r.html"
refused "export -o DIR" "is a directory" \
  export "$TEST_TMP/plan.json" --format megatron -o "$TEST_TMP/adir"
echo '{"old": true}' >"$TEST_TMP/keep.json"
refused "plan --trace into a missing folder with -o P" "--trace" \
  plan "$M" "$C" --search mcmc --budget 20 --trace "$NODIR/t.json" -o "$TEST_TMP/keep.json"
# A FIFO or device is written in place: renaming a temporary file over it replaced the
# node (as root, -o /dev/null replaced /dev/null with a regular file).
mkfifo "$TEST_TMP/fifo"
timeout 20 cat "$TEST_TMP/fifo" >"$TEST_TMP/fifo.out" &
run model mlp -o "$TEST_TMP/fifo"
wait
if [ "$STATUS" -eq 0 ] && [ -p "$TEST_TMP/fifo" ] && grep -q plansim.model/1 "$TEST_TMP/fifo.out"; then
  ok "-o FIFO writes into the FIFO, not over it"
  # only now (a plansim that renames over devices would replace /dev/full as root)
  run plan "$M" "$C" --search grid --no-baselines --trace /dev/full -o "$TEST_TMP/keep.json"
  expect "a trace that fails to write: exit 1" 1 any stderr-nonempty "" "/dev/full: write failed"
  if [ "$(cat "$TEST_TMP/keep.json")" = '{"old": true}' ]; then ok "a failed trace leaves the plan alone"
  else not_ok "a failed trace leaves the plan alone"; fi
else
  not_ok "-o FIFO writes into the FIFO, not over it"
fi

# Integer options: overflow (ERANGE) was read as the maximum.
refused "--seed overflow" "--seed wants a non-negative integer.*too large" \
  plan "$M" "$C" --seed 99999999999999999999999
refused "report --max-tasks overflow" "--max-tasks wants a positive integer.*too large" \
  report "$TEST_TMP/plan.json" --max-tasks 99999999999999999999 -o "$TEST_TMP/r.html"
refused "simulate --max-tasks overflow" "--max-tasks wants a positive integer" \
  simulate "$M" "$C" "$S" --max-tasks 99999999999999999999
refused "--threads 0" "--threads wants a positive integer from 1 to 256" plan "$M" "$C" --threads 0

# An explicit 0 for a quantity that must be positive (it read as "the default").
refused "cluster --nic-bandwidth 0" "--nic-bandwidth '0' is out of range" \
  cluster dgx-h100 --nodes 2 --nic-bandwidth 0
refused "model gpt --ffn 0" "--ffn wants a positive integer, not '0'" model gpt --ffn 0
refused "model llama --kv-heads 0" "--kv-heads wants a positive integer" model llama --kv-heads 0
refused "model moe --capacity-factor 0" "--capacity-factor wants a positive number" \
  model moe --capacity-factor 0

# Messages that said something else than the problem.
refused "--oversubscription 1e300 is out of range" "--oversubscription '1e300' is out of range" \
  cluster dgx-h100 --oversubscription 1e300
refused "export --format -o F: '-o' is not a format" "--format needs a value \('-o' is an option\)" \
  export "$TEST_TMP/plan.json" --format -o "$TEST_TMP/f.txt"
refused "cluster --bogus is an unknown option" "unknown option '--bogus'" cluster cpu --bogus
printf '{"format": "plansim.plan/1"}\n' >"$TEST_TMP/nostrategy.json"
refused "simulate a plan without a strategy" "nostrategy\.json: strategy: missing" \
  simulate "$M" "$C" "$TEST_TMP/nostrategy.json"

# Options a searcher or command ignores: a note on stderr, the run goes on.
# (the grid takes a time budget since issue 18; exhaustive search counts strategies)
run plan tests/data/mlp4.json tests/corpus/clusters/v100-pair.json --search exhaustive \
  --no-baselines --budget 5s
expect "a time --budget with exhaustive: a note" 0 stdout-nonempty stderr-nonempty "" \
  "note: a time --budget has no effect with --search exhaustive"
run plan "$M" "$C" --search grid --no-baselines --init "$S"
expect "--init with grid: a note" 0 stdout-nonempty stderr-nonempty "" \
  "note: --init has no effect with --search grid"
run plan "$M" "$C" --search alpa --no-baselines --init "$S" --budget 100
expect "--init and --budget with alpa: notes" 0 stdout-nonempty stderr-nonempty "" \
  "note: --budget has no effect with --search alpa"
if grep -q "note: --init has no effect with --search alpa" "$ERR"; then ok "both notes"
else not_ok "both notes"; fi
run cluster --list -o "$TEST_TMP/list.json"
expect "cluster --list -o F: a note" 0 stdout-nonempty stderr-nonempty "^dgx-a100-80g" \
  "note: --list only lists the presets"
if [ ! -e "$TEST_TMP/list.json" ]; then ok "cluster --list writes no file"
else not_ok "cluster --list writes no file"; fi
finish
