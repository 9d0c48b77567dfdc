#!/usr/bin/env bash
# Throughput cost of dropout (--hidden-dropout 0.1 --attention-dropout 0.1, Megatron's defaults)
# against the same run with both at 0, on the GPT-2 124M shape at seq 256 on the CPU, fp32 and
# bf16, in one run: the two settings alternate ROUNDS times per precision so machine drift hits
# both alike. Validates first: with dropout the first iteration's loss differs from the
# no-dropout loss (the masks are live) and both are finite.
#   [THREADS=2] [ROUNDS=2] [ITERS=3] [MG_BINARY=path] bench/dropout_cost.sh
# Prints per round ms/iteration (mean over the iterations after the first) and tokens/s, then per
# precision: dropout_cost=(t_dropout / t_plain - 1) in percent, and the load average around the
# run (the machine is shared: a load above THREADS means other processes took CPU time).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
ITERS=${ITERS:-3}
BIN=${MG_BINARY:-./build/megatron}
[ -n "${MG_BINARY:-}" ] || ./scripts/build.sh megatron >/dev/null
B=4 S=256 L=${L:-12} H=${H:-768} NH=${NH:-12}  # L/H/NH smaller only to try the script
MODEL="train --mock-data --num-layers $L --hidden-size $H --num-attention-heads $NH --seq-length $S
  --vocab-size 50257 --micro-batch-size $B --global-batch-size $B --lr 1e-4 --log-interval 1
  --seed 1234 --train-iters $ITERS"
DROP="--hidden-dropout 0.1 --attention-dropout 0.1"
PLAIN="--hidden-dropout 0 --attention-dropout 0"

run() {  # precision flag, dropout flags -> the log
  OMP_NUM_THREADS=$THREADS "$BIN" $MODEL $1 $2 2>&1
}
ms_per_iter() {  # mean elapsed ms over iterations 2..ITERS
  sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
    awk 'NR > 1 { s += $1; n++ } END { if (n) printf "%.1f", s / n; else print "nan" }'
}
first_loss() { sed -n 's/.*lm loss: \([0-9.E+-]*\).*/\1/p' | head -1; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), threads $THREADS, L $L H $H NH $NH B $B S $S"
for P in fp32 bf16; do
  PF=""; [ "$P" = bf16 ] && PF="--bf16"
  d=$(run "$PF --train-iters 1" "$DROP"); p=$(run "$PF --train-iters 1" "$PLAIN")
  ld=$(echo "$d" | first_loss); lp=$(echo "$p" | first_loss)
  awk -v a="$ld" -v b="$lp" 'BEGIN { exit !(a == a + 0 && b == b + 0 && a != b) }' ||
    { echo "validation failed ($P): loss with dropout '$ld', without '$lp'" >&2; exit 1; }
  echo "$P validated: iteration-1 loss $ld with dropout, $lp without"
  td=() tp=()
  for r in $(seq 1 "$ROUNDS"); do
    a=$(run "$PF" "$DROP" | ms_per_iter); b=$(run "$PF" "$PLAIN" | ms_per_iter)
    td+=("$a"); tp+=("$b")
    echo "$P round $r: dropout ms_per_iter=$a tokens_per_s=$(awk -v t="$a" -v n=$((B * S)) 'BEGIN { printf "%.0f", n / t * 1000 }')" \
      " no-dropout ms_per_iter=$b tokens_per_s=$(awk -v t="$b" -v n=$((B * S)) 'BEGIN { printf "%.0f", n / t * 1000 }')"
  done
  mean() { printf "%s\n" "$@" | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }
  A=$(mean "${td[@]}") Bm=$(mean "${tp[@]}")
  echo "$P: dropout_ms_per_iter=$A no_dropout_ms_per_iter=$Bm dropout_cost=$(awk -v a="$A" -v b="$Bm" 'BEGIN { printf "%.1f%%", (a / b - 1) * 100 }')"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
