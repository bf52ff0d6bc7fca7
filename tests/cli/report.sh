#!/usr/bin/env bash
# report.sh - plansim report: a self-contained HTML page whose timeline holds one bar per
# simulated task (the count comes from `plansim simulate --json`, not from the report), with
# no network references; then, in headless Chromium, the page loads without console errors,
# its scripts run, and a screenshot is taken. Chromium (Debian's chromium package) is
# installed when missing; when it cannot be, those cases print SKIP with the reason.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1
PLAN=tests/golden/export/tp1-pp2-dp4.plan.json # tiny-gpt, 2 pipeline stages x dp 4

run simulate tests/data/tiny-gpt.json topologies/dgx-a100-x1.json "$PLAN" --json
expect "simulate the plan" 0 stdout-nonempty any
TASKS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sim"]["tasks"])' "$OUT")
HTML="$TEST_TMP/report.html"
run report "$PLAN" -o "$HTML"
expect "report writes the page" 0 stdout-nonempty stderr-empty "written to"
bars=$(grep -c '<rect class="task ' "$HTML")
if [ "$bars" -eq "$TASKS" ] && [ "$TASKS" -gt 0 ]; then ok "one bar per simulated task ($TASKS)"
else not_ok "one bar per simulated task" "$bars bars, $TASKS tasks"; fi
# the host issuing kernels has its own row, with a bar per kernel it issues: as many as the
# trace of the same plan has host events
run simulate tests/data/tiny-gpt.json topologies/dgx-a100-x1.json "$PLAN" --trace "$TEST_TMP/t.json"
issues=$(python3 -c 'import json,sys; print(sum(e.get("cat") == "host" for e in json.load(open(sys.argv[1]))["traceEvents"]))' "$TEST_TMP/t.json")
host_bars=$(grep -c '<rect class="task-extra k-host"' "$HTML")
if [ "$host_bars" -eq "$issues" ] && [ "$issues" -gt 0 ] && grep -q 'host</text>' "$HTML"; then
  ok "host rows: a bar per kernel issue ($issues)"
else not_ok "host rows: a bar per kernel issue" "$host_bars bars, $issues host events in the trace"; fi
# #18 defect 9: the plan is folded (2 stages x dp 4 simulated as 2 devices); the memory panel
# shows on every one of the 8 devices its stage representative's activations, not 0 on the 6
# folded-away ones: 8 rows, none with 0 B of activations, 2 distinct figures (one per stage).
grep -q 'symmetric devices folded' "$HTML" || not_ok "the report's plan is folded"
acts=$(grep -o '<title>activations: [^<]*</title>' "$HTML")
n_rows=$(printf '%s\n' "$acts" | grep -c .)
n_zero=$(printf '%s\n' "$acts" | grep -c ': 0 B<' || true)
n_distinct=$(printf '%s\n' "$acts" | sort -u | grep -c .)
if [ "$n_rows" -eq 8 ] && [ "$n_zero" -eq 0 ] && [ "$n_distinct" -eq 2 ]; then
  ok "folded memory panel: every device shows its stage's activations"
else not_ok "folded memory panel: every device shows its stage's activations" \
  "$n_rows rows, $n_zero with 0 B, $n_distinct distinct figures (expected 8, 0, 2)"; fi
for id in summary timeline memory pipeline shardings; do
  if grep -q "id=\"$id\"" "$HTML"; then ok "the page has #$id"; else not_ok "the page has #$id"; fi
done
if grep -qE '(src|href)="(https?:)?//' "$HTML"; then not_ok "no network references"
else ok "no network references"; fi
# every op of the model has a row in the shardings table (52 ops in tiny-gpt)
rows=$(sed -n '/id="shardings"/,/<\/table>/p' "$HTML" | grep -c '^<tr><td>')
if [ "$rows" -eq 52 ]; then ok "a shardings row per op"; else not_ok "a shardings row per op" "$rows rows"; fi
# two stages x (F, B, R with full recompute) for each of the 2 micro-batches
spans=$(sed -n '/id="pipeline"/,/<\/svg>/p' "$HTML" | grep -o '<title>stage [0-9] [FBR][0-9]*</title>' | sort -u | wc -l)
if [ "$spans" -eq 12 ]; then ok "pipeline schedule: 2 stages x 2 micro-batches x F/B/R"
else not_ok "pipeline schedule: 2 stages x 2 micro-batches x F/B/R" "$spans spans"; fi
run report "$PLAN" -o "$TEST_TMP/capped.html" --max-tasks 50
expect "report --max-tasks 50" 0 stdout-nonempty stderr-empty "timeline capped"
capped=$(grep -c '<rect class="task ' "$TEST_TMP/capped.html")
if [ "$capped" -eq 50 ] && grep -q "Only the first 50 of $TASKS tasks are drawn" "$TEST_TMP/capped.html"; then
  ok "a capped timeline draws 50 bars and says so"
else not_ok "a capped timeline draws 50 bars and says so" "$capped bars"; fi
run report tests/data/tiny-gpt.json
expect "a model is not a plan" 2 stdout-empty stderr-nonempty "" "plansim.plan/1"

# Headless Chromium.
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  (apt-get install -y -qq chromium || (apt-get update -qq && apt-get install -y -qq chromium)) \
    >"$TEST_TMP/apt.log" 2>&1
  CHROMIUM=$(command -v chromium || true)
fi
if [ -z "$CHROMIUM" ]; then
  skip "the page in headless Chromium" "chromium is not installed and could not be installed"
  finish
  exit
fi
chrome() {
  timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --no-first-run --user-data-dir="$TEST_TMP/chrome-$1" \
    --enable-logging=stderr --v=0 --virtual-time-budget=3000 "${@:2}" 2>"$TEST_TMP/chrome-$1.err"
}
chrome dom --dump-dom "file://$HTML" >"$TEST_TMP/dom.html"
if grep -q 'data-ready="1"' "$TEST_TMP/dom.html"; then ok "Chromium ran the page's scripts"
else not_ok "Chromium ran the page's scripts" "$(tail -5 "$TEST_TMP/chrome-dom.err")"; fi
if grep -q 'data-errors="0"' "$TEST_TMP/dom.html" &&
  ! grep -qE 'Uncaught|CONSOLE.*[Ee]rror' "$TEST_TMP/chrome-dom.err"; then
  ok "no console errors"
else not_ok "no console errors" "$(grep -E 'CONSOLE|Uncaught' "$TEST_TMP/chrome-dom.err" | head -5)"; fi
if grep -q "data-bars=\"$TASKS\"" "$TEST_TMP/dom.html"; then ok "the rendered SVG holds $TASKS task bars"
else not_ok "the rendered SVG holds $TASKS task bars" "$(grep -o 'data-bars="[0-9]*"' "$TEST_TMP/dom.html")"; fi
chrome shot --window-size=1300,1800 --screenshot="$TEST_TMP/report.png" "file://$HTML" >/dev/null
if [ -s "$TEST_TMP/report.png" ] && [ "$(head -c 4 "$TEST_TMP/report.png" | tail -c 3)" = "PNG" ]; then
  ok "a screenshot is taken"
  [ -n "${PSIM_ARTIFACTS:-}" ] && cp "$TEST_TMP/report.png" "$PSIM_ARTIFACTS/report.png"
else not_ok "a screenshot is taken" "$(tail -5 "$TEST_TMP/chrome-shot.err")"; fi
finish
