#!/usr/bin/env bash
# corpus.sh - the prediction corpus (tests/corpus/run): every case's simulate/plan output
# must equal its golden file to the last bit. A refactor changes none; a change meant to
# change predictions updates them with `tests/corpus/run --update` and says why.
# The sanitizer build skips the cases marked #asan-skip.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PLANSIM=${PLANSIM:-$ROOT/build/cli/plansim}
args=()
if [ "${PSIM_SANITIZED:-0}" = 1 ] || ldd "$PLANSIM" 2>/dev/null | grep -qE "libasan|libubsan"; then
  args+=(--sanitized)
fi
PLANSIM="$PLANSIM" "$ROOT/tests/corpus/run" "${args[@]}"
