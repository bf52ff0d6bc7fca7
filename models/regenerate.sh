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
gen mlp.json mlp --name mlp
gen alexnet.json alexnet --name alexnet
gen resnet50.json resnet --name resnet50 --depth 50
gen resnet101.json resnet --name resnet101 --depth 101
gen inception-v3.json inception --name inception-v3
gen dlrm.json dlrm --name dlrm
