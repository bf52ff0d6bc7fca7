#!/usr/bin/env bash
# linkage.sh - CUDA is loaded only where it is used (issue 19 item 3, docs/profiling.md):
# plansim and libplansim list no CUDA library among their NEEDED entries in any build, a
# command other than `profile --device cuda` maps none at run time, and a missing CUDA
# profiler module is a clear error (exit status 1) that names it.
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 2
CUDA_LIBS='libcuda|libcudart|libcublas|libcublasLt|libnvrtc|libnvJitLink'

# needed FILE: the NEEDED entries of an ELF file, one per line.
needed() { LC_ALL=C readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

if ! command -v readelf >/dev/null; then
  skip "NEEDED entries" "readelf (binutils) is not installed"
else
  LIB=$(dirname "$PLANSIM")/../libplansim.so
  for f in "$PLANSIM" "$LIB"; do
    [ -f "$f" ] || continue
    n=$(needed "$f")
    if [ -z "$n" ]; then
      not_ok "$(basename "$f") has NEEDED entries" "readelf found none"
    elif bad=$(printf '%s\n' "$n" | grep -E "^($CUDA_LIBS)"); then
      not_ok "$(basename "$f") links no CUDA library" "NEEDED: $(echo $bad)"
    else
      ok "$(basename "$f") links no CUDA library ($(printf '%s\n' "$n" | wc -l) NEEDED)"
    fi
  done
fi

# At run time (glibc's LD_DEBUG=files lists every object the dynamic linker opens).
run check models/gpt-1.3b.json
expect "check runs" 0 stdout-nonempty any
LD_DEBUG=files timeout 60 "$PLANSIM" check models/gpt-1.3b.json >/dev/null 2>"$TEST_TMP/ld.log" </dev/null
if ! grep -q 'file=' "$TEST_TMP/ld.log"; then
  skip "check maps no CUDA library" "LD_DEBUG=files printed nothing (not glibc?)"
elif grep -qE "file=($CUDA_LIBS)" "$TEST_TMP/ld.log"; then
  not_ok "check maps no CUDA library" "$(grep -oE "file=($CUDA_LIBS)[^ ]*" "$TEST_TMP/ld.log" | sort -u | head -5)"
else
  ok "check maps no CUDA library ($(grep -c 'file=.*\[0\];  needed by' "$TEST_TMP/ld.log") objects)"
fi

# The loader: a missing module is named, and the message says what --device cuda needs.
missing=$TEST_TMP/none/libplansim_cuda.so
PSIM_CUDA_MODULE=$missing run profile --device cuda --grid --budget 0.001 -o "$TEST_TMP/db.json"
expect "missing CUDA profiler module: exit 1, named" 1 any stderr-nonempty '' \
  "cannot load the CUDA profiler $(re_quote "$missing").*libcublas"
[ ! -e "$TEST_TMP/db.json" ] && ok "nothing written without a backend" ||
  not_ok "nothing written without a backend"
PSIM_CUDA_MODULE=libm.so.6 run profile --device cuda --grid --budget 0.001 -o "$TEST_TMP/db.json"
expect "a library that is no CUDA profiler: exit 1" 1 any stderr-nonempty '' \
  'exports no psim_cuda_module_open'

finish
