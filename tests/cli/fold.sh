#!/usr/bin/env bash
# fold.sh - folding never changes a figure: every `simulate` case of the prediction corpus
# that fits unfolded gives the same normalised output (all but the "sim" object, to the last
# bit) folded and with --no-fold (tests/corpus/run --fold-check; docs/simulator.md, "Folding
# symmetric devices"). The sanitizer build skips the cases marked #asan-skip.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PLANSIM=${PLANSIM:-$ROOT/build/cli/plansim}
args=(--fold-check)
if [ "${PSIM_SANITIZED:-0}" = 1 ] || ldd "$PLANSIM" 2>/dev/null | grep -qE "libasan|libubsan"; then
  args+=(--sanitized)
fi
PLANSIM="$PLANSIM" "$ROOT/tests/corpus/run" "${args[@]}"
