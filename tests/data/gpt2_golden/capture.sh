#!/usr/bin/env bash
# Records the GPT-2 loss lines that tests/train/gpt2_golden_test.cpp compares against: run once
# with the binary of the commit before the model redesign (04710e1), so the test shows GPT-2
# training did not change. Usage: capture.sh MEGATRON_BINARY
set -euo pipefail
bin=$1
out=$(dirname "$0")
model="train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
 --vocab-size 500 --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 2e-3 \
 --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 0.1 --log-interval 1 --seed 7"
mpi="mpirun --oversubscribe --allow-run-as-root"
run() {  # name ranks flags...
  local name=$1 np=$2; shift 2
  # Per log line: the iteration, the loss and (training lines) the grad norm.
  OMP_NUM_THREADS=1 $mpi -np "$np" "$bin" $model "$@" 2>&1 | grep -E "lm loss" |
    while IFS= read -r line; do
      grep -oE "(iteration +[0-9]+|lm loss( value)?: [^ ]+|grad norm: [^ ]+)" <<<"$line" | paste -sd' '
    done >"$out/$name.txt"
}
run f32 1
run bf16 1 --bf16
run fp16 1 --fp16
run tp2_sp 4 --tensor-model-parallel-size 2 --sequence-parallel
run pp2_eval 2 --pipeline-model-parallel-size 2 --eval-interval 5 --eval-iters 2
run recompute 1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
run reset_attention_mask 1 --reset-attention-mask --reset-position-ids --eod-mask-loss
# A version-1 checkpoint (tiny GPT-2 at iteration 4, with optimizer state) and the losses the
# old binary continues with from it: the new binary must load it and continue the same way.
tiny="train --mock-data --num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 8 \
 --vocab-size 100 --make-vocab-size-divisible-by 4 --micro-batch-size 2 --global-batch-size 4 \
 --lr 2e-3 --log-interval 1 --seed 7"
rm -rf "$out/v1_checkpoint"
OMP_NUM_THREADS=1 "$bin" $tiny --train-iters 4 --save "$out/v1_checkpoint" >/dev/null 2>&1
OMP_NUM_THREADS=1 "$bin" $tiny --train-iters 8 --load "$out/v1_checkpoint" 2>&1 | grep -E "lm loss" |
  while IFS= read -r line; do
    grep -oE "(iteration +[0-9]+|lm loss( value)?: [^ ]+|grad norm: [^ ]+)" <<<"$line" | paste -sd' '
  done >"$out/v1_resume.txt"
echo "$(grep -o "avx512[a-z_0-9]*\|avx2\|amx[a-z_0-9]*" /proc/cpuinfo | sort -u | paste -sd" ")" >"$out/isa.txt"
