#!/usr/bin/env bash
# kill.sh - interruption and atomic outputs (issue 9). Runs are killed at random moments with
# SIGINT, SIGTERM and SIGKILL and their outputs checked:
#   - plan: exit 130 (SIGINT) / 143 (SIGTERM) / killed (SIGKILL); the plan file is absent or
#     complete: `plansim simulate MODEL CLUSTER PLAN` loads it and reproduces its prediction;
#     a plan interrupted after its first evaluations writes the best plan so far; so do
#     MCMC and exhaustive search interrupted at random moments;
#   - simulate --trace (a 4.7 MB trace): the trace is absent or complete JSON;
#   - profile: the cost database is absent or loads (`plansim check`); SIGINT keeps it;
#   - no temporary file is left beside an output after SIGINT/SIGTERM.
# Random moments come from PSIM_KILL_SEED (printed; set it to replay a run).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"

cd "$ROOT" || exit 1
SEED=${PSIM_KILL_SEED:-$(date +%s)}
RANDOM=$SEED
echo "# PSIM_KILL_SEED=$SEED"
T=$TEST_TMP
MODEL=models/gpt-1.3b.json
CLUSTER=topologies/dgx-a100-x1.json
# Sanitizer builds run several times slower: stretch the moments.
SLOW=${PSIM_KILL_SLOW:-1}
if [ "${PSIM_SANITIZED:-0}" = 1 ] || ldd "$PLANSIM" 2>/dev/null | grep -qE "libasan|libubsan"; then SLOW=2; fi

# Milliseconds to seconds for sleep, times SLOW.
secs() { awk -v ms="$1" -v k="$SLOW" 'BEGIN { printf "%.3f", ms * k / 1000 }'; }

# start ARGS...: plansim in the background, stdout/stderr to $OUT/$ERR; sets PID.
start() {
  "$PLANSIM" "$@" >"$OUT" 2>"$ERR" </dev/null &
  PID=$!
}

# stop SIG: sends SIG to PID and waits; sets STATUS (an exit that came first is kept).
stop() {
  kill -s "$1" "$PID" 2>/dev/null
  STATUS=0
  wait "$PID" 2>/dev/null || STATUS=$?
}

want_status() {
  case "$1" in INT) echo 130 ;; TERM) echo 143 ;; KILL) echo 137 ;; esac
}

# A plan file is complete when simulate reproduces the iteration time it records (and
# that time is not zero). plan_complete PLAN [MODEL CLUSTER]
plan_complete() {
  local plan=$1 model=${2:-$MODEL} cluster=${3:-$CLUSTER} want got
  want=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["prediction"]["iteration_time_s"]; assert t > 0; print(repr(t))' "$plan" 2>/dev/null) || return 1
  got=$("$PLANSIM" simulate "$model" "$cluster" "$plan" --json 2>/dev/null |
    python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["iteration_time_s"]))' 2>/dev/null) || return 1
  [ "$want" = "$got" ]
}

no_temp_files() { ! ls "$(dirname "$1")/.$(basename "$1")".?????? >/dev/null 2>&1; } # mkstemp's .NAME.XXXXXX

# plan killed at a random moment in [lo, hi) ms with each signal.
plan_case() {
  local sig=$1 lo=$2 hi=$3 ms plan want
  ms=$((lo + RANDOM % (hi - lo)))
  plan="$T/plan-$sig-$ms.json"
  start plan "$MODEL" "$CLUSTER" --search grid -o "$plan"
  sleep "$(secs "$ms")"
  stop "$sig"
  want=$(want_status "$sig")
  local why=()
  # A run that finished before the signal exits 0 (only when the machine is very fast).
  [ "$STATUS" -eq "$want" ] || [ "$STATUS" -eq 0 ] || why+=("exit $STATUS, expected $want")
  if [ -e "$plan" ] && ! plan_complete "$plan"; then why+=("plan file present but incomplete"); fi
  [ "$sig" = KILL ] || no_temp_files "$plan" || why+=("temporary file left beside the plan")
  sanitizer_report && why+=("sanitizer report")
  if [ "${#why[@]}" -eq 0 ]; then
    ok "plan SIG$sig after ${ms} ms: exit $STATUS, plan $([ -e "$plan" ] && echo complete || echo absent)"
  else not_ok "plan SIG$sig after ${ms} ms" "${why[@]}"; fi
}

for sig in INT TERM KILL INT; do
  plan_case "$sig" 50 2500
done

# Interrupted after several evaluations (each takes ~0.1-0.3 s): the best plan so far.
for sig in INT TERM; do
  plan="$T/best-$sig.json"
  start plan "$MODEL" "$CLUSTER" --search grid -o "$plan"
  sleep "$(secs 3000)"
  stop "$sig"
  if [ "$STATUS" -eq "$(want_status "$sig")" ] && plan_complete "$plan" &&
    grep -aq "best plan so far was written" "$ERR"; then
    ok "plan SIG$sig after 3 s writes the best plan so far, exit $STATUS"
  else
    not_ok "plan SIG$sig after 3 s writes the best plan so far" "exit $STATUS" \
      "plan $([ -e "$plan" ] && echo present || echo absent)"
  fi
done

# MCMC (two chains) and exhaustive search interrupted at a random moment: exit 130 and the
# best plan so far, complete, or no plan when nothing was costed yet (exit 130 all the same).
# An interrupt that lands inside a task-graph build stops the search there.
"$PLANSIM" cluster p100-nvlink --nodes 1 -o "$T/p100x1.json" >/dev/null
search_case() {
  local search=$1 model=$2 cluster=$3 budget=$4 ms plan
  ms=$((200 + RANDOM % 2300))
  plan="$T/$search-$ms.json"
  start plan "$model" "$cluster" --search "$search" --budget "$budget" --threads 2 --no-baselines -o "$plan"
  sleep "$(secs "$ms")"
  stop INT
  local why=()
  [ "$STATUS" -eq 130 ] || [ "$STATUS" -eq 0 ] || why+=("exit $STATUS, expected 130")
  if [ -e "$plan" ] && ! plan_complete "$plan" "$model" "$cluster"; then why+=("plan file present but incomplete"); fi
  [ -e "$plan" ] || grep -aq "interrupted" "$ERR" || why+=("no plan and no message")
  no_temp_files "$plan" || why+=("temporary file left beside the plan")
  sanitizer_report && why+=("sanitizer report")
  if [ "${#why[@]}" -eq 0 ]; then
    ok "plan --search $search SIGINT after ${ms} ms: exit $STATUS, plan $([ -e "$plan" ] && echo complete || echo absent)"
  else not_ok "plan --search $search SIGINT after ${ms} ms" "${why[@]}"; fi
}
for i in 1 2; do
  search_case mcmc models/alexnet.json topologies/p100-nvlink-x4.json 1000000
  search_case exhaustive tests/data/mlp4.json "$T/p100x1.json" 3000000
done

# simulate --trace: the trace is absent or complete JSON (the write is the long part).
for i in 1 2; do
  sig=$([ $((i % 2)) -eq 0 ] && echo KILL || echo TERM)
  ms=$((100 + RANDOM % 1400))
  trace="$T/trace-$i.json"
  start simulate "$MODEL" "$CLUSTER" strategies/explicit-2x4-pipeline.json --trace "$trace"
  sleep "$(secs "$ms")"
  stop "$sig"
  if [ ! -e "$trace" ] || python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$trace"; then
    ok "simulate --trace SIG$sig after ${ms} ms: trace $([ -e "$trace" ] && echo complete || echo absent) (exit $STATUS)"
  else
    not_ok "simulate --trace SIG$sig after ${ms} ms: truncated trace"
  fi
done

# profile: the cost database is absent or loads; SIGINT saves what was measured.
for sig in KILL INT TERM; do
  ms=$((300 + RANDOM % 2500))
  db="$T/db-$sig-$ms.json"
  start profile --grid --budget 0.001 -o "$db"
  sleep "$(secs "$ms")"
  stop "$sig"
  why=()
  if [ -e "$db" ] && ! "$PLANSIM" check "$db" >/dev/null 2>&1; then why+=("database present but does not load"); fi
  if [ "$sig" != KILL ]; then
    [ "$STATUS" -eq "$(want_status "$sig")" ] || why+=("exit $STATUS, expected $(want_status "$sig")")
    no_temp_files "$db" || why+=("temporary file left")
  fi
  if [ "${#why[@]}" -eq 0 ]; then
    ok "profile SIG$sig after ${ms} ms: database $([ -e "$db" ] && echo loads || echo absent) (exit $STATUS)"
  else not_ok "profile SIG$sig after ${ms} ms" "${why[@]}"; fi
done
finish
