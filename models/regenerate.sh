#!/bin/sh
# Regenerates the shipped model files with the built plansim so they stay in
# sync with the generators (models/generators.c). Usage: models/regenerate.sh [PLANSIM]
# Batch sizes (global, sequences or samples per iteration) follow the literature;
# docs/model.md lists the sources.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
plansim=${1:-"$here/../build/cli/plansim"}
gen() { out=$1; shift; "$plansim" model "$@" -o "$here/$out"; }

# GPT-3 shapes (Brown et al. 2020, Table 2.1), vocab 51200 as in Megatron-LM.
gen gpt-1.3b.json gpt --name gpt-1.3b --layers 24 --hidden 2048 --heads 16 --seq 2048 --vocab 51200 --batch 512
gen gpt-7b.json gpt --name gpt-7b --layers 32 --hidden 4096 --heads 32 --seq 2048 --vocab 51200 --batch 1024
# Narayanan et al. 2021 (Megatron-LM): 175B with global batch 1536.
gen gpt-175b.json gpt --name gpt-175b --layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 51200 --batch 1536
# Korthikanti et al. 2022, Table 3 (../shared/calibration/korthikanti2022_iterations.csv).
gen gpt-22b.json gpt --name gpt-22b --layers 48 --hidden 6144 --heads 64 --seq 2048 --vocab 51200 --batch 4
gen gpt-530b.json gpt --name gpt-530b --layers 105 --hidden 20480 --heads 128 --seq 2048 --vocab 51200 --batch 280
# Narayanan et al. 2021, Table 1: 1T on 3072 GPUs with global batch 3072 (strategies/megatron-1t-x384.json).
gen gpt-1t.json gpt --name gpt-1t --layers 128 --hidden 25600 --heads 160 --seq 2048 --vocab 51200 --batch 3072
# LLaMA-2 (Touvron et al. 2023): 4M-token batches of 4096-token sequences.
gen llama2-7b.json llama --name llama2-7b
gen llama2-70b.json llama --name llama2-70b --layers 80 --hidden 8192 --heads 64 --kv-heads 8 --ffn 28672 --batch 1024
gen bert-large.json bert --name bert-large
gen moe-1.3b-8e.json moe --name moe-1.3b-8e --experts 8 --top-k 2
# GPT-3 175B as MLPerf Training runs it (mlcommons/training run_gpt3.sh: seq 2048, batch 1536,
# no dropout); the family's defaults (models/gen_recipes.c).
gen gpt3-175b-mlperf.json gpt3-mlperf --name gpt3-175b-mlperf
# Decoder families (models/gen_decoder.c), defaults from each model's published config.json
# (models/gen_recipes.c, docs/model.md); MoE routing dropless as Megatron-Core and torchtitan run it.
gen qwen3-8b.json qwen3 --name qwen3-8b
gen qwen3-32b.json qwen3 --name qwen3-32b --layers 64 --hidden 5120 --heads 64 --ffn 25600
gen qwen3-30b-a3b.json qwen3-moe --name qwen3-30b-a3b
gen qwen3-235b-a22b.json qwen3-moe --name qwen3-235b-a22b --layers 94 --hidden 4096 --heads 64 --moe-ffn 1536 --batch 1024
gen mixtral-8x7b.json mixtral --name mixtral-8x7b
gen deepseek-v3.json deepseek-v3 --name deepseek-v3
gen gpt-oss-120b.json gpt-oss --name gpt-oss-120b
gen mlp.json mlp --name mlp
gen alexnet.json alexnet --name alexnet
gen resnet50.json resnet --name resnet50 --depth 50
gen resnet101.json resnet --name resnet101 --depth 101
gen inception-v3.json inception --name inception-v3
gen dlrm.json dlrm --name dlrm
