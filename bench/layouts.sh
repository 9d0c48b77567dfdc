#!/usr/bin/env bash
# Tokens/s and per-step communication of one small GPT under several parallel layouts on this
# machine (2 cores: every multi-rank layout is oversubscribed, so only relative overheads mean
# anything), with the closed-form volumes of docs/reference/formulas.md beside the counted ones.
#   bench/layouts.sh            (ITERS=30 by default; the first 5 iterations are not timed)
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${ITERS:-30}
ROOT_FLAG=""; [ "$(id -u)" = 0 ] && ROOT_FLAG="--allow-run-as-root"
L=4 H=128 NH=4 S=128 V=1024 B=4 G=16
./scripts/build.sh >/dev/null
export OMP_NUM_THREADS=1

run() {  # ranks, flags
  mpirun $ROOT_FLAG --oversubscribe -np "$1" ./build/megatron train --mock-data --num-layers $L \
    --hidden-size $H --num-attention-heads $NH --seq-length $S --vocab-size $V \
    --micro-batch-size $B --global-batch-size $G --train-iters $ITERS --lr 1e-4 \
    --log-interval 1 $2 2>&1
}
field() { sed -n "s/.*| $1: \([0-9.E+-]*\) |.*/\1/p" | tail -1; }

echo "config: layers=$L hidden=$H heads=$NH seq=$S vocab=$V micro_batch=$B global_batch=$G, OMP_NUM_THREADS=1 per rank"
printf "%-34s %5s %10s %14s %14s %14s %10s\n" layout ranks tokens/s tp_bytes pp_bytes dp_bytes emb_bytes
for spec in "1|" "2|--tensor-model-parallel-size 2" "2|--tensor-model-parallel-size 2 --sequence-parallel" \
            "2|--pipeline-model-parallel-size 2" "2|" "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2" \
            "4|--tensor-model-parallel-size 2"; do
  n=${spec%%|*}; flags=${spec#*|}
  out=$(run "$n" "$flags")
  ms=$(echo "$out" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' | awk 'NR > 5 { s += $1; k++ } END { print s / k }')
  tps=$(awk -v ms="$ms" -v t=$((G * S)) 'BEGIN { printf "%.0f", t / (ms / 1000) }')
  printf "%-34s %5s %10s %14s %14s %14s %10s\n" "${flags:-(single rank / DP)}" "$n" "$tps" \
    "$(echo "$out" | field 'tp comm bytes')" "$(echo "$out" | field 'pp comm bytes')" \
    "$(echo "$out" | field 'dp comm bytes')" "$(echo "$out" | field 'embedding comm bytes')"
done
