#!/usr/bin/env bash
# export.sh - plansim export: golden files for every exporter, refusals with their reasons,
# and every emitted plan validated against docs/plan.schema.json.
#
# The golden plans (tests/golden/export/*.plan.json) hold template strategies for
# tests/data/tiny-gpt.json on one DGX A100 (8 GPUs). The golden outputs were checked by hand
# against Megatron-LM's, DeepSpeed's, JAX's and FlexFlow's conventions (docs/export.md): e.g.
# tp 4 gives wq [h, n, d] the spec (None, tp, None) (column-parallel), wo [n, d, h] (tp, None,
# None) (row-parallel), the vocab-parallel embedding (tp, None); a 25 MiB bucket is 6553600
# fp32 elements; DeepSpeed's train_batch_size = micro x accumulation x dp = 1 x 2 x 4 = 8.
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1
G=tests/golden/export
SCHEMA=docs/plan.schema.json

golden() { # golden NAME FORMAT FILE
  run export "$G/$1.plan.json" --format "$2"
  expect "export $1 --format $2 exits 0" 0 stdout-nonempty stderr-empty
  if diff -u "$3" "$OUT" >"$TEST_TMP/diff"; then ok "export $1 --format $2 matches $(basename "$3")"
  else not_ok "export $1 --format $2 matches $(basename "$3")" "$(head -20 "$TEST_TMP/diff")"; fi
}
golden tp2-pp2-dp2 megatron "$G/tp2-pp2-dp2.megatron.txt"
golden tp1-pp2-dp4 megatron "$G/tp1-pp2-dp4.megatron.txt"
golden tp1-pp2-dp4 deepspeed "$G/tp1-pp2-dp4.deepspeed.json"
golden tp4-dp2 gspmd "$G/tp4-dp2.gspmd.json"
golden dp8 gspmd "$G/dp8.gspmd.json"
golden dp8 deepspeed "$G/dp8.deepspeed.json"
golden dp8 flexflow "$G/dp8.flexflow.txt"

refused() { # refused NAME FORMAT REGEX
  run export "$G/$1.plan.json" --format "$2"
  expect "export $1 --format $2 is refused with the reason" 1 stdout-empty stderr-nonempty "" "$3"
}
refused tp2-pp2-dp2 deepspeed "tensor parallelism \(tp 2\)"
refused tp2-pp2-dp2 gspmd "2 pipeline stages"
refused tp2-pp2-dp2 flexflow "2 micro-batches"
refused tp4-dp2 flexflow "op 'embed' splits dim 'v' 4 ways"
refused override megatron "op 'layer\.1\.fc1' has a per-op placement"
refused override gspmd "op 'layer\.1\.fc1' has a per-op override"

# The Megatron and DeepSpeed exports of a plan must agree with each other on the batch.
run export "$G/dp8.plan.json" --format megatron
expect "data parallel is Megatron tp 1 pp 1" 0 stdout-nonempty stderr-empty \
  "tensor-model-parallel-size 1$"
if grep -q -- "--global-batch-size 8$" "$OUT" && grep -q -- "--micro-batch-size 1$" "$OUT"; then
  ok "dp 8 over a batch of 8: micro-batch 1, global 8"
else not_ok "dp 8 over a batch of 8: micro-batch 1, global 8"; fi

# Usage errors.
run export "$G/dp8.plan.json"
expect "export without --format exits 2" 2 stdout-empty stderr-nonempty "" "--format is required"
run export "$G/dp8.plan.json" --format torch
expect "unknown format exits 2" 2 stdout-empty stderr-nonempty "" "unknown export format 'torch'"
printf '{"format": "plansim.plan/1", "strategy": {"format": "plansim.strategy/1"}}\n' >"$TEST_TMP/bare.json"
run export "$TEST_TMP/bare.json" --format megatron
expect "a plan without model_file asks for --model" 2 stdout-empty stderr-nonempty "" "give --model"
run export "$TEST_TMP/bare.json" --format gspmd --model tests/data/tiny-gpt.json \
  --cluster topologies/dgx-a100-x1.json
expect "--model and --cluster stand in for the plan's files" 0 stdout-nonempty stderr-empty \
  '"axis_names":.*"replica"' 
run export tests/data/tiny-gpt.json --format megatron
expect "a model is not a plan" 2 stdout-empty stderr-nonempty "" "plansim.plan/1"

# Emitted plans: schema-valid, and --format plansim gives the plan back unchanged.
if ! command -v python3 >/dev/null; then
  skip "plans validate against docs/plan.schema.json" "python3 is not installed"
  finish
  exit
fi
run plan tests/data/tiny-gpt.json topologies/dgx-a100-x1.json --search grid -o "$TEST_TMP/plan.json"
expect "plan writes a plan" 0 stdout-nonempty any
run plan tests/data/tiny-gpt.json topologies/dgx-a100-x2.json --search grid -o "$TEST_TMP/plan2.json"
expect "plan writes a second plan" 0 stdout-nonempty any
run export "$TEST_TMP/plan.json" --format plansim -o "$TEST_TMP/exported.json"
expect "export --format plansim -o FILE" 0 stdout-empty stderr-empty
if python3 tests/golden/schema_check.py "$SCHEMA" "$TEST_TMP/plan.json" "$TEST_TMP/plan2.json" \
  "$TEST_TMP/exported.json" >"$TEST_TMP/schema.log" 2>&1; then
  ok "emitted plans validate against docs/plan.schema.json"
else not_ok "emitted plans validate against docs/plan.schema.json" "$(head -20 "$TEST_TMP/schema.log")"; fi
if python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' \
  "$TEST_TMP/plan.json" "$TEST_TMP/exported.json"; then
  ok "export --format plansim gives the plan back"
else not_ok "export --format plansim gives the plan back"; fi
# The validator must reject what the schema forbids (else the check above proves nothing).
python3 - "$TEST_TMP/plan.json" "$TEST_TMP/broken.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["prediction"]["mfu"] = 2
d["unknown_key"] = 1
del d["search"]["seed"]
json.dump(d, open(sys.argv[2], "w"))
PY
n=$(python3 tests/golden/schema_check.py "$SCHEMA" "$TEST_TMP/broken.json" | wc -l)
if [ "$n" -eq 3 ]; then ok "the schema check rejects a broken plan (3 errors)"
else not_ok "the schema check rejects a broken plan (3 errors)" "got $n errors"; fi
finish
