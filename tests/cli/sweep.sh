#!/usr/bin/env bash
# sweep.sh - plansim sweep over tests/sweeps/smoke.json: rows, failing cases, -j 2, a run
# killed with SIGKILL and resumed, a truncated last line, MPI (mpirun -n 2) when built with
# it, and --check against a baseline. Rows are compared without search_wall_s, the one
# column that differs between identical runs.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1
SWEEP=tests/sweeps/smoke.json
N_CASES=9 # 3 models x 3 clusters (a file, and a preset with 1 and 2 nodes) x 1 searcher

# rows DIR: the results rows without search_wall_s, one JSON object per line, sorted.
rows() {
  python3 -c 'import json,sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/results.jsonl")]
for r in rows: r.pop("search_wall_s")
print("\n".join(sorted(json.dumps(r, sort_keys=True) for r in rows)))' "$1"
}
same_rows() { # same_rows NAME DIR_A DIR_B
  if diff <(rows "$2") <(rows "$3") >"$TEST_TMP/rows.diff"; then ok "$1"
  else not_ok "$1" "$(head -10 "$TEST_TMP/rows.diff")"; fi
}

run sweep "$SWEEP" -o "$TEST_TMP/seq"
expect "sweep -j 1 runs every case" 0 stdout-nonempty any "9 cases \(0 resumed, 9 run, 3 failed\)"
lines=$(wc -l <"$TEST_TMP/seq/results.jsonl")
csv=$(wc -l <"$TEST_TMP/seq/results.csv")
if [ "$lines" -eq "$N_CASES" ] && [ "$csv" -eq $((N_CASES + 1)) ]; then ok "one row per case in JSONL and CSV"
else not_ok "one row per case in JSONL and CSV" "jsonl $lines, csv $csv"; fi
if head -1 "$TEST_TMP/seq/results.csv" | grep -q '^case,key,model,cluster,devices,searcher,seed,budget,status,error,iteration_time_s,samples_per_s,tokens_per_s,mfu,peak_memory_bytes,fits,evaluations,plan,search_wall_s$'; then
  ok "CSV header"; else not_ok "CSV header"; fi
python3 - "$TEST_TMP/seq" <<'PY' >"$TEST_TMP/check.log" 2>&1
import csv, json, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(d + "/results.jsonl")]
assert [r["case"] for r in rows] == list(range(9)), "rows sorted by case"
by = {(r["model"], r["cluster"]): r for r in rows}
for r in rows:
    if r["model"] == "broken":
        assert r["status"] == "failed" and "not a multiple" in r["error"], r
        assert r["iteration_time_s"] is None and r["plan"] == "", r
        continue
    assert r["status"] == "ok", r
    plan = json.load(open(os.path.join(d, r["plan"])))
    # the row repeats the plan's prediction
    assert abs(plan["prediction"]["iteration_time_s"] - r["iteration_time_s"]) <= 1e-8 * r["iteration_time_s"]
    # devices of the presets: DGX H100 = 8 GPUs per node
    want = {"dgx-a100-x1": 8, "dgx-h100-x1": 8, "dgx-h100-x2": 16}[r["cluster"]]
    assert r["devices"] == want, r
    # throughput = batch / iteration time (tiny-gpt batch 8, gpt-mini batch 32)
    batch = {"tiny-gpt": 8, "gpt-mini": 32}[r["model"]]
    assert abs(r["samples_per_s"] * r["iteration_time_s"] - batch) < 1e-6 * batch, r
csv_rows = list(csv.DictReader(open(d + "/results.csv")))
assert [int(c["case"]) for c in csv_rows] == list(range(9))
assert all(c["key"] == r["key"] and c["status"] == r["status"] for c, r in zip(csv_rows, rows))
PY
if [ $? -eq 0 ]; then ok "rows: failures recorded, figures match the plans"
else not_ok "rows: failures recorded, figures match the plans" "$(tail -5 "$TEST_TMP/check.log")"; fi
run export "$TEST_TMP/seq/plans/case0003.json" --format megatron
expect "a sweep's plan (generated model) exports" 0 stdout-nonempty stderr-empty "num-layers 4$"

run sweep "$SWEEP" -o "$TEST_TMP/par" -j 2
expect "sweep -j 2" 0 stdout-nonempty any "9 run"
same_rows "-j 2 gives the rows of -j 1" "$TEST_TMP/seq" "$TEST_TMP/par"

# SIGKILL in the middle, then --resume: no case lost, none duplicated.
"$PLANSIM" sweep "$SWEEP" -o "$TEST_TMP/kill" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 400); do
  [ -f "$TEST_TMP/kill/results.jsonl" ] && [ "$(wc -l <"$TEST_TMP/kill/results.jsonl")" -ge 2 ] && break
  sleep 0.02
done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
before=$(wc -l <"$TEST_TMP/kill/results.jsonl")
if [ "$before" -lt "$N_CASES" ]; then ok "the killed sweep stopped part-way ($before rows)"
else skip "the killed sweep stopped part-way" "it finished before the kill"; fi
printf '{"case": 8, "key": "model=broken clus' >>"$TEST_TMP/kill/results.jsonl" # a cut last line
run sweep "$SWEEP" -o "$TEST_TMP/kill" --resume
expect "--resume after SIGKILL" 0 stdout-nonempty any "9 cases \($before resumed"
same_rows "resumed rows equal an uninterrupted run's" "$TEST_TMP/seq" "$TEST_TMP/kill"
run sweep "$SWEEP" -o "$TEST_TMP/kill" --resume
expect "--resume of a finished sweep runs nothing" 0 stdout-nonempty any "9 resumed, 0 run"
same_rows "and duplicates nothing" "$TEST_TMP/seq" "$TEST_TMP/kill"

# SIGTERM sent to the sweep alone (kill PID, a scheduler) stops it at once: the running
# cases (their own processes) are told too, record no row, and --resume runs them. On the
# main of issue 24 the cases ran their whole 60 s budgets after the first SIGTERM.
cat >"$TEST_TMP/long.json" <<EOF
{"format": "plansim.sweep/1", "name": "long", "models": ["$ROOT/tests/data/tiny-gpt.json"],
 "clusters": ["$ROOT/topologies/dgx-a100-x1.json"], "searchers": ["mcmc"],
 "seeds": [1, 2], "budgets": ["60s"]}
EOF
"$PLANSIM" sweep "$TEST_TMP/long.json" -o "$TEST_TMP/term" -j 2 >/dev/null 2>"$TEST_TMP/term.err" &
pid=$!
sleep 2
start=$SECONDS
kill -TERM "$pid"
STATUS=0
wait "$pid" || STATUS=$?
took=$((SECONDS - start))
if [ "$STATUS" -eq 143 ] && [ "$took" -le 10 ]; then ok "the first SIGTERM stops a running sweep (${took} s, exit 143)"
else not_ok "the first SIGTERM stops a running sweep" "exit $STATUS after $took s"; fi
rows_left=$(cat "$TEST_TMP/term/results.jsonl" 2>/dev/null | wc -l)
if [ "$rows_left" -eq 0 ]; then ok "the interrupted cases record no row"
else not_ok "the interrupted cases record no row" "$(head -c 300 "$TEST_TMP/term/results.jsonl")"; fi
# A FIFO named as a sweep's model: the case fails at once naming it (it blocked forever).
mkfifo "$TEST_TMP/fifo-model.json"
cat >"$TEST_TMP/fifo-sweep.json" <<EOF
{"format": "plansim.sweep/1", "name": "fifo", "models": ["$TEST_TMP/fifo-model.json"],
 "clusters": ["$ROOT/topologies/dgx-a100-x1.json"], "searchers": ["grid"]}
EOF
PSIM_CLI_TIMEOUT=30 run sweep "$TEST_TMP/fifo-sweep.json" -o "$TEST_TMP/fifo-out"
if [ "$STATUS" -eq 0 ] && grep -q 'fifo-model.json: is a FIFO' "$TEST_TMP/fifo-out/results.jsonl"; then
  ok "a FIFO as a sweep's model fails its case at once, naming it"
else not_ok "a FIFO as a sweep's model fails its case at once, naming it" "exit $STATUS: $(cat "$ERR")"; fi

# A sweep folder reused without --resume: the earlier sweep's case plans are removed (they
# stood beside the new results, named by no row); other files stay.
cp -r "$TEST_TMP/seq" "$TEST_TMP/reuse"
echo keep >"$TEST_TMP/reuse/plans/notes.txt"
cat >"$TEST_TMP/one.json" <<EOF
{"format": "plansim.sweep/1", "name": "one", "models": ["$ROOT/tests/data/tiny-gpt.json"],
 "clusters": ["$ROOT/topologies/dgx-a100-x1.json"], "searchers": ["grid"]}
EOF
run sweep "$TEST_TMP/one.json" -o "$TEST_TMP/reuse"
expect "a one-case sweep into a used folder" 0 stdout-nonempty any "1 cases \(0 resumed, 1 run"
named=$(python3 -c 'import json,sys; print(" ".join(sorted(json.loads(l)["plan"] for l in open(sys.argv[1]) if json.loads(l)["plan"])))' "$TEST_TMP/reuse/results.jsonl")
present=$(cd "$TEST_TMP/reuse" && ls plans/case*.json | sort | tr '\n' ' ' | sed 's/ $//')
if [ "$named" = "$present" ] && [ -f "$TEST_TMP/reuse/plans/notes.txt" ]; then
  ok "only this sweep's plans remain ($present); other files stay"
else not_ok "only this sweep's plans remain" "rows name '$named', plans/ holds '$present'"; fi

# MPI: rank 0 hands out cases, rank 1 runs them.
if ! command -v mpirun >/dev/null; then
  skip "mpirun -n 2 gives the rows of -j 1" "mpirun is not installed"
elif ! grep -q 'PSIM_HAVE_MPI 1' "$(dirname "$PLANSIM")/../psim_config.h" 2>/dev/null; then
  skip "mpirun -n 2 gives the rows of -j 1" "plansim was built without MPI"
else
  STATUS=0
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 120 mpirun --allow-run-as-root \
    --oversubscribe -n 2 "$PLANSIM" sweep "$SWEEP" -o "$TEST_TMP/mpi" >"$OUT" 2>"$ERR" || STATUS=$?
  expect "mpirun -n 2 sweep" 0 stdout-nonempty any "9 run"
  same_rows "mpirun -n 2 gives the rows of -j 1" "$TEST_TMP/seq" "$TEST_TMP/mpi"
fi

# --check: the same results pass; a baseline that was faster fails.
run sweep "$SWEEP" -o "$TEST_TMP/seq" --check "$TEST_TMP/par"
expect "--check against identical results passes" 0 stdout-nonempty any "0 regressions"
python3 - "$TEST_TMP/par/results.jsonl" "$TEST_TMP/fast.jsonl" <<'PY'
import json, sys
out = open(sys.argv[2], "w")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["case"] == 3:
        r["iteration_time_s"] *= 0.9   # the baseline was 10% faster
    out.write(json.dumps(r) + "\n")
PY
run sweep "$SWEEP" -o "$TEST_TMP/seq" --resume --check "$TEST_TMP/fast.jsonl" --tolerance 0.05
expect "--check fails on a 10% slower case (tolerance 5%)" 1 stdout-nonempty stderr-nonempty \
  "regression: model=gpt-mini cluster=dgx-a100-x1 .*iteration time" "1 regressions"
run sweep "$SWEEP" -o "$TEST_TMP/seq" --resume --check "$TEST_TMP/fast.jsonl" --tolerance 0.2
expect "--check passes within a 20% tolerance" 0 stdout-nonempty any "0 regressions"

# Bad input.
run sweep tests/data/tiny-gpt.json
expect "a model is not a sweep" 2 stdout-empty stderr-nonempty "" "plansim.sweep/1"
printf '{"format": "plansim.sweep/1", "models": ["m.json"], "clusters": [{"preset": "nope"}]}\n' >"$TEST_TMP/bad.json"
run sweep "$TEST_TMP/bad.json"
expect "an unknown preset names the path" 2 stdout-empty stderr-nonempty "" "clusters\[0\].*unknown preset 'nope'"
printf '{"format": "plansim.sweep/1", "models": ["m.json"], "clusters": ["c.json"], "searchers": ["magic"]}\n' >"$TEST_TMP/bad.json"
run sweep "$TEST_TMP/bad.json"
expect "an unknown searcher" 2 stdout-empty stderr-nonempty "" "unknown searcher 'magic'"
run sweep "$SWEEP" -j 0
expect "-j 0 is a usage error" 2 stdout-empty stderr-nonempty "" "-j"
# Budgets: whole evaluations >= 1 or a finite time with a unit, refused with their JSON
# path before any case runs ("0.5" ran the searcher's default, 1e99 overflowed int64_t).
for b in '"0.5"' '"1e99"' '0.5' '"infs"' '"nan"' '"0s"'; do
  printf '{"format": "plansim.sweep/1", "models": ["m.json"], "clusters": ["c.json"], "budgets": ["2000", %s]}\n' \
    "$b" >"$TEST_TMP/bad.json"
  run sweep "$TEST_TMP/bad.json" -o "$TEST_TMP/badbudget"
  expect "budget $b is refused with its path" 2 stdout-empty stderr-nonempty "" "bad\.json: budgets\[1\]: '"
done
if [ ! -e "$TEST_TMP/badbudget" ]; then ok "no results folder for a refused sweep"
else not_ok "no results folder for a refused sweep"; fi
# Generator options are read through the model-family registry (models/registry.c), as
# `plansim model` reads them: an option of 0 (it read as the default: ffn 0 gave 4*hidden),
# an option the family does not take ("experts" on gpt ran and was ignored, while `model gpt
# --experts 8` exits 2) and a wrong type are refused with their path before any case runs.
gen_sweep() { # gen_sweep FAMILY OPTIONS-JSON
  printf '{"format": "plansim.sweep/1", "models": [{"name": "z", "generator": "%s", "options": %s}], "clusters": ["%s/topologies/dgx-a100-x1.json"]}\n' \
    "$1" "$2" "$ROOT" >"$TEST_TMP/gen.json"
}
gen_sweep gpt '{"layers": 2, "hidden": 64, "heads": 4, "seq": 32, "vocab": 128, "batch": 8, "ffn": 0}'
run sweep "$TEST_TMP/gen.json" -o "$TEST_TMP/ffn0"
expect "generator option ffn 0 is refused with its path" 2 stdout-empty stderr-nonempty "" \
  "gen\.json: models\[0\]\.options\.ffn: option 'ffn' must be a positive integer"
gen_sweep gpt '{"layers": 2, "experts": 8}'
run sweep "$TEST_TMP/gen.json" -o "$TEST_TMP/experts"
expect "experts on gpt: refused as 'plansim model gpt --experts 8' is" 2 stdout-empty stderr-nonempty "" \
  "models\[0\]\.options\.experts: unknown option 'experts' for gpt"
run model gpt --experts 8
expect "plansim model gpt --experts 8: the same refusal" 2 stdout-empty stderr-nonempty "" \
  "unknown option '--experts' for gpt"
gen_sweep llama '{"kv_heads": "8"}'
run sweep "$TEST_TMP/gen.json" -o "$TEST_TMP/kvh"
expect "a string for a count is refused" 2 stdout-empty stderr-nonempty "" \
  "options\.kv_heads: option 'kv_heads' must be a positive integer"
gen_sweep moe '{"layers": 2, "hidden": 64, "heads": 4, "seq": 32, "vocab": 128, "batch": 8, "experts": 4, "top_k": 1, "capacity_factor": 1.5, "flash": true}'
run sweep "$TEST_TMP/gen.json" -o "$TEST_TMP/moe"
if [ "$STATUS" -eq 0 ] && [ -s "$TEST_TMP/moe/models/z.json" ]; then
  "$PLANSIM" model moe --name z --layers 2 --hidden 64 --heads 4 --seq 32 --vocab 128 --batch 8 \
    --experts 4 --top-k 1 --capacity-factor 1.5 --flash >"$TEST_TMP/moe-cli.json"
  if cmp -s "$TEST_TMP/moe/models/z.json" "$TEST_TMP/moe-cli.json"; then
    ok "a sweep's generated moe is the file plansim model writes"
  else not_ok "a sweep's generated moe is the file plansim model writes"; fi
else not_ok "a sweep's generated moe is the file plansim model writes" "status $STATUS"; fi
# Issue 24 item 1: lists that multiply past the case limit, even past 2^64 (8,192 in each
# of five lists is 2^65 cases: the old int64_t product wrapped to 2, then make_cases wrote
# past its allocation), are refused before any allocation, naming the file; `check` too.
python3 - "$TEST_TMP/huge.json" <<'PY'
import json, sys
n = 8192
json.dump({"format": "plansim.sweep/1", "models": ["m%d.json" % i for i in range(n)],
           "clusters": ["c%d.json" % i for i in range(n)], "searchers": ["grid"] * n,
           "seeds": list(range(n)), "budgets": [str(i + 1) for i in range(n)]}, open(sys.argv[1], "w"))
PY
run sweep "$TEST_TMP/huge.json" -o "$TEST_TMP/huge"
expect "2^65 cases: refused, no overflow" 2 stdout-empty stderr-nonempty "" \
  "huge\.json: models x clusters x searchers x seeds x budgets = 8192 x 8192 x 8192 x 8192 x 8192 cases, more than the limit"
run check "$TEST_TMP/huge.json"
expect "check refuses the 2^65-case sweep" 2 stdout-empty stderr-nonempty "" "huge\.json: .*more than the limit"
run sweep tests/data/bad/sweep-too-many-cases.json -o "$TEST_TMP/toomany"
expect "16^5 cases: refused" 2 stdout-empty stderr-nonempty "" "sweep-too-many-cases\.json: .* = 16 x 16 x 16 x 16 x 16 cases"
# Issue 24 item 5: a million cases load in seconds (the lists were read with
# cJSON_GetArrayItem per index and keys compared all pairs: quadratic, 14 minutes and on).
# Two models with one name make the load end with the duplicate-key error once every
# case is built, so nothing runs; 10^6 + 1 seeds are one case over the limit.
python3 - "$TEST_TMP" <<'PY'
import json, sys
d = sys.argv[1]
dup = [{"name": "a", "file": "m.json"}, {"name": "a", "file": "m2.json"}]
json.dump({"format": "plansim.sweep/1", "models": dup, "clusters": ["c.json"],
           "seeds": list(range(500000))}, open(d + "/million.json", "w"))
json.dump({"format": "plansim.sweep/1", "models": ["m.json"], "clusters": ["c.json"],
           "seeds": list(range(1000001))}, open(d + "/over.json", "w"))
PY
start=$(date +%s)
PSIM_CLI_TIMEOUT=60 run sweep "$TEST_TMP/million.json" -o "$TEST_TMP/million"
took=$(($(date +%s) - start))
expect "10^6 cases load in seconds ($took s), then the duplicate key" 2 stdout-empty stderr-nonempty "" \
  "two cases have the key 'model=a cluster=c search=grid seed=0 budget=default'"
PSIM_CLI_TIMEOUT=60 run sweep "$TEST_TMP/over.json" -o "$TEST_TMP/over"
expect "10^6 + 1 cases: refused" 2 stdout-empty stderr-nonempty "" "over\.json: .* = 1 x 1 x 1 x 1000001 x 1 cases"
# --check: a missing baseline is refused before the sweep runs.
run sweep "$SWEEP" -o "$TEST_TMP/nocheck" --check "$TEST_TMP/no-such-baseline"
expect "--check with a missing baseline: exit 2 at once" 2 stdout-empty stderr-nonempty "" \
  "--check .*no-such-baseline"
if [ ! -e "$TEST_TMP/nocheck" ]; then ok "and no case ran"; else not_ok "and no case ran"; fi
finish
