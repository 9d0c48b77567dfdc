#!/usr/bin/env bash
# Training throughput of megatron-cpp vs the PyTorch reference on the same GPT-2 config, in one
# run, alternating the two (ROUNDS times each) so machine drift hits both alike.
#   bench/train_throughput.sh tiny|gpt2-124m
# Ends with: megatron_tokens_per_s=A torch_tokens_per_s=B ratio=A/B mfu=M
# MFU: model FLOPs per token (6 * params + 12 * layers * hidden * seq, full-attention
# convention) x tokens/s over the fp32 peak that bench/fma_peak measures with the same threads.
# The reference runs with OPENBLAS_CORETYPE=Cooperlake (Debian's OpenBLAS 0.3.21 can misdetect
# this CPU as Prescott) and with OpenBLAS's default detection; both are reported and the better
# of the two is the reference figure.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-tiny}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
PY=${MG_PYTHON:-/usr/bin/python3}

case "$CONFIG" in
  tiny) L=2 H=128 NH=4 S=128 V=1024 B=4 ITERS=20 WARM=3 ;;
  gpt2-124m) L=12 H=768 NH=12 S=256 V=50304 B=4 ITERS=6 WARM=2 ;;
  gpt2-124m-s1024) L=12 H=768 NH=12 S=1024 V=50304 B=4 ITERS=3 WARM=1 ;;
  *) echo "unknown config '$CONFIG' (tiny | gpt2-124m | gpt2-124m-s1024)" >&2; exit 2 ;;
esac

./scripts/build.sh >/dev/null
export OMP_NUM_THREADS=$THREADS
PEAK=$(./build/fma_peak | sed -n 's/.*fp32_peak_gflops=\([0-9.]*\).*/\1/p')
echo "config=$CONFIG layers=$L hidden=$H heads=$NH seq=$S vocab=$V micro_batch=$B threads=$THREADS fp32_peak_gflops=$PEAK"

ours() {
  # Per-iteration log lines; the first WARM iterations are dropped from the mean.
  ./build/megatron train --mock-data --num-layers $L --hidden-size $H --num-attention-heads $NH \
    --seq-length $S --vocab-size $V --micro-batch-size $B --global-batch-size $B \
    --train-iters $((ITERS + WARM)) --lr 1e-4 --log-interval 1 |
    sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
    awk -v w=$WARM -v tok=$((B * S)) 'NR > w { s += $1; n++ } END {
      printf "megatron_ms_per_iter=%.1f megatron_tokens_per_s=%.1f\n", s / n, tok / (s / n / 1000) }'
}
torch_ref() {
  "$PY" bench/torch_gpt2_train.py --num-layers $L --hidden-size $H --num-attention-heads $NH \
    --seq-length $S --vocab-size $V --micro-batch-size $B --iters $ITERS --warmup $WARM \
    --threads $THREADS
}
value() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

ours_all=() torch_all=() torch_default_all=()
for r in $(seq 1 "$ROUNDS"); do
  o=$(ours); echo "round $r: $o"; ours_all+=("$(echo "$o" | value megatron_tokens_per_s)")
  t=$(OPENBLAS_CORETYPE=Cooperlake torch_ref); echo "round $r: OPENBLAS_CORETYPE=Cooperlake $t"
  torch_all+=("$(echo "$t" | value torch_tokens_per_s)")
  d=$(unset OPENBLAS_CORETYPE; torch_ref); echo "round $r: OpenBLAS default $d"
  torch_default_all+=("$(echo "$d" | value torch_tokens_per_s)")
done

mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }
A=$(mean "${ours_all[@]}")
C=$(mean "${torch_all[@]}")
D=$(mean "${torch_default_all[@]}")
# The reference is the better of its two OpenBLAS settings.
Bt=$(awk -v c=$C -v d=$D 'BEGIN { print (c >= d ? c : d) }')
FLOPS_PER_TOKEN=$(awk -v L=$L -v H=$H -v S=$S -v V=$V 'BEGIN {
  P = V*H + S*H + L*(12*H*H + 13*H) + 2*H; printf "%.0f", 6*P + 12*L*H*S }')
MFU=$(awk -v a=$A -v f=$FLOPS_PER_TOKEN -v p=$PEAK 'BEGIN { printf "%.3f", a * f / (p * 1e9) }')
TORCH_MFU=$(awk -v a=$Bt -v f=$FLOPS_PER_TOKEN -v p=$PEAK 'BEGIN { printf "%.3f", a * f / (p * 1e9) }')
echo "torch_cooperlake_tokens_per_s=$C torch_default_openblas_tokens_per_s=$D torch_best_mfu=$TORCH_MFU"
echo "megatron_tokens_per_s=$A torch_tokens_per_s=$Bt ratio=$(awk -v a=$A -v b=$Bt 'BEGIN { printf "%.2f", a / b }') mfu=$MFU"
