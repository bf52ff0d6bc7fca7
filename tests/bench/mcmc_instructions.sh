#!/usr/bin/env bash
# tests/bench/mcmc_instructions.sh - instructions executed by the MCMC search (valgrind's
# callgrind): the noise-free figure for comparing two builds on a VM whose speed varies by
# 1.5x from minute to minute (docs/performance.md). Same search, same proposals: the counts of
# two builds differ only by what the change does.
#
# usage: tests/bench/mcmc_instructions.sh [PROPOSALS [NODES [BUILD_DIR]]]
#        (default 300 proposals, 4 nodes of 4 P100 = 16 devices, build dir "build")
# Prints the total, the engine's (psim_tg_simulate) and the builder's (psim_build_graph_reusing)
# instructions. Takes about a minute for the default on the 2-core development VM.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROPOSALS=${1:-300}
NODES=${2:-4}
BUILD=${3:-$ROOT/build}
BENCH="$BUILD/tests/bench/bench_mcmc"
command -v valgrind >/dev/null || { echo "mcmc_instructions: valgrind is not installed" >&2; exit 2; }
[ -x "$BENCH" ] || { echo "mcmc_instructions: $BENCH not built (meson compile -C $BUILD)" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" "$BENCH" "$PROPOSALS" search "$NODES" \
  >"$OUT/log" 2>&1 || { cat "$OUT/log" >&2; exit 1; }
# the search's own line, less its times (under valgrind they mean nothing)
sed -n 's/.*one chain); \([0-9]* simulations of [0-9]* tasks on average\).*/\1/p' "$OUT/log"
callgrind_annotate --inclusive=yes "$OUT/cg.out" 2>/dev/null | awk '
  /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
  /engine.c:psim_tg_simulate / && !engine { gsub(",", "", $1); engine = $1 }
  /build.c:psim_build_graph_reusing / && !build { gsub(",", "", $1); build = $1 }
  END {
    if (!total) { print "mcmc_instructions: no totals in the callgrind output"; exit 1 }
    printf "instructions: %.4g total, engine %.4g (%.1f%%), incremental builds %.4g (%.1f%%)\n",
           total, engine, 100 * engine / total, build, 100 * build / total
  }'
