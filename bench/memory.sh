#!/usr/bin/env bash
# Peak memory per rank for one model at DP = 1, 2, 4 with and without the distributed
# optimizer, in fp32 and bf16: the optimizer-state bytes each rank reports next to the formula
# value (fp32: 8/d bytes per parameter; bf16: 12/d, fp32 main params included), the
# tensors' own peak count, and the process's peak resident set (which includes MPI, oneDNN and
# the runtime, ~300 MB here).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh >/dev/null
ROOT_FLAG=""; [ "$(id -u)" = 0 ] && ROOT_FLAG="--allow-run-as-root"
MODEL="--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --vocab-size 8192"
printf "%-5s %-4s %-7s %11s %11s %16s %16s %14s %14s\n" prec dp distopt "params MiB" "grads MiB" \
  "opt state MiB" "formula MiB" "tensors MiB" "RSS MiB"
for prec in fp32 bf16; do
  pflag=""; [ $prec = bf16 ] && pflag="--bf16"
  for dp in 1 2 4; do
    for flag in "" "--use-distributed-optimizer"; do
      out=$(OMP_NUM_THREADS=1 mpirun $ROOT_FLAG --oversubscribe -np $dp ./build/megatron train --mock-data \
        $MODEL --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --lr 1e-4 $flag $pflag 2>&1)
      pg=$(echo "$out" | sed -n 's/.*memory (MiB, rank 0): params \([0-9.]*\) | grads \([0-9.]*\).*/\1 \2/p')
      state=$(echo "$out" | sed -n 's/.*optimizer state \([0-9.]*\) (formula \([0-9.]*\)).*/\1 \2/p' | head -1)
      peak=$(echo "$out" | grep "peak memory of rank 0" | sed -n 's/.*resident \([0-9.]*\) | tensors \([0-9.]*\).*/\2 \1/p')
      printf "%-5s %-4s %-7s %11s %11s %16s %16s %14s %14s\n" $prec $dp "${flag:+yes}" $pg $state $peak
    done
  done
done
