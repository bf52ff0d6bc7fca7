#!/usr/bin/env bash
# shipped.sh - every shipped strategy (strategies/*.json) simulated with the model and the
# cluster it was written for (the manifest below, issue 19 item 5). A pairing passes when
# simulate exits 0, the configuration fits in device memory ("fits": true), the iteration
# time is positive and finite, and the MFU is in (0, 1] (no run beats the peak FLOP rate).
# A strategy file missing from the manifest fails, so a new one must say what it pairs with.
#
# Clusters named "preset:NAME:NODES" are generated with `plansim cluster NAME --nodes NODES`
# (docs/strategy.md uses the same command for megatron-175b-x8). Pairings marked "heavy"
# (over a second and 800 MB unsanitized) are skipped in a sanitizer build.
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 2

SANITIZED=0
if [ "${PSIM_SANITIZED:-0}" = 1 ] || ldd "$PLANSIM" 2>/dev/null | grep -qE "libasan|libubsan"; then
  SANITIZED=1
fi

# strategy                        model                  cluster                            weight
MANIFEST='
data-parallel.json                models/resnet50.json   topologies/dgx1-v100-x8.json       light
explicit-2x4-pipeline.json        models/gpt-1.3b.json   topologies/dgx-a100-x1.json        light
megatron-175b-x8.json             models/gpt-175b.json   preset:dgx-a100-80g:8              heavy
megatron-1t-x384.json             models/gpt-1t.json     topologies/dgx-a100-x384.json      heavy
megatron-22b-x1.json              models/gpt-22b.json    topologies/dgx-a100-x1.json        light
megatron-gpt-175b-x128.json       models/gpt-175b.json   topologies/dgx-a100-x128.json      light
zero3-x8.json                     models/bert-large.json topologies/dgx-a100-x1.json        light
'

listed() { printf '%s\n' "$MANIFEST" | awk -v s="$1" '$1 == s { found = 1 } END { exit !found }'; }

# A cluster file for the manifest's cluster column (generated for a preset).
cluster_file() {
  case "$1" in
  preset:*)
    local name nodes f
    IFS=: read -r _ name nodes <<<"$1"
    f="$TEST_TMP/$name-x$nodes.json"
    [ -f "$f" ] || "$PLANSIM" cluster "$name" --nodes "$nodes" -o "$f" || return 1
    printf '%s\n' "$f"
    ;;
  *) printf '%s\n' "$1" ;;
  esac
}

check_figures() {
  python3 - "$OUT" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
t, mfu = d["iteration_time_s"], d["mfu"]
assert d["fits"] is True, "does not fit: peak %.3g B" % d["peak_memory_bytes"]
assert t > 0 and math.isfinite(t), "iteration time %r" % t
assert 0 < mfu <= 1, "MFU %r outside (0, 1]" % mfu
print("%.4g s, MFU %.3f" % (t, mfu))
PY
}

for f in strategies/*.json; do
  base=$(basename "$f")
  if ! listed "$base"; then
    not_ok "$base is paired with a model and a cluster" "add it to the manifest in $0"
  fi
done

while read -r strategy model cluster weight; do
  [ -n "$strategy" ] || continue
  name="$strategy with $(basename "$model") on ${cluster##*/}"
  if [ "$weight" = heavy ] && [ "$SANITIZED" = 1 ]; then
    skip "$name" "heavy pairing in a sanitizer build"
    continue
  fi
  if ! c=$(cluster_file "$cluster"); then
    not_ok "$name" "plansim cluster failed for $cluster"
    continue
  fi
  run simulate "$model" "$c" "strategies/$strategy" --json
  if [ "$STATUS" -ne 0 ]; then
    not_ok "$name" "exit status $STATUS"
  elif why=$(check_figures 2>&1); then
    ok "$name ($why)"
  else
    not_ok "$name" "$(printf '%s\n' "$why" | tail -n 1)"
  fi
done <<<"$MANIFEST"

finish
