#!/usr/bin/env bash
# valgrind.sh - valgrind memcheck of the CLI on a few commands (issue 9): plan (grid, with a
# trace; MCMC), simulate of that plan, profile of a tiny model, a one-case sweep (when built), check
# of the whole bad-input corpus, and the allocation-failure suite on a sample of its failure
# points. Each must finish with zero memcheck errors and zero leaks (definite, indirect or
# possible; "still reachable" blocks of the libraries' globals are not leaks).
# Skipped when valgrind is missing or plansim is a sanitizer build (the two do not mix).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"

cd "$ROOT" || exit 1
T=$TEST_TMP
if ! command -v valgrind >/dev/null 2>&1; then
  skip "valgrind memcheck" "valgrind not installed (scripts/setup installs it)"
  finish
  exit
fi
if ldd "$PLANSIM" 2>/dev/null | grep -qE 'libasan|libubsan'; then
  skip "valgrind memcheck" "sanitizer build: valgrind runs on the default build"
  finish
  exit
fi
export OPENBLAS_NUM_THREADS=1
VG=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=full
  --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible
  --track-origins=no --num-callers=30 --quiet --suppressions="$ROOT/tests/cli/valgrind.supp")

# vg NAME EXPECTED_STATUS EXE ARGS...: runs under memcheck; ok when the status is the
# expected one and memcheck reported nothing.
vg() {
  local name=$1 want=$2
  shift 2
  STATUS=0
  local t0=$SECONDS
  timeout 900 "${VG[@]}" --log-file="$T/vg.log" "$@" >"$OUT" 2>"$ERR" </dev/null || STATUS=$?
  local why=()
  [ "$STATUS" -eq "$want" ] || why+=("exit status $STATUS, expected $want (99: memcheck errors)")
  if grep -qE '(definitely|indirectly|possibly) lost: [1-9]|ERROR SUMMARY: [1-9]|Invalid|uninitialised' "$T/vg.log"; then
    why+=("memcheck: $(grep -E 'lost:|ERROR SUMMARY|Invalid|uninit' "$T/vg.log" | head -n 5 | tr '\n' ' ')")
  fi
  if [ "${#why[@]}" -eq 0 ]; then ok "$name ($((SECONDS - t0)) s)"; else
    not_ok "$name" "${why[@]}"
    head -n 60 "$T/vg.log" | sed 's/^/#     /'
  fi
}

MODEL=tests/data/tiny-gpt.json
CLUSTER=topologies/dgx-a100-x1.json
# Few invocations: each one pays valgrind's start-up (about 25 s on a CUDA build, which loads
# cuBLAS). The bad-input corpus and the refused limits run under ASan + LSan in scripts/test.
vg "memcheck: plan --search grid -o --trace" 0 "$PLANSIM" plan "$MODEL" "$CLUSTER" --search grid \
  --budget 8 -o "$T/plan.json" --trace "$T/plan.trace"
# MCMC: incremental delta builds (segments copied from the last graph, recycled buffers)
vg "memcheck: plan --search mcmc (delta simulation)" 0 "$PLANSIM" plan "$MODEL" "$CLUSTER" \
  --search mcmc --budget 60 --seed 2 -o "$T/mcmc.json"
vg "memcheck: profile of a tiny model" 0 "$PLANSIM" profile --model tests/data/sim-chain.json \
  --cluster tests/data/sim-fast4.json --budget 0.0002 --max-flops 1e6 -o "$T/db.json"
vg "memcheck: simulate PLAN --costdb --json --trace" 0 "$PLANSIM" simulate "$MODEL" "$CLUSTER" \
  "$T/plan.json" --costdb "$T/db.json" --json --trace "$T/sim.trace"
if "$PLANSIM" help sweep 2>/dev/null | grep -q cartesian; then
  cat >"$T/sweep.json" <<JSON
{"format": "plansim.sweep/1", "name": "vg",
 "models": ["$ROOT/$MODEL"], "clusters": ["$ROOT/$CLUSTER"], "searchers": ["grid"],
 "budgets": ["4"]}
JSON
  vg "memcheck: sweep of one case" 0 "$PLANSIM" sweep "$T/sweep.json" -o "$T/sweep"
else
  skip "memcheck: sweep" "sweep not built yet"
fi
ALLOCFAIL=$(dirname "$PLANSIM")/../tests/unit/test_allocfail
if [ -x "$ALLOCFAIL" ]; then
  # (variables before a function call reach the commands it runs; `env` would be what
  # valgrind watches, not the suite)
  PSIM_ALLOCFAIL_POINTS=30 CK_FORK=no vg "memcheck: allocation-failure suite (30 failure points \
each)" 0 "$ALLOCFAIL"
else
  skip "memcheck: allocation-failure suite" "test_allocfail not built"
fi
finish
