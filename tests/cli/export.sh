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
golden tp1-pp2-dp4 deepspeed-pipeline "$G/tp1-pp2-dp4.deepspeed-pipeline.py"
golden tp4-dp2 gspmd "$G/tp4-dp2.gspmd.json"
golden dp8 gspmd "$G/dp8.gspmd.json"
golden dp8 deepspeed "$G/dp8.deepspeed.json"

refused() { # refused NAME FORMAT REGEX
  run export "$G/$1.plan.json" --format "$2"
  expect "export $1 --format $2 is refused with the reason" 2 stdout-empty stderr-nonempty "" "$3"
}
refused tp2-pp2-dp2 deepspeed "tensor parallelism \(tp 2\)"
refused tp2-pp2-dp2 gspmd "2 pipeline stages"
refused dp8 flexflow "no current FlexFlow release reads a strategy file"
refused dp8 deepspeed-pipeline "the plan has no pipeline"
refused tp2-pp2-dp2 torchtitan "model 'tiny-gpt' differs: it uses LayerNorm or a GeLU MLP"
refused override megatron "op 'layer\.1\.fc1' has a per-op placement"

# Per-op strategies (what Alpa and MCMC plans hold): gspmd infers one mesh for all ops. The
# override plan keeps the template's dp 2 x tp 4 mesh; fc1 splitting the batch 8 ways takes
# both axes, dp the major one: PartitionSpec(("dp", "tp"), None, None).
run export "$G/override.plan.json" --format gspmd
expect "export override --format gspmd splits fc1's batch over both mesh axes" 0 \
  stdout-nonempty stderr-empty '"layer\.1\.u":[[:space:]]*\[\["dp", "tp"\], null, null\]'
perop() { # perop NAME OPS: a plan of tiny-gpt on one DGX A100 with the per-op overrides OPS
  printf '{"format": "plansim.plan/1", "model_file": "tests/data/tiny-gpt.json",
  "cluster_file": "topologies/dgx-a100-x1.json",
  "strategy": {"format": "plansim.strategy/1", "ops": %s}}\n' "$2" >"$TEST_TMP/$1.json"
  run export "$TEST_TMP/$1.json" --format gspmd
}
perop subset '{"*": {"split": {"b": 8}}, "embed": {"split": {"b": 4}, "devices": [0, 1, 2, 3]}}'
expect "gspmd refuses an op that leaves devices idle" 2 stdout-empty stderr-nonempty "" \
  "op 'embed' runs on 4 of the 8 devices"
perop crossed '{"*": {"split": {"b": 2}, "replicas": 4},
  "layer.0.ln1": {"split": {"b": 2}, "replicas": 4, "devices": [0, 1, 2, 4, 3, 5, 6, 7]}}'
expect "gspmd refuses shards that no mesh lays out, naming the first such op" 2 stdout-empty \
  stderr-nonempty "" \
  "op 'layer\.0\.ln1' \(split b:2, 4 replicas, devices 0\.\.\) cannot be expressed on one device mesh"
perop dp8 '{"*": {"split": {"b": 8}}}'
expect "data parallelism given per op is one axis dp of 8" 0 stdout-nonempty stderr-empty \
  '"axis_names":[[:space:]]*\["dp"\]'

# The Megatron and DeepSpeed exports of a plan must agree with each other on the batch.
run export "$G/dp8.plan.json" --format megatron
expect "data parallel is Megatron tp 1 pp 1" 0 stdout-nonempty stderr-empty \
  "tensor-model-parallel-size 1$"
if grep -q -- "--global-batch-size 8$" "$OUT" && grep -q -- "--micro-batch-size 1$" "$OUT"; then
  ok "dp 8 over a batch of 8: micro-batch 1, global 8"
else not_ok "dp 8 over a batch of 8: micro-batch 1, global 8"; fi

# export --check: read back, differences (exit 1), refusals and unknown files (exit 2).
run export "$G/tp2-pp2-dp2.plan.json" --format megatron -o "$TEST_TMP/tp2.sh"
run export "$G/tp2-pp2-dp2.plan.json" --check "$TEST_TMP/tp2.sh"
expect "--check reads an export back as the plan" 0 stdout-nonempty stderr-empty \
  "^matches the plan: all [0-9]+ settings of its megatron export agree"
run export "$G/tp1-pp2-dp4.plan.json" --check "$TEST_TMP/tp2.sh"
expect "--check of another plan's export lists each difference (exit 1)" 1 stdout-nonempty \
  stderr-nonempty "^differs: --tensor-model-parallel-size: the file sets 2, the plan's export 1" \
  "settings differ from the plan's megatron export"
run export "$G/tp2-pp2-dp2.plan.json" --check "$G/dp8.gspmd.json"
expect "--check of a format the plan cannot take is its refusal (exit 2)" 2 stdout-empty \
  stderr-nonempty "" "cannot export to gspmd: 2 pipeline stages"
run export "$G/tp2-pp2-dp2.plan.json" --check tests/data/tiny-gpt.json
expect "--check of a file no exporter writes (exit 2)" 2 stdout-empty stderr-nonempty "" \
  "tiny-gpt.json: not a file plansim exports"
run export "$G/tp2-pp2-dp2.plan.json" --check "$TEST_TMP/tp2.sh" -o "$TEST_TMP/x"
expect "--check takes no -o" 2 stdout-empty stderr-nonempty "" "-o is not taken"
# Many settings cost O(n log n): 100,000 flags are read and compared at once (a quadratic
# reader took half a minute).
{
  echo 'MEGATRON_ARGS=('
  seq 1 100000 | sed 's/.*/  --k& &/'
  echo ')'
} >"$TEST_TMP/many.sh"
PSIM_CLI_TIMEOUT=10 run export "$G/tp2-pp2-dp2.plan.json" --check "$TEST_TMP/many.sh"
expect "--check of 100,000 settings ends within 10 s" 1 stdout-nonempty stderr-nonempty "" \
  "100023 settings differ" # 100,000 + the export's 23 flags

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

# A plan's top level is checked (unknown members, wrong types), not passed through
GOLD=tests/golden/export/tp2-pp2-dp2.plan.json
jq '. + {bogus: 1}' "$GOLD" >"$TEST_TMP/bad-top.json"
run export "$TEST_TMP/bad-top.json" --format plansim
expect "export refuses a plan member that does not exist" 2 stdout-empty stderr-nonempty "" "bad-top.json: bogus: not a member of a plan"
jq '. + {prediction: {iteration_time_s: "fast", fits: true}}' "$GOLD" >"$TEST_TMP/bad-pred.json"
run export "$TEST_TMP/bad-pred.json" --format plansim
expect "export refuses a prediction whose time is not seconds" 2 stdout-empty stderr-nonempty "" "prediction.iteration_time_s: expected seconds"
run report "$TEST_TMP/bad-pred.json" -o "$TEST_TMP/bad.html"
expect "report refuses it too" 2 stdout-empty stderr-nonempty "" "prediction.iteration_time_s"

# Every shipped model family x every exporter: the export obeys the runtime's rules and
# round-trips to the model (tests/cli/export_rules.py cites the runtime files and versions), or
# it is refused with the reason. family NAME MODEL CLUSTER WORLD STRATEGY-FIELDS FORMAT:EXPECT...
# (EXPECT: "ok" or a regex of the refusal).
family() {
  local name=$1 model=$2 cluster=$3 world=$4 fields=$5
  shift 5
  printf '{"format": "plansim.plan/1", "model_file": "%s", "cluster_file": "%s",
  "strategy": {"format": "plansim.strategy/1", %s}}\n' "$model" "$cluster" "$fields" \
    >"$TEST_TMP/$name.json"
  for fe in "$@"; do
    local f=${fe%%:*} want=${fe#*:}
    run export "$TEST_TMP/$name.json" --format "$f" -o "$TEST_TMP/$name.$f"
    if [ "$want" != ok ]; then
      expect "$name --format $f is refused with the reason" 2 stdout-empty stderr-nonempty "" "$want"
    elif [ "$STATUS" -ne 0 ]; then
      not_ok "$name --format $f exports" "$(head -3 "$ERR")"
    elif [ "$f" = gspmd ] || [ "$f" = deepspeed-pipeline ] ||
      python3 tests/cli/export_rules.py "$f" "$model" "$TEST_TMP/$name.$f" "$world" \
        $([ "$f" = megatron ] || [ "$f" = megatron-bridge ] || [ "$f" = torchtitan ] &&
          echo "$TEST_TMP/$name.json") \
        >"$TEST_TMP/rules.log" 2>&1; then
      ok "$name --format $f obeys the runtime's rules and round-trips the model"
    else not_ok "$name --format $f obeys the runtime's rules" "$(head -5 "$TEST_TMP/rules.log")"; fi
  done
}
X16=topologies/dgx-a100-x16.json
if command -v python3 >/dev/null && python3 -c 'import tomllib' 2>/dev/null; then
family llama7b models/llama2-7b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 4, "dp": 4,
  "sequence_parallel": true, "zero": 1, "overlap_grad_reduce": true' megatron:ok \
  "deepspeed:tensor parallelism \(tp 8\)" "torchtitan:ZeRO stage 1: torchtitan v0\.2\.2" \
  "gspmd:4 pipeline stages" "flexflow:no current FlexFlow"
family llama70b models/llama2-70b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 8,
  "dp": 2, "sequence_parallel": true, "recompute": "full", "zero": 3, "overlap_grad_reduce": true' \
  megatron:ok torchtitan:ok megatron-bridge:ok
# HSDP (dp_shard 2 of dp 4: FSDP over pairs, replicated twice): torchtitan's 2-D mesh, its
# replicate degree read back against the plan's; the Megatron and DeepSpeed exports refuse it
family llama70b-hsdp models/llama2-70b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 4,
  "dp": 4, "dp_shard": 2, "sequence_parallel": true, "recompute": "full", "zero": 3,
  "overlap_grad_reduce": true' torchtitan:ok "megatron:HSDP \(ZeRO sharded over groups of dp / 2" \
  "megatron-bridge:--num-distributed-optimizer-instances" "deepspeed:hpZ"
family llama70b-async models/llama2-70b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 4,
  "dp": 4, "sequence_parallel": true, "recompute": "full", "zero": 3, "overlap_grad_reduce": true,
  "async_tp": true' torchtitan:ok "megatron:async tensor parallelism"
grep -q "^enable_async_tensor_parallel = true$" "$TEST_TMP/llama70b-async.torchtitan" &&
  grep -q "^enable = true$" "$TEST_TMP/llama70b-async.torchtitan" &&
  ok "async TP: torchtitan enable_async_tensor_parallel with the model compiled" ||
  not_ok "async TP: torchtitan enable_async_tensor_parallel with the model compiled"
grep -q "^data_parallel_replicate_degree = 2$" "$TEST_TMP/llama70b-hsdp.torchtitan" &&
  grep -q "^data_parallel_shard_degree = 2$" "$TEST_TMP/llama70b-hsdp.torchtitan" &&
  ok "HSDP: torchtitan data_parallel_replicate_degree 2 x data_parallel_shard_degree 2" ||
  not_ok "HSDP: torchtitan data_parallel_replicate_degree 2 x data_parallel_shard_degree 2"
# Partial full recomputation (Megatron-Core --recompute-method block / uniform with
# --recompute-num-layers): export_rules.py reads granularity, method and count back against
# the plan's; the formats that checkpoint every layer refuse it
family llama70b-block models/llama2-70b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 8,
  "dp": 2, "sequence_parallel": true, "recompute": "full", "recompute_method": "block",
  "recompute_num_layers": 3, "zero": 1, "overlap_grad_reduce": true' megatron:ok megatron-bridge:ok \
  "torchtitan:ZeRO stage 1" "gspmd:8 pipeline stages"
family llama70b-uniform models/llama2-70b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 8,
  "dp": 2, "sequence_parallel": true, "recompute": "full", "recompute_method": "uniform",
  "recompute_num_layers": 2, "zero": 3, "overlap_grad_reduce": true' megatron:ok megatron-bridge:ok \
  "torchtitan:full recomputation by method uniform of 2 layers"
for f in megatron megatron-bridge; do
  grep -qE "recompute[-_]method:? block" "$TEST_TMP/llama70b-block.$f" ||
    not_ok "llama70b-block --format $f writes method block" "$(grep -i recompute "$TEST_TMP/llama70b-block.$f")"
  run export "$TEST_TMP/llama70b-block.json" --format "$f" --check "$TEST_TMP/llama70b-block.$f"
  expect "llama70b-block: export --check reads the $f recompute method back" 0 stdout-nonempty \
    stderr-empty "matches the plan"
done
# ZeRO 2 and 3 as Megatron-FSDP optim_grads / optim_grads_params (export_megatron.c fsdp_args;
# export_rules.py reads the stage back against the plan's), and export --check reads them back
family llama7b-zero2 models/llama2-7b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 4,
  "dp": 4, "sequence_parallel": true, "zero": 2' megatron:ok megatron-bridge:ok
for f in megatron megatron-bridge; do
  for z in zero2:optim_grads llama70b:optim_grads_params; do
    n=llama7b-${z%%:*} && [ "${z%%:*}" = llama70b ] && n=llama70b
    grep -q "${z#*:}\$" "$TEST_TMP/$n.$f" || not_ok "$n --format $f writes ${z#*:}" "$(grep -i shard "$TEST_TMP/$n.$f")"
    run export "$TEST_TMP/$n.json" --format "$f" --check "$TEST_TMP/$n.$f"
    expect "$n: export --check reads the $f Megatron-FSDP settings back" 0 stdout-nonempty stderr-empty \
      "matches the plan"
  done
done
# --overlap-param-gather (Megatron-LM arguments.py: with the distributed optimizer and
# --overlap-grad-reduce): written exactly when the plan has it at ZeRO 1-2 (export_rules.py
# reads it back against the plan), Megatron-Bridge's ddp and optimizer keys with it (and
# align_param_gather under interleaving); refused without the gradient reduce overlapped and by
# DeepSpeed (its ZeRO 1-2 gather inside the optimizer step); at ZeRO 0 it acts on nothing and is
# not written
family llama7b-opg models/llama2-7b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 4,
  "dp": 4, "sequence_parallel": true, "zero": 1, "overlap_grad_reduce": true,
  "overlap_param_gather": true' megatron:ok megatron-bridge:ok
family gpt-opg-interleaved models/gpt-175b.json topologies/dgx-a100-x128.json 128 '"template":
  "megatron", "tp": 8, "pp": 8, "dp": 2, "virtual_stages": 2, "sequence_parallel": true,
  "zero": 1, "overlap_grad_reduce": true, "overlap_param_gather": true' megatron:ok \
  megatron-bridge:ok
family llama7b-opg-dp models/llama2-7b.json $X16 16 '"template": "megatron", "tp": 1, "pp": 1,
  "dp": 16, "micro_batch": 4, "zero": 1, "overlap_grad_reduce": true,
  "overlap_param_gather": true' megatron:ok \
  "deepspeed:DeepSpeed gathers the updated weights inside the optimizer step"
family llama7b-opg-noreduce models/llama2-7b.json $X16 128 '"template": "megatron", "tp": 8,
  "pp": 4, "dp": 4, "sequence_parallel": true, "zero": 1, "overlap_param_gather": true' \
  "megatron:Must use --overlap-param-gather with --overlap-grad-reduce" \
  "megatron-bridge:Must use --overlap-param-gather with --overlap-grad-reduce"
family llama7b-opg-zero0 models/llama2-7b.json $X16 128 '"template": "megatron", "tp": 8, "pp": 4,
  "dp": 4, "sequence_parallel": true, "overlap_grad_reduce": true, "overlap_param_gather": true' \
  megatron:ok megatron-bridge:ok
for n in llama7b-opg gpt-opg-interleaved llama7b-opg-dp; do
  grep -q -- "^  --overlap-param-gather$" "$TEST_TMP/$n.megatron" ||
    not_ok "$n --format megatron writes --overlap-param-gather"
done
for n in llama7b llama7b-zero2 llama7b-opg-zero0; do
  grep -q -- "^  --overlap-param-gather$" "$TEST_TMP/$n.megatron" &&
    not_ok "$n --format megatron writes no --overlap-param-gather"
done
grep -q "^# The plan's overlap_param_gather is not written: at ZeRO 0" "$TEST_TMP/llama7b-opg-zero0.megatron" ||
  not_ok "llama7b-opg-zero0: the Megatron header says why the overlap is not written"
if grep -q "^  overlap_param_gather: true$" "$TEST_TMP/llama7b-opg.megatron-bridge" &&
  grep -q "^  align_param_gather: false$" "$TEST_TMP/llama7b-opg.megatron-bridge" &&
  grep -q "^  align_param_gather: true$" "$TEST_TMP/gpt-opg-interleaved.megatron-bridge" &&
  [ "$(grep -c "^  overlap_param_gather: true$" "$TEST_TMP/gpt-opg-interleaved.megatron-bridge")" = 2 ] &&
  grep -q "^  overlap_param_gather: false$" "$TEST_TMP/llama7b-opg-zero0.megatron-bridge" &&
  grep -q "^  overlap_param_gather: false$" "$TEST_TMP/llama7b-zero2.megatron-bridge"; then
  ok "Megatron-Bridge: overlap_param_gather in ddp and optimizer exactly when the plan has it"
else not_ok "Megatron-Bridge: overlap_param_gather in ddp and optimizer exactly when the plan has it"; fi
for n in llama7b-opg gpt-opg-interleaved; do
  for f in megatron megatron-bridge; do
    run export "$TEST_TMP/$n.json" --format "$f" --check "$TEST_TMP/$n.$f"
    expect "$n: export --check reads the $f parameter-gather overlap back" 0 stdout-nonempty \
      stderr-empty "matches the plan"
  done
done
family llama7b-tp1 models/llama2-7b.json $X16 16 '"template": "megatron", "tp": 1, "pp": 1,
  "dp": 16, "micro_batch": 4, "sequence_parallel": true' megatron:ok deepspeed:ok \
  "torchtitan:DDP always overlaps"
family gpt-uneven models/gpt-1.3b.json $X16 20 '"template": "megatron", "tp": 2, "pp": 5,
  "dp": 2, "micro_batch": 4' megatron:ok megatron-bridge:ok "torchtitan:learned position embeddings"
family gpt-interleaved models/gpt-175b.json topologies/dgx-a100-x128.json 128 '"template":
  "megatron", "tp": 8, "pp": 8, "dp": 2, "virtual_stages": 2, "sequence_parallel": true' megatron:ok \
  megatron-bridge:ok
family moe models/moe-1.3b-8e.json $X16 16/2 '"template": "megatron", "tp": 1, "pp": 2, "dp": 8,
  "micro_batch": 4, "zero": 1, "overlap_grad_reduce": true' megatron:ok deepspeed:ok \
  deepspeed-pipeline:ok "torchtitan:fixed expert capacity"
family moe-tp models/moe-1.3b-8e.json $X16 16 '"template": "megatron", "tp": 2, "pp": 1,
  "dp": 8, "sequence_parallel": true' "megatron:expert biases with expert tensor parallelism 1"
family bert models/bert-large.json $X16 16 '"template": "megatron", "tp": 2, "pp": 1, "dp": 8,
  "micro_batch": 8' megatron:ok "torchtitan:it is an encoder" gspmd:ok
family resnet models/resnet50.json $X16 8 '"template": "data_parallel", "dp": 8' \
  "megatron:Megatron-LM trains transformers" deepspeed:ok "torchtitan:not a transformer" gspmd:ok
grep -q -- "examples/bert/pretrain_bert.py" "$TEST_TMP/bert.megatron" &&
  grep -q -- "--bert-no-binary-head" "$TEST_TMP/bert.megatron" &&
  ok "BERT runs Megatron-LM's examples/bert/pretrain_bert.py without the NSP head" ||
  not_ok "BERT runs Megatron-LM's examples/bert/pretrain_bert.py without the NSP head"
grep -q -- "^  num_layers_in_last_pipeline_stage: 4$" "$TEST_TMP/gpt-uneven.megatron-bridge" &&
  grep -q -- "^  virtual_pipeline_model_parallel_size: 2$" "$TEST_TMP/gpt-interleaved.megatron-bridge" &&
  ok "Megatron-Bridge: uneven last stage and 2 virtual stages as Megatron-Core fields" ||
  not_ok "Megatron-Bridge: uneven last stage and 2 virtual stages as Megatron-Core fields"
grep -q -- "--decoder-last-pipeline-num-layers 4$" "$TEST_TMP/gpt-uneven.megatron" &&
  ok "24 layers over 5 stages (5, 5, 5, 5, 4): --decoder-last-pipeline-num-layers 4" ||
  not_ok "24 layers over 5 stages: --decoder-last-pipeline-num-layers 4"
# --check reads settings, not layout: the torchtitan stage lists on one line, comments and
# blank lines dropped, still match; one layer moved to the other stage does not.
python3 - "$TEST_TMP/llama70b.torchtitan" "$TEST_TMP/relaid.toml" "$TEST_TMP/moved.toml" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
a = t.index("module_fqns_per_model_part = ["); b = t.index("\n]\n", a) + 3
one = re.sub(r"\s+", " ", t[a:b].strip()) + "\n"
open(sys.argv[2], "w").write("\n".join(l for l in (t[:a] + one + t[b:]).splitlines()
                                       if l and not l.startswith("#")) + "\n")
open(sys.argv[3], "w").write(t.replace('"layers.9"],', '],', 1).replace('["layers.10"', '["layers.9", "layers.10"', 1))
PY
run export "$TEST_TMP/llama70b.json" --check "$TEST_TMP/relaid.toml"
expect "--check: a relaid torchtitan file still matches" 0 stdout-nonempty stderr-empty "^matches the plan"
run export "$TEST_TMP/llama70b.json" --check "$TEST_TMP/moved.toml"
expect "--check: a layer moved between stages differs" 1 stdout-nonempty stderr-nonempty \
  "^differs: parallelism.module_fqns_per_model_part: the file sets"
grep -q -- "--sequence-parallel" "$TEST_TMP/llama7b-tp1.megatron" &&
  not_ok "no --sequence-parallel at tp 1 (Megatron turns it off)" ||
  ok "no --sequence-parallel at tp 1 (Megatron turns it off)"
# The README's AlexNet MCMC plan: every exporter answers with a precise reason.
run plan models/alexnet.json topologies/p100-nvlink-x4.json --search mcmc --budget 2000 --seed 7 \
  --no-baselines -o "$TEST_TMP/alexnet.json"
expect "the README's AlexNet MCMC plan is written" 0 stdout-nonempty any
for fe in "megatron:Megatron-LM trains transformers: model 'alexnet'" \
  "torchtitan:model 'alexnet' differs: it has no heads-role" "deepspeed:per-op placement" \
  "gspmd:op '.*' (runs on|splits|\(split)" "flexflow:no current FlexFlow"; do
  run export "$TEST_TMP/alexnet.json" --format "${fe%%:*}"
  expect "AlexNet MCMC --format ${fe%%:*}: refused with the reason" 2 stdout-empty stderr-nonempty \
    "" "${fe#*:}"
done
else skip "model families x exporters" "python3 with tomllib is not installed"; fi

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

# Plans from the searches, whose strategies are given per op, export to gspmd, and each op's
# output spec lays out the op's shards as the plan places them: for every device, its
# coordinates on the spec's mesh axes (mixed radix, major first) give the shard index the
# plan's device list gives it (tests/cli/export_specs.py MODEL PLAN GSPMD OPS).
spec_check() { # spec_check NAME MODEL PLAN OPS
  run export "$3" --format gspmd -o "$TEST_TMP/$1.gspmd.json"
  expect "export of the $1 plan --format gspmd" 0 stdout-empty stderr-empty
  if python3 tests/cli/export_specs.py "$2" "$3" "$TEST_TMP/$1.gspmd.json" "$4" \
    >"$TEST_TMP/spec.log" 2>&1; then
    ok "the $1 plan's specs lay out its shards ($(cat "$TEST_TMP/spec.log"))"
  else not_ok "the $1 plan's specs lay out its shards" "$(head -20 "$TEST_TMP/spec.log")"; fi
}
# MCMC keeps every op on the 8 GPUs in order with the batch split 2 ways (--fix) and splits
# the rest as it likes: the ops' splits differ, so no mesh + layout of the plan gives them.
# It starts from plain data parallelism: the grid's start may use the distributed optimizer
# (ZeRO 1), which no PartitionSpec expresses (that refusal is tested in export_matrix.sh).
printf '{"format": "plansim.strategy/1", "split": {"b": 2},
  "ops": {"*": {"devices": [0, 1, 2, 3, 4, 5, 6, 7]}}}\n' >"$TEST_TMP/fix.json"
run plan tests/data/tiny-gpt.json topologies/dgx-a100-x1.json --search mcmc --budget 300 \
  --seed 1 --fix "$TEST_TMP/fix.json" --init strategies/data-parallel.json --no-baselines \
  -o "$TEST_TMP/mcmc.json"
expect "plan --search mcmc writes a per-op plan" 0 stdout-nonempty any
spec_check mcmc tests/data/tiny-gpt.json "$TEST_TMP/mcmc.json" embed,layer.0.fc1,layer.3.attn,head
# Alpa gives mlp4 on 16 P100s one stage on a 4 x 4 mesh, its strategy per op with no mesh
# axes (fc3 on the transposed device order).
# mlp4 has no layer indices: without --fix the optimizer clusters its ops into layers and
# pipelines them (3 stages, 9.02 ms against one stage's 9.34 ms), which no partition spec
# describes; an empty --fix keeps the one-stage intra-op plan this check is about.
printf '{"format": "plansim.strategy/1"}\n' >"$TEST_TMP/nofix.json"
run plan tests/data/mlp4.json topologies/p100-nvlink-x4.json --search alpa --no-baselines \
  --fix "$TEST_TMP/nofix.json" -o "$TEST_TMP/alpa.json"
expect "plan --search alpa writes a per-op plan" 0 stdout-nonempty any
spec_check alpa tests/data/mlp4.json "$TEST_TMP/alpa.json" fc1,fc3
# DeepSeek-V3's architecture (#21): a 4-layer DeepSeek-like model (the generator's MLA, 1
# leading dense layer, shared expert, 16 experts top-4, sigmoid router, 1 MTP module; the
# golden model must be what `plansim model deepseek-v3` writes today) at tp 2 x pp 2 x dp 4,
# ep 8, etp 1 on 16 GPUs. The golden flags obey Megatron-LM's rules (export_rules.py: MLA
# excludes GQA, moe-layer-freq has one entry per layer and matches the dense layers, shared
# expert size > 0, ep divides the experts, world % (etp x ep x pp), uneven PP counts > 0) and
# round-trip the model: MLA dims, the MTP module, the 3 + 1 stages the template made.
DS=(--name deepseek-tiny --layers 4 --dense-layers 1 --hidden 512 --heads 8 --head-dim 64
  --qk-rope 32 --q-lora 128 --kv-lora 64 --ffn 1024 --moe-ffn 256 --shared-ffn 256 --experts 16
  --top-k 4 --seq 256 --vocab 1024 --batch 16 --mtp 1)
"$PLANSIM" model deepseek-v3 "${DS[@]}" -o "$TEST_TMP/ds.json"
cmp -s "$TEST_TMP/ds.json" "$G/deepseek-tiny.model.json" && ok "deepseek-tiny.model.json is the generator's" ||
  not_ok "deepseek-tiny.model.json is the generator's (regenerate it)"
golden deepseek-tp2-pp2-ep8 megatron "$G/deepseek-tp2-pp2-ep8.megatron.txt"
golden deepseek-tp2-pp2-ep8 megatron-bridge "$G/deepseek-tp2-pp2-ep8.megatron-bridge.yaml"
for f in megatron megatron-bridge; do
  x=megatron.txt
  [ $f = megatron-bridge ] && x=megatron-bridge.yaml
  python3 tests/cli/export_rules.py $f "$G/deepseek-tiny.model.json" "$G/deepseek-tp2-pp2-ep8.$x" 16 \
    "$G/deepseek-tp2-pp2-ep8.plan.json" >"$TEST_TMP/rules.log" 2>&1 &&
    ok "deepseek-tiny --format $f obeys Megatron-Core's rules and round-trips the model" ||
    not_ok "deepseek-tiny --format $f obeys the rules" "$(head -5 "$TEST_TMP/rules.log")"
  run export "$G/deepseek-tp2-pp2-ep8.plan.json" --check "$G/deepseek-tp2-pp2-ep8.$x"
  expect "deepseek-tiny --format $f: --check reads the golden back as the plan" 0 stdout-nonempty \
    stderr-empty "^matches the plan"
done
# A changed fact fails the rules: one dense layer too many, no shared expert, GQA beside MLA.
for e in "s/\[0\]\*1+\[1\]\*3/[0]*2+[1]*2/" "/--moe-shared-expert-intermediate-size/d" \
  "s/--multi-latent-attention/--multi-latent-attention --group-query-attention/" \
  "s/--mtp-num-layers 1/--mtp-num-layers 2/" "s/--moe-layer-freq '(\[0\]\*1+\[1\]\*3)'/--moe-layer-freq '([0]*1+[1]*4)'/"; do
  sed "$e" "$G/deepseek-tp2-pp2-ep8.megatron.txt" >"$TEST_TMP/ds-bad.sh"
  python3 tests/cli/export_rules.py megatron "$G/deepseek-tiny.model.json" "$TEST_TMP/ds-bad.sh" 16 \
    "$G/deepseek-tp2-pp2-ep8.plan.json" >/dev/null 2>&1 && not_ok "the rules reject: $e" ||
    ok "the rules reject the golden edited by: $e"
done
# Formats that cannot say MLA, shared experts or MTP refuse with the reason.
refused deepseek-tp2-pp2-ep8 torchtitan "multi-head latent attention \(kv_lora 64\).*not its deepseek_v3"
jq '.strategy |= {format, template, tp: 1, pp: 2, dp: 8, zero: 1}' "$G/deepseek-tp2-pp2-ep8.plan.json" \
  >"$TEST_TMP/ds-pp.json"
run export "$TEST_TMP/ds-pp.json" --format deepspeed-pipeline
expect "deepspeed-pipeline refuses the 3 + 1 (+ MTP) stages" 2 stdout-empty stderr-nonempty "" \
  "4 layers over 2 stages as 3 first, 1 last"
# The shipped 61-layer DeepSeek-V3 and 94-layer Qwen3-235B-A22B on 32 DGX H100 (256 GPUs).
for m in deepseek-v3 qwen3-235b-a22b; do
  printf '{"format": "plansim.plan/1", "model_file": "models/%s.json", "cluster_file":
  "topologies/dgx-h100-x32.json", "strategy": {"format": "plansim.strategy/1", "template":
  "megatron", "tp": 2, "pp": 2, "dp": 64, "ep": 8, "sequence_parallel": true, "zero": 1}}\n' \
    $m >"$TEST_TMP/$m.json"
  for f in megatron megatron-bridge; do
    run export "$TEST_TMP/$m.json" --format $f -o "$TEST_TMP/$m.$f"
    python3 tests/cli/export_rules.py $f models/$m.json "$TEST_TMP/$m.$f" 256 "$TEST_TMP/$m.json" \
      >"$TEST_TMP/rules.log" 2>&1 && ok "$m (tp 2, pp 2, ep 8) --format $f obeys the rules" ||
      not_ok "$m --format $f obeys the rules" "$(head -5 "$TEST_TMP/rules.log")" "$(head -2 "$ERR")"
    run export "$TEST_TMP/$m.json" --check "$TEST_TMP/$m.$f"
    expect "$m --format $f: --check matches the plan" 0 stdout-nonempty stderr-empty "^matches the plan"
  done
done
grep -q -- "--moe-layer-freq '(\[0\]\*3+\[1\]\*58)'" "$TEST_TMP/deepseek-v3.megatron" &&
  ok "DeepSeek-V3: --moe-layer-freq '([0]*3+[1]*58)'" || not_ok "DeepSeek-V3's --moe-layer-freq"
finish
