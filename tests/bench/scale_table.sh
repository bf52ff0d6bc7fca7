#!/usr/bin/env bash
# tests/bench/scale_table.sh - the cluster-size table of issue 19 (docs/performance.md,
# "Exact folding and cluster size"): GPT-175B, Megatron tp 8, pp 8, full recomputation,
# micro-batch 1, batch 8 x dp (8 micro-batches per replica), on `plansim cluster dgx-a100-80g
# --nodes N` (racks of 20 nodes, the preset's default), one whole process per size, one at a
# time, under `nice -n 10` and /usr/bin/time -v. Not run by CI (minutes on a loaded VM).
#
# usage: tests/bench/scale_table.sh [BUILD_DIR [GPUS...]]
#        (default build-rel, then build; sizes 1024 2048 ... 131072)
# Prints one row per size: GPUs, dp, wall s, CPU s (user + sys), peak RSS MB, the predicted
# iteration time, the devices simulated, the task count and the builder's build time; a
# refused size prints its exit status and the first line of its error.
# Targets (issue 19): wall and memory flat within 1.5x from 1,024 to 131,072 GPUs, and
# 131,072 GPUs in <= 2 s and <= 1 GiB.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$BUILD" ]; then
  BUILD=$ROOT/build-rel
  [ -x "$BUILD/cli/plansim" ] || BUILD=$ROOT/build
fi
PLANSIM="$BUILD/cli/plansim"
[ -x "$PLANSIM" ] || { echo "scale_table: $PLANSIM not built" >&2; exit 2; }
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(1024 2048 4096 8192 16384 32768 65536 131072)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "| GPUs | dp | wall s | CPU s | peak RSS MB | iteration s | devices simulated | tasks | build s |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for gpus in "${SIZES[@]}"; do
  nodes=$((gpus / 8))
  dp=$((gpus / 64))
  "$PLANSIM" cluster dgx-a100-80g --nodes "$nodes" -o "$TMP/c.json" >/dev/null
  sed "0,/\"size\":[[:space:]]*1536/s//\"size\": $((8 * dp))/" "$ROOT/models/gpt-175b.json" >"$TMP/m.json"
  cat >"$TMP/s.json" <<JSON
{"format": "plansim.strategy/1", "name": "scale-$gpus", "template": "megatron", "tp": 8, "pp": 8,
 "dp": $dp, "micro_batch": 1, "virtual_stages": 1, "schedule": "1f1b", "recompute": "full",
 "sequence_parallel": false, "zero": 0, "overlap_grad_reduce": false, "allreduce": "auto"}
JSON
  rc=0
  nice -n 10 /usr/bin/time -v "$PLANSIM" simulate "$TMP/m.json" "$TMP/c.json" "$TMP/s.json" \
    --json >"$TMP/out.json" 2>"$TMP/time.txt" || rc=$?
  python3 - "$gpus" "$dp" "$rc" "$TMP/out.json" "$TMP/time.txt" <<'PY'
import json, sys
gpus, dp, rc, out, tim = sys.argv[1:6]
t = {}
for line in open(tim):
    k, _, v = line.strip().rpartition(": ")
    t[k] = v
def wall(s):
    parts = [float(p) for p in s.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
w = wall(t.get("Elapsed (wall clock) time (h:mm:ss or m:ss)", "0"))
cpu = float(t.get("User time (seconds)", 0)) + float(t.get("System time (seconds)", 0))
rss = int(t.get("Maximum resident set size (kbytes)", 0)) / 1024
if rc != "0":
    err = next((l.strip() for l in open(tim) if "error" in l.lower() or "collective" in l), "")
    print(f"| {int(gpus):,} | {int(dp):,} | {w:.2f} | {cpu:.2f} | {rss:.0f} | refused (exit {rc}): {err} | | | |")
    sys.exit(0)
r = json.load(open(out))
sim = r.get("sim", {})
print(f"| {int(gpus):,} | {int(dp):,} | {w:.2f} | {cpu:.2f} | {rss:.0f} | {r['iteration_time_s']:.9f} | "
      f"{sim.get('devices_simulated', sim.get('simulated_devices', '?'))} | {sim.get('tasks', '?')} | "
      f"{sim.get('build_s', '?')} |")
PY
done
