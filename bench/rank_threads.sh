#!/usr/bin/env bash
# Threads per rank: `mpirun -np 8` of a tiny model on this node, with OMP_NUM_THREADS set to
# the core count (every rank's OpenMP pool takes every core: what train did before it divided
# the cores, and what any rank count above the cores gives) and then without OMP_NUM_THREADS
# (train divides the node's cores among its ranks: here max(1, cores / 8) threads each).
# Prints ms per iteration (mean of the iterations after the first) and each run's wall time.
#   bench/rank_threads.sh [BINARY] (default build-dev/megatron); NP=8 ITERS=4 to change
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-./build-dev/megatron}
NP=${NP:-8}
ITERS=${ITERS:-4}
CORES=$(nproc)
ROOT=""; [ "$(id -u)" = 0 ] && ROOT=--allow-run-as-root
run() {  # label, env prefix
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$(env $2 mpirun $ROOT --oversubscribe -np $NP $BIN train --mock-data --num-layers 2 \
    --hidden-size 64 --num-attention-heads 4 --seq-length 64 --vocab-size 512 \
    --micro-batch-size 1 --global-batch-size $NP --train-iters $ITERS --lr 1e-3 \
    --log-interval 1 2>&1)
  t1=$(date +%s.%N)
  local ms threads
  ms=$(echo "$out" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
       awk 'NR > 1 { s += $1; n++ } END { printf "%.1f", s / n }')
  threads=$(echo "$out" | grep -m1 "threads per rank" | sed 's/.*threads per rank: //')
  printf "%-44s %12s %10.1f   %s\n" "$1" "$ms" "$(echo "$t1 - $t0" | bc)" "$threads"
}
echo "binary=$BIN ranks=$NP cores=$CORES iterations=$ITERS"
printf "%-44s %12s %10s   %s\n" run ms/iter wall_s "threads per rank (as logged)"
run "OMP_NUM_THREADS=$CORES (every rank all cores)" "OMP_NUM_THREADS=$CORES"
run "OMP_NUM_THREADS unset (cores / ranks)" "-u OMP_NUM_THREADS"
