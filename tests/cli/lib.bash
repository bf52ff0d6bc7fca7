# lib.bash - helpers for the CLI shell tests (sourced, not run).
#
# Each test prints one TAP-style line per case, "ok - NAME" or "not ok - NAME" with the
# reason indented below, and finish() ends with "# N passed, N failed" and the exit status.
# Environment: PLANSIM (the executable; default build/cli/plansim), PSIM_SANITIZED=1 when
# it is a sanitizer build (then any sanitizer report on stderr fails the case).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PLANSIM=${PLANSIM:-$ROOT/build/cli/plansim}
case "$PLANSIM" in /*) ;; *) PLANSIM="$PWD/$PLANSIM" ;; esac
if [ ! -x "$PLANSIM" ]; then
  echo "not ok - plansim executable not found at $PLANSIM (set PLANSIM)"
  exit 1
fi
TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/psim-cli.XXXXXX")
trap 'rm -rf "$TEST_TMP"' EXIT
PASSED=0
FAILED=0
OUT="$TEST_TMP/stdout"
ERR="$TEST_TMP/stderr"
STATUS=0

# run ARGS...: runs plansim with ARGS; sets STATUS, and $OUT / $ERR hold its output.
# A run that takes over PSIM_CLI_TIMEOUT seconds (default 120) is killed: status 124.
run() {
  STATUS=0
  timeout "${PSIM_CLI_TIMEOUT:-120}" "$PLANSIM" "$@" >"$OUT" 2>"$ERR" </dev/null || STATUS=$?
}

ok() {
  PASSED=$((PASSED + 1))
  echo "ok - $1"
}

not_ok() {
  FAILED=$((FAILED + 1))
  echo "not ok - $1"
  shift
  local why
  for why in "$@"; do printf '#   %s\n' "$why"; done
  if [ -s "$ERR" ]; then
    echo "#   stderr:"
    head -c 2000 "$ERR" | tr -d '\000' | sed 's/^/#     /'
    echo
  fi
}

# A sanitizer or crash report on stderr (always an error, sanitized build or not).
sanitizer_report() {
  grep -aqE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|Segmentation fault|core dumped' "$ERR"
}

# expect NAME STATUS [stdout-empty|stdout-nonempty|any] [stderr-empty|stderr-nonempty|any]
#        [stdout-regex] [stderr-regex]: checks the last run().
expect() {
  local name=$1 want=$2 so=${3:-any} se=${4:-any} ore=${5:-} ere=${6:-}
  local why=()
  [ "$STATUS" -eq "$want" ] || why+=("exit status $STATUS, expected $want")
  case "$so" in
  stdout-empty) [ ! -s "$OUT" ] || why+=("stdout not empty: $(head -c 200 "$OUT" | tr -d '\000')") ;;
  stdout-nonempty) [ -s "$OUT" ] || why+=("stdout empty") ;;
  esac
  case "$se" in
  stderr-empty) [ ! -s "$ERR" ] || why+=("stderr not empty") ;;
  stderr-nonempty) [ -s "$ERR" ] || why+=("stderr empty") ;;
  esac
  if [ -n "$ore" ] && ! grep -aqE -- "$ore" "$OUT"; then why+=("stdout does not match /$ore/"); fi
  if [ -n "$ere" ] && ! grep -aqE -- "$ere" "$ERR"; then why+=("stderr does not match /$ere/"); fi
  if sanitizer_report; then why+=("sanitizer or crash report on stderr"); fi
  if [ "${#why[@]}" -eq 0 ]; then ok "$name"; else not_ok "$name" "${why[@]}"; fi
}

skip() { echo "ok - $1 # SKIP ${2:-}"; }

finish() {
  echo "# $PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
}

# Regex that matches a literal string.
# shellcheck disable=SC2016 # the sed script is literal on purpose
re_quote() { printf '%s' "$1" | sed 's/[][\.*^$(){}?+|/]/\\&/g'; }
