#!/usr/bin/env bash
# Sets up (if needed), builds, then trains a small GPT on Megatron's mock dataset and prints the
# Megatron-format log: the loss falls from ln(V) toward zero as the model learns the counting
# sequences. Extra arguments are passed to `megatron train` (later flags win).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh >/dev/null
exec ./build/megatron train \
  --mock-data --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --vocab-size 1024 --micro-batch-size 4 --global-batch-size 16 --train-iters 200 \
  --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 20 --weight-decay 0.1 \
  --clip-grad 1.0 --adam-beta2 0.95 --log-interval 10 --eval-interval 100 --eval-iters 4 "$@"
