#!/usr/bin/env bash
# api.sh - the shared libplansim exports exactly the public API: the functions marked
# PSIM_API in include/plansim/plansim.h, nothing of the internals (hidden visibility).
# The API's behaviour is tested by the unit suite test_api, linked against that library.
. "$(dirname "$0")/lib.bash"

LIB=$(ls "$(dirname "$PLANSIM")"/../libplansim.so.* 2>/dev/null | head -n 1)
if [ -z "$LIB" ] || ! command -v nm >/dev/null; then
  echo "ok - shared library symbols # SKIP libplansim.so or nm not found"
  finish
fi
want=$(grep -oE 'PSIM_API [^(]*\b(psim_[a-z0-9_]+)\(' "$ROOT/include/plansim/plansim.h" |
  grep -oE 'psim_[a-z0-9_]+\($' | tr -d '(' | sort -u)
have=$(nm -D --defined-only "$LIB" | awk '$2 == "T" {print $3}' | sort -u)
if [ "$want" = "$have" ] && [ -n "$want" ]; then
  ok "libplansim exports the $(printf '%s\n' "$want" | wc -l) PSIM_API functions and nothing else"
else
  not_ok "libplansim's exports differ from PSIM_API" \
    "only exported: $(comm -13 <(printf '%s\n' "$want") <(printf '%s\n' "$have") | head -n 10 | tr '\n' ' ')" \
    "only declared: $(comm -23 <(printf '%s\n' "$want") <(printf '%s\n' "$have") | tr '\n' ' ')"
fi
finish
