#!/usr/bin/env bash
# What TensorBoard logging costs per training step on this CPU: the same GPT run without it,
# with --tensorboard-dir (every scalar each iteration), and with --tensorboard-dir plus
# --log-params-norm --log-num-zeros-in-grad (a pass over the parameters and one over the
# gradients each iteration), alternated ROUNDS times so machine drift hits all alike; also the
# event file's bytes per iteration.
#   bench/tensorboard_overhead.sh tiny|gpt2-124m      (MEGATRON=path/to/megatron to skip the build)
# Ends with: off_ms=A tb_ms=B stats_ms=C tb_bytes_per_iter=D
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
if [ -z "${MEGATRON:-}" ]; then ./scripts/build.sh >/dev/null; MEGATRON=./build/megatron; fi
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "config=$CONFIG layers=$L hidden=$H heads=$NH seq=$S vocab=$V micro_batch=$B threads=$THREADS"

run() {  # $1: extra flags
  "$MEGATRON" train --mock-data --num-layers $L --hidden-size $H --num-attention-heads $NH \
    --seq-length $S --vocab-size $V --micro-batch-size $B --global-batch-size $B \
    --train-iters $((ITERS + WARM)) --lr 1e-4 --log-interval 1 $1 |
    sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
    awk -v w=$WARM 'NR > w { s += $1; n++ } END { printf "%.1f", s / n }'
}
declare -A all
bytes=0
for r in $(seq 1 "$ROUNDS"); do
  for m in off tb stats; do
    rm -rf "$TMP/tb"
    flags=""
    [ $m != off ] && flags="--tensorboard-dir $TMP/tb"
    [ $m = stats ] && flags+=" --log-params-norm --log-num-zeros-in-grad"
    ms=$(run "$flags"); echo "round $r $m: ms=$ms"
    all[$m]+="$ms "
    [ $m = tb ] && bytes=$(cat "$TMP"/tb/events.out.tfevents.* | wc -c)
  done
done
mean() { echo "$1" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.1f", s / NF }'; }
echo "off_ms=$(mean "${all[off]}") tb_ms=$(mean "${all[tb]}") stats_ms=$(mean "${all[stats]}")" \
  "tb_bytes_per_iter=$((bytes / (ITERS + WARM)))"
