#!/usr/bin/env bash
# profile.sh - plansim profile end to end on this machine (issue 4): profile a
# tiny model's shard shapes on a cpu cluster, simulate with --costdb (every
# compute task is then measured: share > 0.5 in simulate --json), check the
# database, measure shared-memory all-reduce tables (--collectives), skip what
# is present on a second run, and --device cuda fails clearly without a GPU.
source "$(dirname "$0")/lib.bash"

MODEL="$ROOT/models/mlp.json"
CLUSTER="$ROOT/topologies/cpu-x4.json"
DB="$TEST_TMP/cpu.costdb.json"

run profile --device cpu --model "$MODEL" --cluster "$CLUSTER" --budget 0.005 -o "$DB"
expect "profile mlp on cpu-x4" 0 stdout-nonempty any 'measured [1-9][0-9]* shapes'

run simulate "$MODEL" "$CLUSTER" "$ROOT/strategies/data-parallel.json" --costdb "$DB" --json
expect "simulate --costdb --json" 0 stdout-nonempty any
if python3 - "$OUT" >"$TEST_TMP/check" 2>&1 <<'PY'; then
import json, sys
r = json.load(open(sys.argv[1]))
c = r["cost_sources"]
s = c["measured"] + c["interpolated"] + c["estimated"]
assert abs(s - 1) < 1e-9, "shares sum to %g" % s
assert c["measured"] > 0.5, "measured share %g" % c["measured"]
print("measured share %.2f" % c["measured"])
PY
  ok "cost_sources: $(cat "$TEST_TMP/check")"
else
  not_ok "cost_sources: measured share > 0.5" "$(cat "$TEST_TMP/check")"
fi

run check "$DB"
expect "check the cost database" 0 stdout-nonempty any 'ok \(cost database: [1-9][0-9]* entries'

run profile --device cpu --model "$MODEL" --cluster "$CLUSTER" --budget 0.005 -o "$DB"
expect "a second run skips every shape" 0 stdout-nonempty any 'measured 0 shapes.*skipped [1-9]'

# A profile killed with -9 leaves DB.lock behind (issue 24): the lock is flock(2) on that
# file, which the kernel releases with its holder, so the next run goes on. Simulated with
# a holder of the same lock killed with -9, and with a leftover lock file of other content.
if command -v flock >/dev/null; then
  flock "$DB.lock" sleep 60 &
  holder=$!
  sleep 0.3
  kill -KILL "$holder"
  wait "$holder" 2>/dev/null
  echo "12345 stale" >"$DB.lock"
  PSIM_CLI_TIMEOUT=60 run profile --device cpu --model "$MODEL" --cluster "$CLUSTER" --budget 0.005 -o "$DB"
  expect "profile after a holder of DB.lock was killed -9" 0 stdout-nonempty any 'measured'
else
  skip "profile after a holder of DB.lock was killed -9" "no flock(1)"
fi

run profile --collectives --cluster "$CLUSTER" --model "$MODEL" --budget 0.01 -o "$DB"
expect "profile --collectives" 0 stdout-nonempty any 'all-reduce tables for groups of 2'
if python3 - "$DB" >"$TEST_TMP/check" 2>&1 <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
t = [c for c in d["collectives"] if c["op"] == "all_reduce" and c["group_size"] == 2]
assert len(t) == 1, "tables %r" % d.get("collectives")
pts = t[0]["points"]
assert [p[0] for p in pts] == [65536, 1048576, 16777216], pts
assert all(p[1] > 0 for p in pts), pts
print("%d points" % len(pts))
PY
  ok "all-reduce table stored ($(cat "$TEST_TMP/check"))"
else
  not_ok "all-reduce table stored" "$(cat "$TEST_TMP/check")"
fi
run check "$DB"
expect "check the database with its collective table" 0 stdout-nonempty any '1 collective tables'

run profile --collectives --device cuda -o "$TEST_TMP/x.json"
expect "--collectives is CPU only" 2 any stderr-nonempty '' 'device cpu'

# The GPU profiler: without a GPU (or without CUDA in the build) it fails with
# status 1 and says why; with a GPU it is exercised elsewhere.
run profile --device cuda --grid --budget 0.001 -o "$TEST_TMP/cuda.json"
if [ "$STATUS" -eq 0 ]; then
  skip "--device cuda without a GPU" "a GPU is present"
else
  expect "--device cuda without a GPU fails clearly" 1 any stderr-nonempty '' \
    'no CUDA GPU|without CUDA'
fi

finish
