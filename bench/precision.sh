#!/usr/bin/env bash
# Step time of one GPT config in fp32, bf16 and fp16 on this CPU, alternating the three
# (ROUNDS times each) so machine drift hits all alike; also each run's parameter + activation
# memory from the start-up report and the final loss (same data, same init).
#   bench/precision.sh tiny|gpt2-124m
# Ends with: fp32_ms=A bf16_ms=B fp16_ms=C bf16_speedup=A/B fp16_speedup=A/C
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-tiny}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
case "$CONFIG" in
  tiny) L=2 H=128 NH=4 S=128 V=1024 B=4 ITERS=20 WARM=3 ;;
  gpt2-124m) L=12 H=768 NH=12 S=256 V=50304 B=4 ITERS=6 WARM=2 ;;
  *) echo "unknown config '$CONFIG' (tiny | gpt2-124m)" >&2; exit 2 ;;
esac
./scripts/build.sh >/dev/null
export OMP_NUM_THREADS=$THREADS
echo "config=$CONFIG layers=$L hidden=$H heads=$NH seq=$S vocab=$V micro_batch=$B threads=$THREADS"

run() {  # $1: precision flag (may be empty)
  local out
  out=$(./build/megatron train --mock-data --num-layers $L --hidden-size $H \
    --num-attention-heads $NH --seq-length $S --vocab-size $V --micro-batch-size $B \
    --global-batch-size $B --train-iters $((ITERS + WARM)) --lr 1e-4 --log-interval 1 \
    --initial-loss-scale 4096 $1)
  echo "$out" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
    awk -v w=$WARM 'NR > w { s += $1; n++ } END { printf "ms=%.1f ", s / n }'
  echo "$out" | sed -n 's/.*memory (MiB, rank 0): params \([0-9.]*\) .*activations + scratch \([0-9.]*\) .*/params_mib=\1 activations_mib=\2 /p'
  echo "$out" | grep -o 'lm loss: [0-9.E+-]*' | tail -1 | sed 's/lm loss: /final_loss=/'
}
value() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
declare -A all
for r in $(seq 1 "$ROUNDS"); do
  for p in fp32 bf16 fp16; do
    flag=""; [ $p != fp32 ] && flag="--$p"
    o=$(run "$flag" | tr '\n' ' '); echo "round $r $p: $o"
    all[$p]+="$(echo "$o" | value ms) "
  done
done
mean() { printf '%s\n' $@ | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }
A=$(mean ${all[fp32]}) Bm=$(mean ${all[bf16]}) C=$(mean ${all[fp16]})
echo "fp32_ms=$A bf16_ms=$Bm fp16_ms=$C bf16_speedup=$(awk -v a=$A -v b=$Bm 'BEGIN{printf "%.2f", a/b}') fp16_speedup=$(awk -v a=$A -v c=$C 'BEGIN{printf "%.2f", a/c}')"
