#!/usr/bin/env bash
# limits.sh - inputs that would take absurd memory or time are refused before the graph is
# built, with a message naming the limit and the option that raises it (issue 9).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"

cd "$ROOT" || exit 1
T=$TEST_TMP
MODEL=tests/data/tiny-gpt.json
CLUSTER=topologies/dgx-a100-x1.json
S=strategies/data-parallel.json

# tiny-gpt: 52 ops on 8 devices (data parallel, one micro-batch, unfolded): 52 x 8 x 3 = 1248
# compute tasks estimated; 1248 x 256 bytes = 319 kB.
run simulate "$MODEL" "$CLUSTER" "$S" --no-fold --max-tasks 1247
expect "simulate --max-tasks below the estimate is refused" 1 stdout-empty stderr-nonempty "" \
  "1\\.25e\\+03 compute tasks, over the limit of 1247 \\(raise it with --max-tasks\\)"
run simulate "$MODEL" "$CLUSTER" "$S" --no-fold --max-tasks 1248
expect "simulate --max-tasks at the estimate runs" 0
run simulate "$MODEL" "$CLUSTER" "$S" --no-fold --max-memory "300 kB"
expect "simulate --max-memory below the estimate is refused" 1 stdout-empty stderr-nonempty "" \
  "over the limit of .* GB \\(raise it with --max-memory\\)"
run simulate "$MODEL" "$CLUSTER" "$S" --max-memory "lots"
expect "--max-memory wants bytes" 2 stdout-empty stderr-nonempty "" "--max-memory wants bytes"
run plan "$MODEL" "$CLUSTER" --search grid --max-tasks 10
expect "plan with every strategy over --max-tasks finds none" 1 stdout-empty stderr-nonempty
run plan "$MODEL" "$CLUSTER" --search grid --max-memory "16 GiB" -o "$T/p.json"
expect "plan --max-memory 16 GiB runs" 0
finish
