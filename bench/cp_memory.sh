#!/usr/bin/env bash
# Activation memory per rank under context parallelism: one small-width GPT at a long sequence,
# CP = 1, 2, 4 (ranks = CP), each rank holding S/CP positions. Per CP: the start-up estimate
# ("activations + scratch" of the memory report, the figure the memory check uses), the measured
# peak of the rank's tensors less its params, grads and optimizer state, their ratios to CP = 1,
# and the closed form of docs/parallelism.md (fp32, LayerNorm, GELU, 1 micro-batch in flight):
#   bytes = 4 s b (L (16 h + 4 + a) + 20 h + V + 15) + 8,   s = S / CP, V the padded vocabulary
#   bench/cp_memory.sh          (MEGATRON=path skips the build and runs that binary)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MEGATRON:-}" ]; then
  ./scripts/build.sh megatron >/dev/null
  MEGATRON=./build/megatron
fi
ROOT_FLAG=""; [ "$(id -u)" = 0 ] && ROOT_FLAG="--allow-run-as-root"
L=2 H=64 NH=4 S=8192 V=500 VPAD=512 B=1
export OMP_NUM_THREADS=1

printf "%-3s %14s %8s %14s %8s %14s %8s\n" CP "estimate MiB" ratio "measured MiB" ratio \
  "formula MiB" ratio
for cp in 1 2 4; do
  out=$(mpirun $ROOT_FLAG --oversubscribe -np $cp "$MEGATRON" train --mock-data --num-layers $L \
    --hidden-size $H --num-attention-heads $NH --seq-length $S --max-position-embeddings $S \
    --vocab-size $V --micro-batch-size $B --global-batch-size $B --train-iters 1 --lr 1e-4 \
    --context-parallel-size $cp 2>&1) || { echo "$out" >&2; exit 1; }
  # params | grads | optimizer state | activations + scratch, in MiB (rank 0).
  read -r p g o a < <(echo "$out" | sed -n 's/.*memory (MiB, rank 0): params \([0-9.]*\) | grads \([0-9.]*\) | optimizer state \([0-9.]*\) .*activations + scratch \([0-9.]*\) .*/\1 \2 \3 \4/p')
  tensors=$(echo "$out" | sed -n 's/.*peak memory of rank 0 (MiB): resident [0-9.]* | tensors \([0-9.]*\).*/\1/p')
  measured=$(awk -v t="$tensors" -v p="$p" -v g="$g" -v o="$o" 'BEGIN { printf "%.3f", t - p - g - o }')
  formula=$(awk -v s=$((S / cp)) -v b=$B -v l=$L -v h=$H -v a=$NH -v v=$VPAD \
    'BEGIN { printf "%.3f", (4 * s * b * (l * (16 * h + 4 + a) + 20 * h + v + 15) + 8) / 1048576 }')
  [ $cp = 1 ] && { a1=$a; m1=$measured; f1=$formula; }
  awk -v cp=$cp -v a=$a -v m=$measured -v f=$formula -v a1=$a1 -v m1=$m1 -v f1=$f1 \
    'BEGIN { printf "%-3s %14.3f %8.3f %14.3f %8.3f %14.3f %8.3f\n", cp, a, a / a1, m, m / m1, f, f / f1 }'
done
