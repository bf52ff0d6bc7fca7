#!/usr/bin/env bash
# hostile.sh - hostile and careless inputs (issue 24): names that try to inject shell or
# escape a quoted string in an exported configuration, a symlink planted where plansim
# writes its temporary file, an output that is one of the inputs, FIFOs, standard output
# on a full device, control characters printed to a terminal. Each case failed on the
# main of issue 24. docs/reliability.md gives the threat model.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1
T=$TEST_TMP
MODEL=tests/data/tiny-gpt.json
CLUSTER=topologies/dgx-a100-x1.json
STRATEGY=strategies/data-parallel.json
PLAN=tests/golden/export/tp2-pp2-dp2.plan.json

# ---- the temporary output file (a planted symlink, permissions) ----
echo "precious" >"$T/victim"
# exec keeps the shell's PID, the one the old temporary name "out.json.tmp.PID" used
(cd "$T" && bash -c 'ln -s victim "out.json.tmp.$$"; exec "$0" cluster cpu -o out.json' \
  "$PLANSIM" >"$OUT" 2>"$ERR") && STATUS=0 || STATUS=$?
expect "a symlink at the old temporary name: cluster -o exits 0" 0
if [ "$(cat "$T/victim")" = precious ]; then ok "the symlink's target is not overwritten"
else not_ok "the symlink's target is not overwritten" "victim now: $(head -c 80 "$T/victim")"; fi
if [ -f "$T/out.json" ] && [ ! -L "$T/out.json" ]; then ok "the output is a regular file"
else not_ok "the output is a regular file" "$(ls -l "$T/out.json")"; fi
if ls -a "$T" | grep -q '^\.out\.json\.'; then not_ok "no temporary file is left beside it"
else ok "no temporary file is left beside it"; fi

chmod 600 "$T/out.json"
run cluster cpu -o "$T/out.json"
expect "rewriting a 0600 output exits 0" 0
mode=$(stat -c %a "$T/out.json")
if [ "$mode" = 600 ]; then ok "a replaced output keeps its permissions (0600)"
else not_ok "a replaced output keeps its permissions (0600)" "mode $mode"; fi
(umask 077 && "$PLANSIM" cluster cpu -o "$T/new.json" >"$OUT" 2>"$ERR")
mode=$(stat -c %a "$T/new.json")
if [ "$mode" = 600 ]; then ok "a new output follows the umask (077: 0600)"
else not_ok "a new output follows the umask (077: 0600)" "mode $mode"; fi

# ---- an output that is an input, or two outputs that are one file ----
cp "$MODEL" "$T/m.json"
cp "$CLUSTER" "$T/c.json"
cp "$PLAN" "$T/p.json"
ln "$T/m.json" "$T/hard.json"
ln -s m.json "$T/soft.json"
sum_before=$(cat "$T/m.json" "$T/p.json" | md5sum)
same() { # same NAME ARGS...: refused with exit 2 naming the clash
  local name=$1
  shift
  run "$@"
  expect "$name is refused" 2 stdout-empty stderr-nonempty "" "is the input|are one file"
}
same "plan -o MODEL" plan "$T/m.json" "$T/c.json" -o "$T/m.json" --search grid \
  --no-baselines
same "plan -o CLUSTER (another spelling)" plan "$T/m.json" "$T/c.json" -o "$T/./c.json" \
  --search grid --no-baselines
same "plan -o X --trace X" plan "$T/m.json" "$T/c.json" -o "$T/x.json" --trace "$T/x.json" \
  --search grid --no-baselines
same "simulate --trace MODEL (a hard link)" simulate "$T/m.json" "$T/c.json" "$STRATEGY" \
  --trace "$T/hard.json"
same "simulate --trace MODEL (a symlink)" simulate "$T/m.json" "$T/c.json" "$STRATEGY" \
  --trace "$T/soft.json"
same "expand -o MODEL" expand "$T/m.json" "$T/c.json" "$STRATEGY" -o "$T/m.json"
same "report P -o P" report "$T/p.json" -o "$T/p.json" --model "$T/m.json" --cluster "$T/c.json"
same "report -o MODEL" report "$T/p.json" -o "$T/m.json" --model "$T/m.json" --cluster "$T/c.json"
same "export P -o P" export "$T/p.json" --format megatron -o "$T/p.json"
same "export -o MODEL" export "$T/p.json" --format megatron --model "$T/m.json" \
  --cluster "$T/c.json" -o "$T/hard.json"
if [ "$(cat "$T/m.json" "$T/p.json" | md5sum)" = "$sum_before" ]; then
  ok "no input was changed"
else not_ok "no input was changed"; fi
run simulate "$T/m.json" "$T/c.json" "$STRATEGY" --trace /dev/null
expect "an output to /dev/null is not an input" 0
run export "$T/p.json" --format megatron --model "$T/m.json" --cluster "$T/c.json" -o "$T/e.sh"
expect "export to a new file beside the inputs exits 0" 0

# ---- names that try to inject into an exported configuration or a terminal ----
renamed() { # renamed OUT MODEL-NAME [OP-NAME]: tiny-gpt renamed (its op 'embed' too)
  python3 - "$MODEL" "$1" "$2" "${3:-embed}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = sys.argv[3]
for op in m["ops"]:
    if op.get("name") == "embed":
        op["name"] = sys.argv[4]
json.dump(m, open(sys.argv[2], "w"))
PY
}
renamed "$T/inject.json" $'x\necho INJECTED; #'
run export "$PLAN" --format megatron --model "$T/inject.json" --cluster "$CLUSTER" -o "$T/inj.sh"
expect "megatron export of a model named 'x\\necho INJECTED; #' is refused" 2 stdout-empty \
  stderr-nonempty "" "control character"
if [ -e "$T/inj.sh" ]; then not_ok "no script is written for it"; else ok "no script is written for it"; fi
for f in deepspeed gspmd flexflow plansim; do
  run export "$PLAN" --format "$f" --model "$T/inject.json" --cluster "$CLUSTER"
  expect "$f export of a name with a newline is refused" 2 stdout-empty stderr-nonempty
done
renamed "$T/quote.json" "it's a \"model\" \$(echo INJECTED)" 'em"bed\'
run export "$PLAN" --format megatron --model "$T/quote.json" --cluster "$CLUSTER" -o "$T/q.sh"
expect "megatron export of a name with quotes and \$( ) exits 0" 0
if (cd "$T" && bash -c 'source ./q.sh && echo "${#MEGATRON_ARGS[@]}"') >"$T/q.out" 2>&1 &&
  ! grep -q INJECTED "$T/q.out"; then ok "sourcing the script runs nothing from the name"
else not_ok "sourcing the script runs nothing from the name" "$(head -3 "$T/q.out")"; fi
run export tests/golden/export/dp8.plan.json --format flexflow --model "$T/quote.json" \
  --cluster "$CLUSTER"
expect "flexflow export (dropped: nothing reads it) is refused" 2 stdout-empty stderr-nonempty "" \
  "no current FlexFlow release"
renamed "$T/esc.json" $'bad\e[2Jname'
run check "$T/esc.json"
expect "check prints an ESC in a name escaped" 0 stdout-nonempty "" 'bad\\x1b\[2Jname'
if grep -q $'\e' "$OUT"; then not_ok "check writes no raw ESC"; else ok "check writes no raw ESC"; fi
run simulate "$T/esc.json" "$CLUSTER" "$STRATEGY"
expect "simulate prints an ESC in a name escaped" 0 stdout-nonempty "" 'bad\\x1b\[2Jname'
if grep -q $'\e' "$OUT"; then not_ok "simulate writes no raw ESC"; else ok "simulate writes no raw ESC"; fi

run check tests/data/bad/model-name-invalid-utf8.json
expect "a model name that is not UTF-8 is refused at load" 2 stdout-empty stderr-nonempty "" \
  'name: expected UTF-8 text, found byte 0xe9 at offset 10'
# A NUL, escaped or raw, is refused where it stands: cJSON put an escaped one into the C
# string, which ended there ("tiny\u0000gpt" was the model "tiny"; a format with a NUL
# and junk after it matched; a key "description\u0000..." was "description").
run check tests/data/bad/model-name-nul-escape.json
expect "a name with an escaped NUL is refused, not cut" 2 stdout-empty stderr-nonempty "" \
  'model-name-nul-escape\.json:1:44: a NUL character \(\\u0000\) in a string'
run check tests/data/bad/format-nul-escape-suffix.json
expect "a format string with an escaped NUL and more is refused" 2 stdout-empty \
  stderr-nonempty "" 'format-nul-escape-suffix\.json:2:32: a NUL character'
run check tests/data/bad/model-key-nul-escape.json
expect "a key with an escaped NUL is refused" 2 stdout-empty stderr-nonempty "" \
  'model-key-nul-escape\.json:1:[0-9]+: a NUL character'
run check tests/data/bad/escape-bad-hex-reads-as-nul.json
expect "a \\u escape without 4 hex digits (cJSON reads it as NUL) is refused" 2 stdout-empty \
  stderr-nonempty "" "escape-bad-hex-reads-as-nul\\.json:1:31: .*expected a \\\\u escape with 4 hex digits, found '\\\\uzzzz'"
run check tests/data/bad/nul-byte-in-string.json
expect "a raw NUL byte is refused with its line and column" 2 stdout-empty stderr-nonempty "" \
  'nul-byte-in-string\.json:3:15: a NUL byte'
printf '{"format": "plansim.strategy/1", "description": "a \\\\u0000 is text"}' >"$T/esc-bs.json"
run check "$T/esc-bs.json"
expect "an escaped backslash before u0000 is text, not a NUL" 0 stdout-nonempty

# ---- a plan whose model_file is not JSON: its bytes never reach a message ----
python3 - "$PLAN" "$T/leak.plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["model_file"] = "secret"
json.dump(p, open(sys.argv[2], "w"))
PY
cp tests/data/bad/not-json-token.json "$T/secret"
run export "$T/leak.plan.json" --format megatron --cluster "$CLUSTER"
expect "a plan whose model_file is a token file is refused" 2 stdout-empty stderr-nonempty "" \
  'secret:1:1: .*not a JSON file'
if grep -q ghp_ "$ERR"; then not_ok "the message does not quote the file's bytes"
else ok "the message does not quote the file's bytes"; fi

# ---- FIFOs: an output FIFO is written in place; the same-file check does not open it ----
mkfifo "$T/fifo"
cat "$T/fifo" >"$T/from-fifo" &
reader=$!
run simulate "$T/m.json" "$T/c.json" "$STRATEGY" --trace "$T/fifo"
wait "$reader"
expect "simulate --trace FIFO exits 0" 0
if [ -p "$T/fifo" ] && grep -q traceEvents "$T/from-fifo"; then
  ok "the trace went through the FIFO, which is still a FIFO"
else not_ok "the trace went through the FIFO, which is still a FIFO"; fi

# ---- FIFOs and devices as inputs: refused at once (exit 2, the path), never read ----
# A FIFO named as a model, or recorded as a plan's model_file, blocked report and export
# forever (open waits for a writer); a sweep case with it blocked and was then recorded
# as a failure that --resume kept.
mkfifo "$T/model-fifo"
PSIM_CLI_TIMEOUT=20 run check "$T/model-fifo"
expect "check FIFO is refused" 2 stdout-empty stderr-nonempty "" 'model-fifo: is a FIFO'
PSIM_CLI_TIMEOUT=20 run simulate "$T/model-fifo" "$CLUSTER" "$STRATEGY"
expect "simulate with a FIFO as MODEL is refused" 2 stdout-empty stderr-nonempty "" \
  'model-fifo: is a FIFO'
PSIM_CLI_TIMEOUT=20 run check /dev/zero
expect "check /dev/zero is refused" 2 stdout-empty stderr-nonempty "" \
  '/dev/zero: is a character device'
python3 - "$PLAN" "$T/fifo.plan.json" "$T/model-fifo" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["model_file"] = sys.argv[3]
json.dump(p, open(sys.argv[2], "w"))
PY
PSIM_CLI_TIMEOUT=20 run report "$T/fifo.plan.json" -o "$T/fifo-report.html"
expect "report of a plan whose model_file is a FIFO is refused" 2 any stderr-nonempty "" \
  'model-fifo: is a FIFO'
PSIM_CLI_TIMEOUT=20 run export "$T/fifo.plan.json" --format megatron --cluster "$CLUSTER"
expect "export of a plan whose model_file is a FIFO is refused" 2 stdout-empty stderr-nonempty \
  "" 'model-fifo: is a FIFO'

# ---- absurdly small rates: refused at load, naming the file and key ----
# A bandwidth of 4.9e-324 (the smallest denormal) passed check and failed later with
# "duration inf" naming no file.
python3 - "$CLUSTER" "$T/denormal-bw.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["intra_node"]["bandwidth"] = 4.9e-324
json.dump(c, open(sys.argv[2], "w"))
PY
run check "$T/denormal-bw.json"
expect "check of a 4.9e-324 bandwidth is refused" 2 stdout-empty stderr-nonempty "" \
  'denormal-bw\.json: intra_node\.bandwidth: .*at least 1'
run simulate "$MODEL" "$T/denormal-bw.json" "$STRATEGY"
expect "simulate with a 4.9e-324 bandwidth is refused" 2 stdout-empty stderr-nonempty "" \
  'denormal-bw\.json: intra_node\.bandwidth'

# ---- a plan made for another model: refused, naming both models ----
# report --model OTHER and simulate OTHER CLUSTER PLAN went on without a word.
run plan "$MODEL" "$CLUSTER" --search grid --no-baselines -o "$T/own.plan.json"
expect "a plan of tiny-gpt" 0
python3 - "$MODEL" "$T/other-model.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "other-gpt" # the same ops: only the recorded name tells the models apart
json.dump(m, open(sys.argv[2], "w"))
PY
run report "$T/own.plan.json" --model "$T/other-model.json" -o "$T/other.html"
expect "report of a plan with another model is refused" 2 any stderr-nonempty "" \
  "own\.plan\.json: model: the plan was made for model 'tiny-gpt', not for 'other-gpt'"
run simulate "$T/other-model.json" "$CLUSTER" "$T/own.plan.json"
expect "simulate of a plan with another model is refused" 2 stdout-empty stderr-nonempty "" \
  "made for model 'tiny-gpt', not for 'other-gpt'"
run export "$T/own.plan.json" --format megatron --model "$T/other-model.json"
expect "export of a plan with another model is refused" 2 stdout-empty stderr-nonempty "" \
  "made for model 'tiny-gpt', not for 'other-gpt'"
run simulate "$MODEL" "$CLUSTER" "$T/own.plan.json"
expect "simulate of a plan with its own model still runs" 0 stdout-nonempty

# ---- standard output on a full device ----
full() { # full NAME ARGS...: stdout on /dev/full exits 1 with a message
  local name=$1
  shift
  STATUS=0
  timeout 120 "$PLANSIM" "$@" >/dev/full 2>"$ERR" </dev/null || STATUS=$?
  : >"$OUT"
  expect "$name with standard output on /dev/full exits 1" 1 any stderr-nonempty "" \
    "standard output"
}
if [ -w /dev/full ]; then
  full "simulate --json" simulate "$MODEL" "$CLUSTER" "$STRATEGY" --json
  full "simulate" simulate "$MODEL" "$CLUSTER" "$STRATEGY"
  full "plan --json" plan "$MODEL" "$CLUSTER" --search grid --no-baselines --json
  full "plan (summary)" plan "$MODEL" "$CLUSTER" --search grid --no-baselines
  full "expand" expand "$MODEL" "$CLUSTER" "$STRATEGY"
  full "cluster" cluster cpu
  full "check" check "$MODEL"
  full "export" export "$PLAN" --format megatron
  full "--help" --help
else
  skip "standard output on /dev/full" "no writable /dev/full"
fi

finish
