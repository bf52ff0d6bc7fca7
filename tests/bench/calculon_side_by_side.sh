#!/usr/bin/env bash
# tests/bench/calculon_side_by_side.sh - issue 19's side-by-side target: one configuration of
# a 1T GPT on 3,072 A100s (Narayanan et al. 2021, Table 1: tp 8, pp 64, dp 6, micro-batch 1,
# full recomputation, batch 3072) simulated by plansim (`plansim simulate models/gpt-1t.json
# topologies/dgx-a100-x384.json strategies/megatron-1t-x384.json`) and evaluated by Calculon's
# analytic model (`calculon llm` on its models/megatron-1T.json, systems/a100_80g.json and
# tests/bench/peers/calculon/1t-t8-p64-d6.json, the same configuration). Whole processes,
# interleaved repetitions, each under /usr/bin/time -v: wall time, user+sys CPU, peak RSS.
# Prints every repetition, then the minimum and median of each and the ratios (plansim /
# Calculon). Target (issue 19): plansim <= 0.3 s and <= 128 MiB.
#
#   tests/bench/calculon_side_by_side.sh [REPS]    (default 5; PLANSIM: the binary)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-5}
P=${PLANSIM:-build/cli/plansim}
PY=$(tests/bench/peers/get_calculon.sh)
CAL=${CALCULON_DIR:-$PWD/build-peers/calculon}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# one measured run: NAME then the command; appends "NAME wall_s cpu_s rss_kib" to $TMP/runs
measure() {
  local name=$1
  shift
  /usr/bin/time -v -o "$TMP/time" "$@" >"$TMP/out" 2>"$TMP/err" ||
    { echo "$name failed:" >&2; cat "$TMP/err" >&2; exit 1; }
  awk -v n="$name" -F': ' '
    /Elapsed \(wall clock\)/ { k = split($2, t, ":"); w = 0; for (i = 1; i <= k; i++) w = w * 60 + t[i] }
    /User time/ { u = $2 } /System time/ { s = $2 } /Maximum resident/ { r = $2 }
    END { printf "%s %.3f %.3f %d\n", n, w, u + s, r }' "$TMP/time" | tee -a "$TMP/runs"
}
echo "name wall_s cpu_s peak_rss_kib"
for _ in $(seq "$REPS"); do
  measure plansim "$P" simulate models/gpt-1t.json topologies/dgx-a100-x384.json \
    strategies/megatron-1t-x384.json --json
  cp "$TMP/out" "$TMP/plansim.json"
  measure calculon env PYTHONPATH="$CAL" "$PY" "$CAL/bin/calculon" llm \
    "$CAL/models/megatron-1T.json" tests/bench/peers/calculon/1t-t8-p64-d6.json \
    "$CAL/systems/a100_80g.json" "$TMP/calculon.json"
  cp "$TMP/out" "$TMP/calculon.out"
done
"$PY" - "$TMP/runs" "$TMP/plansim.json" "$TMP/calculon.json" <<'PY'
import json, statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
def col(name, i):
    return [float(r[i]) for r in runs if r[0] == name]
print('\n%-9s %8s %8s %8s %8s %10s' % ('', 'wall min', 'wall med', 'cpu min', 'cpu med', 'RSS MiB'))
fig = {}
for n in ('plansim', 'calculon'):
    w, c, r = col(n, 1), col(n, 2), col(n, 3)
    fig[n] = (min(w), statistics.median(w), min(c), statistics.median(c), max(r) / 1024)
    print('%-9s %8.3f %8.3f %8.3f %8.3f %10.1f' % ((n,) + fig[n]))
print('%-9s %8.2f %8.2f %8.2f %8.2f %10.2f' % (('ratio',) + tuple(
    a / b for a, b in zip(fig['plansim'], fig['calculon']))))
p = json.load(open(sys.argv[2]))['iteration_time_s']
c = json.load(open(sys.argv[3]))['total_time']
print('iteration time: plansim %.3f s, Calculon %.3f s' % (p, c))
ok = fig['plansim'][1] <= 0.3 and fig['plansim'][4] <= 128
print('target (plansim median wall <= 0.3 s, peak RSS <= 128 MiB): %s' % ('met' if ok else 'not met'))
PY
