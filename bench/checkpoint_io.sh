#!/usr/bin/env bash
# Checkpoint save and load time and bandwidth for GPT-2 124M (12 layers, hidden 768, vocab
# 50304) with Adam state, per layout: one training iteration, --save (every rank writes its
# shard, fsync, CRC-32, atomic publish), then a --load of that checkpoint. Save MB = bytes of
# all shards; save time = from the first rank starting to the checkpoint being published; load
# time/MB = rank 0's (it verifies the CRC of every shard file it needs, streamed, and reads its
# pieces by byte ranges).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh >/dev/null
ROOT_FLAG=""; [ "$(id -u)" = 0 ] && ROOT_FLAG="--allow-run-as-root"
DIR=${CKPT_BENCH_DIR:-build/bench_ckpt}
MODEL="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 128 --vocab-size 50257
  --micro-batch-size 1 --lr 1e-4 --mock-data"
printf "%-34s %9s %10s %10s %10s %10s\n" layout "save MB" "save s" "save MB/s" "load s" "load MB/s"
for layout in "1:" "2:" "2:--use-distributed-optimizer" "2:--tensor-model-parallel-size 2" \
              "2:--pipeline-model-parallel-size 2" "2:--bf16 --use-distributed-optimizer"; do
  n=${layout%%:*}; flags=${layout#*:}
  rm -rf "$DIR"
  gbs=$n; [[ "$flags" == *tensor* || "$flags" == *pipeline* ]] && gbs=1
  save=$(OMP_NUM_THREADS=1 mpirun $ROOT_FLAG --oversubscribe -np $n ./build/megatron train $MODEL \
    --global-batch-size $gbs --train-iters 1 $flags --save "$DIR" 2>&1 | grep "saved checkpoint")
  load=$(OMP_NUM_THREADS=1 mpirun $ROOT_FLAG --oversubscribe -np $n ./build/megatron train $MODEL \
    --global-batch-size $gbs --train-iters 1 $flags --load "$DIR" 2>&1 | grep "loaded checkpoint")
  s_secs=$(echo "$save" | sed -n 's/.* in \([0-9.e-]*\) s (\([0-9.]*\) MB, \([0-9.]*\) MB\/s).*/\1/p')
  s_mb=$(echo "$save" | sed -n 's/.* in \([0-9.e-]*\) s (\([0-9.]*\) MB, \([0-9.]*\) MB\/s).*/\2/p')
  s_bw=$(echo "$save" | sed -n 's/.* in \([0-9.e-]*\) s (\([0-9.]*\) MB, \([0-9.]*\) MB\/s).*/\3/p')
  l_secs=$(echo "$load" | sed -n 's/.*) in \([0-9.e-]*\) s (rank 0 read and verified \([0-9.]*\) MB, \([0-9.]*\) MB\/s).*/\1/p')
  l_bw=$(echo "$load" | sed -n 's/.*) in \([0-9.e-]*\) s (rank 0 read and verified \([0-9.]*\) MB, \([0-9.]*\) MB\/s).*/\3/p')
  printf "%-34s %9s %10s %10s %10s %10s\n" "np $n ${flags:-(plain)}" "$s_mb" "$s_secs" "$s_bw" "$l_secs" "$l_bw"
done
rm -rf "$DIR"
