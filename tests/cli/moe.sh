#!/usr/bin/env bash
# moe.sh - expert and context parallelism in the megatron template (docs/strategy.md,
# issue 21): a MoE model simulates under megatron {tp 2, ep 4, dp 4} on two DGX A100
# nodes, `expand` writes the expert layout and template_info's ep, and Megatron-LM's
# rules are usage errors (exit 2) that name the file and the field: ep not dividing
# the experts, etp*ep not dividing tp*cp*dp, cp not dividing the sequence in 2 cp
# chunks, cp without a sequence dim, ep without experts; `check` refuses ep 0.
source "$(dirname "$0")/lib.bash"

MOE="$TEST_TMP/moe.json"
run model moe --layers 2 --hidden 256 --heads 4 --seq 256 --vocab 1024 --batch 16 -o "$MOE"
expect "model moe" 0 stdout-empty
C="$ROOT/topologies/dgx-a100-x2.json"
mega() { echo "{\"format\":\"plansim.strategy/1\",\"template\":\"megatron\",$1}" >"$TEST_TMP/$2.json"; }

mega '"tp":2,"ep":4,"dp":4,"pp":2' ep4
run simulate "$MOE" "$C" "$TEST_TMP/ep4.json" --json
expect "simulate moe with tp 2, ep 4, dp 4, pp 2" 0 stdout-nonempty any 'iteration_time_s'
run expand "$MOE" "$C" "$TEST_TMP/ep4.json"
expect "expand writes the expert layout" 0 stdout-nonempty any '"expert_layout"'
expect "expand writes template_info.ep" 0 stdout-nonempty any '"ep":[[:space:]]*4'

# refused NAME STDERR-REGEX STRATEGY-KEYS [MODEL]
refused() {
  mega "$3" bad
  run simulate "${4:-$MOE}" "$C" "$TEST_TMP/bad.json"
  expect "$1" 2 stdout-empty stderr-nonempty "" "bad\.json: $2"
}
refused "ep must divide the experts" "ep: 3 does not divide the 8 experts" '"tp":1,"dp":6,"ep":3'
refused "etp*ep must divide tp*cp*dp" "etp: etp\*ep = 16 does not divide" '"tp":2,"dp":2,"ep":8'
refused "cp must divide the sequence in 2cp chunks" "cp: the sequence of 256 tokens" '"tp":1,"dp":1,"cp":3'
refused "cp needs a sequence dim" "cp: 2 but the model has no dim with role 'sequence'" \
  '"tp":1,"dp":1,"cp":2' "$ROOT/models/mlp.json"
refused "ep needs experts" "ep: 2 but the model has no dim with role 'expert'" \
  '"tp":1,"dp":4,"ep":2' "$ROOT/models/gpt-1.3b.json"
mega '"tp":1,"ep":0' zero
run check "$TEST_TMP/zero.json"
expect "check refuses ep 0" 2 stdout-empty stderr-nonempty "" "ep"
finish
