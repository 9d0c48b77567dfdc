#!/usr/bin/env bash
# The pipeline bubble, measured against the interleaved 1F1B schedule's analytic (p-1)/(v m):
# one tiny GPT on 8 ranks (PP x DP = 8) for v = 1, 2, 4 virtual stages per pipeline rank, each
# run at --timing-log-level 2, whose log prints each stage's idle fraction (p2p wait over
# forward-backward time, mean over the stage's ranks). Per v: the measured fraction per stage
# (mean over the log intervals after the first, which holds the warm-up), the analytic value
# (and its share of the forward-backward time, (p-1)/(v m + p-1), the measured fraction's
# denominator) and tokens/s (global batch x seq length over the mean time per iteration, same
# intervals).
# The ranks oversubscribe this machine's cores, so a rank's p2p wait includes the time it
# waited for a CPU, not only for its neighbour: compare the columns, not the absolute values.
#   [PP=8] [L=32] [H=256] [S=128] [ITERS=6] [MG_BINARY=path] bench/pipeline_bubble.sh
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
RANKS=8
PP=${PP:-8}
L=${L:-32}
ITERS=${ITERS:-6}
H=${H:-256} S=${S:-128} NH=4 V=256 B=1 M=8
DP=$((RANKS / PP))
G=$((B * DP * M))
BIN=${MG_BINARY:-./build/megatron}
[ -n "${MG_BINARY:-}" ] || ./scripts/build.sh megatron >/dev/null
ROOT_FLAG=""; [ "$(id -u)" = 0 ] && ROOT_FLAG="--allow-run-as-root"
echo "cpu=\"$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)\" cores=$(nproc)" \
     "ranks=$RANKS (oversubscribed: waits include OS scheduling delays) OMP_NUM_THREADS=1"
echo "model: layers=$L hidden=$H heads=$NH seq=$S vocab=$V; PP=$PP DP=$DP micro_batch=$B" \
     "m=$M micro-batches per iteration, global_batch=$G, $ITERS iterations, binary=$BIN"
export OMP_NUM_THREADS=1  # after nproc, which honours it
for v in 1 2 4; do
  out=$(mpirun $ROOT_FLAG --oversubscribe -np $RANKS "$BIN" train --mock-data --num-layers "$L" \
    --hidden-size $H --num-attention-heads $NH --seq-length $S --vocab-size $V \
    --micro-batch-size $B --global-batch-size $G --train-iters "$ITERS" --lr 1e-4 \
    --log-interval 1 --timing-log-level 2 --pipeline-model-parallel-size "$PP" \
    --num-virtual-stages-per-pipeline-rank $v 2>&1) || { echo "$out" >&2; exit 1; }
  # Intervals 2.. of the bubble lines: per-stage means, and the analytic value as printed.
  echo "$out" | grep -q '^ pipeline bubble' || { echo "$out" >&2; exit 1; }
  measured=$(echo "$out" | grep '^ pipeline bubble' | awk -F'stage ' 'NR > 1 {
      for (i = 2; i <= NF; ++i) { split($i, f, " "); s[i - 2] += f[2] } ++k; n = NF - 1 }
    END { for (i = 0; i < n; ++i) printf "%s%.3f", (i ? " " : ""), s[i] / k }')
  analytic=$(echo "$out" | grep '^ pipeline bubble' | tail -1 | sed 's/.*analytic (p-1)\/(v m) = //')
  tps=$(echo "$out" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
    awk -v tok=$((G * S)) 'NR > 1 { s += $1; ++k } END { printf "%.0f", tok / (s / k / 1000) }')
  # (p-1)/(v m) is the bubble over the ideal time; over the whole forward-backward time, which
  # the measured fractions divide by, it is (p-1)/(v m + p-1).
  share=$(awk -v p="$PP" -v v=$v -v m=$M 'BEGIN { printf "%.3f", (p - 1) / (v * m + p - 1) }')
  printf "v=%s  measured per stage: %s  analytic: %s (of forward-backward: %s)  tokens/s: %s\n" \
    "$v" "$measured" "$analytic" "$share" "$tps"
done
