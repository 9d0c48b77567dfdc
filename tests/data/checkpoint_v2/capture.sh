#!/usr/bin/env bash
# Records the version-2 checkpoint fixture that tests/checkpoint/checkpoint_test.cpp loads: a
# tiny fp16 Llama-style model (RMSNorm, SwiGLU, RoPE, GQA, no biases; loss scaler state) saved
# at iteration 4 of 8 by the last binary that wrote version 2 (commit b4793f0), and the losses
# and loss scales it continues with. Usage: capture.sh MEGATRON_BINARY
set -euo pipefail
bin=$1
out=$(dirname "$0")
tiny="train --mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
 --group-query-attention --num-query-groups 1 --normalization RMSNorm --swiglu --ffn-hidden-size 32 \
 --position-embedding-type rope --disable-bias-linear --seq-length 8 --vocab-size 60 \
 --make-vocab-size-divisible-by 4 --micro-batch-size 2 --global-batch-size 4 --lr 2e-3 \
 --log-interval 1 --seed 7 --fp16 --initial-loss-scale 1024 --loss-scale-window 3 --train-iters 8"
rm -rf "$out/ck"
OMP_NUM_THREADS=1 "$bin" $tiny --exit-interval 4 --save "$out/ck" >/dev/null 2>&1
OMP_NUM_THREADS=1 "$bin" $tiny --load "$out/ck" 2>&1 |
  grep -oE "(iteration +[0-9]+/|lm loss: [^ ]+|loss scale: [^ ]+)" | paste -d' ' - - - >"$out/resume.txt"
