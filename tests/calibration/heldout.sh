#!/bin/sh
# heldout.sh - the held-out interpolation check of issue 4, in full: profile a
# GEMM grid (M, N, K in powers of two 64..2048, fp32, one OpenBLAS thread), then
# measure 30 shapes with M, N, K drawn log-uniformly from [64, 2048] (not on the
# grid) and compare them with the database's interpolation. Every shape is
# measured in three passes spread over the run (0.1 s each) and its time is the
# fastest repetition, so that other processes on a shared machine disturb the
# figures as little as possible. Prints one line per held-out shape and the
# median and worst errors; exits non-zero when the median error is >= 10% or the
# worst >= 25%.
# Usage: tests/calibration/heldout.sh [BUILD_DIR]   (default: build)
# Takes about 2-4 minutes. The result is recorded in docs/accuracy.md.
set -eu
build=${1:-build}
exe="$build/tests/unit/test_interp"
if [ ! -x "$exe" ]; then
  echo "heldout.sh: $exe not found; build first (ninja -C $build)" >&2
  exit 2
fi
PSIM_HELDOUT_FULL=1 CK_RUN_CASE=core CK_RUN_SUITE=interp CK_VERBOSITY=normal \
  CK_DEFAULT_TIMEOUT=1800 "$exe"
