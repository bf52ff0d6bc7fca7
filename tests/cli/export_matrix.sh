#!/usr/bin/env bash
# export_matrix.sh - every shipped model family x every exporter (docs/export.md, "The test
# matrix"). Rows: every models/*.json and every generator family of `plansim model` (its
# defaults); columns: every format `plansim export` names but plansim (the plan itself,
# tests/cli/export.sh). Each column exports one plan on one DGX A100 (8 GPUs; PLANS below). A cell
# is "yes" when the export exits 0, obeys the runtime's rules and round-trips the model
# (tests/cli/export_rules.py, which cites the runtime files and versions) and `export --check`
# reads it back as the plan; else the export must exit 2 with nothing on stdout, and the cell
# holds the refusal's reason. The table built from these runs must equal the one in
# docs/export.md (so the docs are this matrix); `export_matrix.sh --table` prints it. A broken
# export of each format must fail its rules check and --check (else the checks prove nothing).
# shellcheck source=tests/cli/lib.bash
source "$(dirname "$0")/lib.bash"
cd "$ROOT" || exit 1
if ! command -v python3 >/dev/null || ! python3 -c 'import tomllib' 2>/dev/null; then
  skip "model families x exporters" "python3 with tomllib is not installed"
  finish
  exit
fi
FORMATS=(megatron megatron-bridge torchtitan deepspeed deepspeed-pipeline gspmd)
declare -A PLANS=(
  [megatron]='"template": "megatron", "tp": 2, "pp": 2, "dp": 2, "sequence_parallel": true, "zero": 1, "overlap_grad_reduce": true'
  [torchtitan]='"template": "megatron", "tp": 2, "pp": 2, "dp": 2, "sequence_parallel": true, "zero": 3, "overlap_grad_reduce": true, "recompute": "full"'
  [deepspeed]='"template": "data_parallel", "dp": 4, "zero": 2, "overlap_grad_reduce": true'
  [deepspeed-pipeline]='"template": "megatron", "tp": 1, "pp": 2, "dp": 4, "zero": 1'
  [gspmd]='"template": "megatron", "tp": 2, "pp": 1, "dp": 4, "sequence_parallel": true'
)
PLANS[megatron-bridge]=${PLANS[megatron]}
declare -A WORLD=([megatron]=8 [megatron-bridge]=8 [torchtitan]=8 [deepspeed]=4
  [deepspeed-pipeline]=8/2 [gspmd]=8)

# The formats plansim names (its unknown-format message) must be the columns.
run export tests/golden/export/dp8.plan.json --format none
named=$(grep -o "(plansim, [^)]*)" "$ERR" | tr -d '()' | tr ',' '\n' | sed 's/^ //' |
  grep -v '^plansim$' | sort | tr '\n' ' ')
cols=$(printf '%s\n' "${FORMATS[@]}" | sort | tr '\n' ' ')
[ "$named" = "$cols" ] && ok "the matrix has a column per export format ($cols)" ||
  not_ok "the matrix has a column per export format" "plansim names: $named" "columns: $cols"

# Rows: shipped model files, then generator families (`plansim model --help`: "  NAME: ...").
rows=()
for m in models/*.json; do rows+=("$m"); done
run model --help
for fam in $(sed -n 's/^  \([a-z0-9]*\): .*/\1/p' "$OUT"); do rows+=("plansim model $fam"); done
# LLaMA-shaped MoE (SwiGLU experts, 8 of them, top-2), dropless and with a capacity factor: the
# small llama below with its FFN made experts by tests/cli/export_moe_model.py.
SMALL=(--layers 4 --hidden 512 --heads 8 --seq 256 --vocab 1024 --ffn 1024 --flash)
"$PLANSIM" model llama "${SMALL[@]}" -o "$TEST_TMP/small-llama.json"
rows+=("llama MoE dropless" "llama MoE capacity 1.25")

reason() { # the refusal's reason in a few words: after "differs: " when it says so, to ( : ;
  sed 's/.*cannot export to [a-z-]*: //; s/.*differs: //; s/ (.*//; s/[:;].*//' "$1" | head -1 |
    awk '{ if (length($0) > 70) { $0 = substr($0, 1, 70); sub(/ [^ ]*$/, "") } print }' | sed 's/|/\\|/g'
}

check_yes() { # check_yes FORMAT MODEL PLAN FILE LABEL
  if ! python3 tests/cli/export_rules.py "$1" "$2" "$4" "${WORLD[$1]}" "$3" >"$TEST_TMP/rules.log" 2>&1; then
    not_ok "$5: obeys the runtime's rules" "$(head -3 "$TEST_TMP/rules.log")"
    return 1
  fi
  STATUS=0
  "$PLANSIM" export "$3" --check "$4" >"$OUT" 2>"$ERR" || STATUS=$?
  if [ "$STATUS" -ne 0 ] || ! grep -q "^matches the plan" "$OUT"; then
    not_ok "$5: export --check reads it back as the plan" "$(tail -3 "$OUT")" "$(head -2 "$ERR")"
    return 1
  fi
  ok "$5: obeys the runtime's rules, round-trips the model and --check matches the plan"
}

TABLE="$TEST_TMP/table.md"
{
  printf '| model |'
  printf ' %s |' "${FORMATS[@]}"
  printf '\n|---|'
  printf -- '---|%.0s' "${FORMATS[@]}"
  printf '\n'
} >"$TABLE"
i=0
for row in "${rows[@]}"; do
  i=$((i + 1))
  if [ "${row#llama MoE }" != "$row" ]; then
    model="$TEST_TMP/moe-$i.json"
    python3 tests/cli/export_moe_model.py "$TEST_TMP/small-llama.json" 8 2 "${row##* }" >"$model"
    label="$row"
  elif [ "${row#plansim model }" != "$row" ]; then
    model="$TEST_TMP/gen-${row#plansim model }.json"
    "$PLANSIM" model "${row#plansim model }" -o "$model" 2>"$ERR" ||
      not_ok "$row writes a model" "$(head -2 "$ERR")"
    label="\`$row\`"
  else model=$row label="\`$row\`"; fi
  printf '| %s |' "$label" >>"$TABLE"
  for f in "${FORMATS[@]}"; do
    plan="$TEST_TMP/plan-$i-$f.json"
    printf '{"format": "plansim.plan/1", "model_file": "%s", "cluster_file": "%s",
  "strategy": {"format": "plansim.strategy/1", %s}}\n' "$model" topologies/dgx-a100-x1.json \
      "${PLANS[$f]}" >"$plan"
    run export "$plan" --format "$f" -o "$TEST_TMP/out-$i.$f"
    name="$row --format $f"
    if [ "$STATUS" -eq 0 ]; then
      check_yes "$f" "$model" "$plan" "$TEST_TMP/out-$i.$f" "$name" && cell=yes || cell=FAILS
    elif [ "$STATUS" -eq 2 ] && [ ! -s "$OUT" ] && grep -q "cannot export to $f: " "$ERR"; then
      cell="refused: $(reason "$ERR")"
      ok "$name is refused: $(cut -c1-160 "$ERR")"
    else
      cell="ERROR"
      not_ok "$name exports or is refused with its reason" "status $STATUS" "$(head -2 "$ERR")"
    fi
    printf ' %s |' "$cell" >>"$TABLE"
  done
  printf '\n' >>"$TABLE"
done

if [ "${1:-}" = --table ]; then
  cat "$TABLE"
  finish
  exit
fi
sed -n '/^<!-- export-matrix begin -->$/,/^<!-- export-matrix end -->$/p' docs/export.md |
  grep '^|' >"$TEST_TMP/doc.md"
if diff -u "$TEST_TMP/doc.md" "$TABLE" >"$TEST_TMP/diff"; then
  ok "docs/export.md's matrix is this run's ($(($(wc -l <"$TABLE") - 2)) models x ${#FORMATS[@]} formats)"
else not_ok "docs/export.md's matrix is this run's (tests/cli/export_matrix.sh --table)" \
  "$(head -20 "$TEST_TMP/diff")"; fi

# A dropless LLaMA-shaped MoE without a pipeline runs in torchtitan (qwen3, FSDP2 x tp), and
# exports to Megatron-LM without a capacity factor; with one, torchtitan refuses it.
moe_plan() { # moe_plan MODE FILE: tp 2 x dp 4, FSDP2
  python3 tests/cli/export_moe_model.py "$TEST_TMP/small-llama.json" 8 2 "$1" >"$TEST_TMP/moe-$1.json"
  printf '{"format": "plansim.plan/1", "model_file": "%s", "cluster_file": "%s",
  "strategy": {"format": "plansim.strategy/1", "template": "megatron", "tp": 2, "pp": 1, "dp": 4,
  "sequence_parallel": true, "zero": 3, "overlap_grad_reduce": true}}\n' \
    "$TEST_TMP/moe-$1.json" topologies/dgx-a100-x1.json >"$2"
}
moe_plan dropless "$TEST_TMP/moe-tt.json"
run export "$TEST_TMP/moe-tt.json" --format torchtitan -o "$TEST_TMP/moe.toml"
[ "$STATUS" -eq 0 ] && check_yes torchtitan "$TEST_TMP/moe-dropless.json" "$TEST_TMP/moe-tt.json" \
  "$TEST_TMP/moe.toml" "a dropless MoE, tp 2 x FSDP2 4 --format torchtitan" ||
  not_ok "a dropless MoE exports to torchtitan" "status $STATUS" "$(head -2 "$ERR")"
grep -q '^name = "qwen3"' "$TEST_TMP/moe.toml" && ok "a MoE runs as torchtitan's qwen3 model" ||
  not_ok "a MoE runs as torchtitan's qwen3 model"
moe_plan 1.25 "$TEST_TMP/moe-tt-cf.json"
run export "$TEST_TMP/moe-tt-cf.json" --format torchtitan
[ "$STATUS" -eq 2 ] && grep -q "dropless" "$ERR" && ok "a capacity-bound MoE: torchtitan refuses" ||
  not_ok "a capacity-bound MoE: torchtitan refuses (dropless)" "status $STATUS"

# Expert and context parallelism (Megatron-Core's ep, etp, cp): the dropless MoE with ep 4
# (experts over tp x dp, etp = tp) and with cp 2, ep 2, etp 1 exports to Megatron-LM and
# Megatron-Bridge with the degrees the plan has (export_rules.py reads them back and applies
# arguments.py's and parallel_state.py's rules); torchtitan takes ep under FSDP2 and refuses cp;
# DeepSpeed refuses both with the reason.
moe_par() { # moe_par FILE STRATEGY-KEYS
  printf '{"format": "plansim.plan/1", "model_file": "%s", "cluster_file": "%s",
  "strategy": {"format": "plansim.strategy/1", "template": "megatron", "pp": 1, %s}}\n' \
    "$TEST_TMP/moe-dropless.json" topologies/dgx-a100-x1.json "$2" >"$1"
}
EP='"tp": 2, "dp": 4, "ep": 4, "sequence_parallel": true'
CP='"tp": 2, "dp": 2, "cp": 2, "ep": 2, "etp": 1, "sequence_parallel": true'
moe_par "$TEST_TMP/moe-ep.json" "$EP, \"zero\": 1"
moe_par "$TEST_TMP/moe-cp.json" "$CP, \"zero\": 1"
moe_par "$TEST_TMP/moe-ep-fsdp.json" "$EP, \"zero\": 3, \"overlap_grad_reduce\": true"
moe_par "$TEST_TMP/moe-cp-fsdp.json" "$CP, \"zero\": 3, \"overlap_grad_reduce\": true"
moe_par "$TEST_TMP/moe-cp-ddp.json" "$CP" # gspmd: its mesh axes ranked with gaps crashed the export
for c in "moe-ep megatron --expert-model-parallel-size.4" "moe-ep megatron-bridge expert_model_parallel_size:.4" \
  "moe-cp megatron --context-parallel-size.2" "moe-cp megatron-bridge context_parallel_size:.2" \
  "moe-ep-fsdp torchtitan expert_parallel_degree.=.4" 'moe-cp-ddp gspmd "cp"'; do
  read -r p f want <<<"$c"
  run export "$TEST_TMP/$p.json" --format "$f" -o "$TEST_TMP/$p.$f"
  if [ "$STATUS" -eq 0 ] && grep -q -- "$want" "$TEST_TMP/$p.$f"; then
    check_yes "$f" "$TEST_TMP/moe-dropless.json" "$TEST_TMP/$p.json" "$TEST_TMP/$p.$f" "$p --format $f"
  else not_ok "$p exports to $f with $want" "status $STATUS" "$(head -2 "$ERR")"; fi
done
for c in "moe-ep deepspeed expert.parallelism.4" "moe-cp deepspeed-pipeline expert.parallelism.2" \
  "moe-cp-fsdp torchtitan context.parallelism.2"; do
  read -r p f want <<<"$c"
  run export "$TEST_TMP/$p.json" --format "$f"
  [ "$STATUS" -eq 2 ] && grep -q "$want" "$ERR" && ok "$p --format $f is refused: $want" ||
    not_ok "$p --format $f is refused ($want)" "status $STATUS" "$(head -2 "$ERR")"
done
# A changed degree fails the rules' round trip and --check.
sed 's/--expert-model-parallel-size 4/--expert-model-parallel-size 2/' "$TEST_TMP/moe-ep.megatron" \
  >"$TEST_TMP/moe-ep-bad.sh"
python3 tests/cli/export_rules.py megatron "$TEST_TMP/moe-dropless.json" "$TEST_TMP/moe-ep-bad.sh" 8 \
  "$TEST_TMP/moe-ep.json" >/dev/null && not_ok "ep 2 for the plan's ep 4 fails the rules" ||
  ok "ep 2 for the plan's ep 4 fails the rules' round trip"
sed 's/--context-parallel-size 2/--context-parallel-size 4/' "$TEST_TMP/moe-cp.megatron" >"$TEST_TMP/moe-cp-bad.sh"
python3 tests/cli/export_rules.py megatron "$TEST_TMP/moe-dropless.json" "$TEST_TMP/moe-cp-bad.sh" 8 \
  "$TEST_TMP/moe-cp.json" >/dev/null && not_ok "cp 4 with tp 2 x pp 1 on 8 fails the rules" ||
  ok "cp 4 for the plan's cp 2 fails the rules"

# A broken export fails both checks: one changed setting per format (a model fact, the batch,
# the stage count, a mesh axis named twice).
M=models/llama2-7b.json
broken() { # broken FORMAT SED-EXPR
  local plan="$TEST_TMP/broken-$1.json" file="$TEST_TMP/broken.$1"
  printf '{"format": "plansim.plan/1", "model_file": "%s", "cluster_file": "%s",
  "strategy": {"format": "plansim.strategy/1", %s}}\n' $M topologies/dgx-a100-x1.json \
    "${PLANS[$1]}" >"$plan"
  "$PLANSIM" export "$plan" --format "$1" | sed -E "$2" >"$file"
  if python3 tests/cli/export_rules.py "$1" $M "$file" "${WORLD[$1]}" >/dev/null 2>&1; then
    not_ok "a broken $1 export fails the rules check"
  else ok "a broken $1 export fails the rules check"; fi
  STATUS=0
  "$PLANSIM" export "$plan" --check "$file" >"$OUT" 2>"$ERR" || STATUS=$?
  [ "$STATUS" -eq 1 ] && grep -q "^differs: " "$OUT" && ok "a broken $1 export: --check exits 1" ||
    not_ok "a broken $1 export: --check exits 1 listing the difference" "status $STATUS"
}
broken megatron 's/--num-layers 32/--num-layers 33/'
broken megatron-bridge 's/^  seq_length: 4096/  seq_length: 2048/'
broken torchtitan 's/^global_batch_size = .*/global_batch_size = 1000/'
broken deepspeed 's/"train_batch_size":[[:space:]]*[0-9]+/"train_batch_size": 1000/'
broken deepspeed-pipeline 's/num_stages=2/num_stages=3/'
broken gspmd 's/"layer\.0\.w_q":[[:space:]]*\[null, "tp"/"layer.0.w_q": ["tp", "tp"/'
finish
