#!/bin/bash
# megatron plan's step time against measured training on this CPU: measures the machine's
# profile at each rank count (`mpirun -np N megatron plan --profile-device`, N = 1, 2: a
# profile is of N ranks sharing the node, as training runs them), then for each layout trains
# a few iterations and compares the measured iteration time with the plan's prediction from the
# profile of its rank count. Measured: each layout trained twice, the median of the iterations
# after the first two, the faster run's (a shared machine's other load only slows a run down;
# the profile's timings are best-of-3 likewise).
#   MG_BINARY=build-dev/megatron bench/plan_cpu.sh
set -euo pipefail
BIN=${MG_BINARY:-build-dev/megatron}
MPI="mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS"
export OMP_NUM_THREADS=1
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
for n in 1 2; do
  $MPI -np $n "$BIN" plan --profile-device --output "$TMP/cpu$n.json" < /dev/null > /dev/null
  cat "$TMP/cpu$n.json"
done
GPT="--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 \
 --max-position-embeddings 256 --vocab-size 8192 --train-iters 8 --lr 1e-4 --mock-data \
 --log-interval 1 --eval-iters 0"
LLAMA="$GPT --normalization RMSNorm --swiglu --ffn-hidden-size 704 --position-embedding-type rope \
 --untie-embeddings-and-output-weights --disable-bias-linear --group-query-attention --num-query-groups 4"
# The median iteration time after the first two of one training run; a failed run, or one with
# fewer than 6 timed iterations, stops the script naming the layout.
median_ms() {
  local np=$1; shift
  local log
  log=$($MPI -np "$np" "$BIN" train "$@" < /dev/null 2>&1) ||
    { echo "plan_cpu.sh: training failed (np $np: $*):" >&2; echo "$log" | tail -5 >&2; exit 1; }
  echo "$log" | sed -n 's/.*elapsed time per iteration (ms): *\([0-9.]*\).*/\1/p' | tail -n +3 |
    sort -n | awk -v what="np $np: $*" '{v[NR]=$1}
      END {if (NR < 6) {print "plan_cpu.sh: only " NR " timed iterations (" what ")" > "/dev/stderr"; exit 1}
           print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'
}
echo "| layout | measured ms/iter | planned ms/iter | error |"
echo "|---|---|---|---|"
while IFS='|' read -r np flags; do
  [ -z "$np" ] && continue
  eval "set -- $flags"
  first=$(median_ms "$np" "$@")
  second=$(median_ms "$np" "$@")
  measured=$(printf '%s\n%s\n' "$first" "$second" | sort -n | head -1 | awk '{printf "%.1f", $1}')
  planned=$("$BIN" plan --json --device-profile "$TMP/cpu$np.json" --num-gpus "$np" "$@" 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print("%.1f" % (1000*json.load(sys.stdin)["step"]["iteration_seconds"]))')
  echo "| np $np:$(echo "$flags" | sed -e "s/\$GPT//; s/\$LLAMA/llama/") | $measured | $planned | $(/usr/bin/python3 -c "print('%+.1f%%' % (100*($planned/$measured-1)))") |"
done <<'LAYOUTS'
1|$GPT --micro-batch-size 4 --global-batch-size 8
1|$GPT --micro-batch-size 2 --global-batch-size 8 --bf16
1|$GPT --micro-batch-size 4 --global-batch-size 8 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
1|$LLAMA --micro-batch-size 4 --global-batch-size 8
2|$GPT --micro-batch-size 4 --global-batch-size 8
2|$GPT --micro-batch-size 4 --global-batch-size 8 --use-distributed-optimizer
2|$GPT --micro-batch-size 4 --global-batch-size 8 --tensor-model-parallel-size 2
2|$GPT --micro-batch-size 4 --global-batch-size 8 --tensor-model-parallel-size 2 --sequence-parallel
2|$GPT --micro-batch-size 2 --global-batch-size 8 --pipeline-model-parallel-size 2
2|$GPT --micro-batch-size 1 --global-batch-size 8 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
2|$LLAMA --micro-batch-size 4 --global-batch-size 8 --context-parallel-size 2
2|$LLAMA --micro-batch-size 4 --global-batch-size 8 --tensor-model-parallel-size 2
LAYOUTS
