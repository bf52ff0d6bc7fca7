#!/usr/bin/env bash
# bad_input.sh - every file in tests/data/bad/ is refused by `plansim check`: exit status 2,
# a message on stderr that names the file, nothing on stdout, no crash or sanitizer report
# (under a sanitizer build a report aborts with another status, so 2 also means clean).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"

cd "$ROOT" || exit 1
n=0
for f in tests/data/bad/*; do
  [ -f "$f" ] || continue
  n=$((n + 1))
  run check "$f"
  expect "check $f" 2 stdout-empty stderr-nonempty "" "$(re_quote "$f")"
done
if [ "$n" -ge 40 ]; then ok "corpus holds $n files (>= 40)"; else not_ok "corpus holds $n files, expected >= 40"; fi

# All bad files at once: every one reported, nothing on stdout, still exit 2.
run check tests/data/bad/*
expect "check all bad files in one run" 2 stdout-empty stderr-nonempty "" "$n of $n files failed"
finish
