#!/usr/bin/env bash
# GPT-2 124M (12 layers, hidden 768, 12 heads, vocab 50304, micro-batch 4, fp32, 2 threads) at
# seq 256, 1024 and 2048: tokens/s, MFU against the FMA-loop fp32 peak, peak resident memory
# next to the formula, and the --timing-log-level 2 breakdown of the last interval.
# Formula (bytes): params + grads + Adam state = 16 x params, plus activations: per layer
# 64 sbh (docs/reference/formulas.md's 34 sbh of 16-bit activations with flash attention, less its two 1-byte
# dropout masks, at 4 bytes: LN inputs 2 x 4, QKV input 4, QKV 12, attention output 4, FC1
# input 4, FC1 output 16, GELU output 16), plus outside the layers the final LayerNorm input and
# output-projection input (2 x 4 sbh) and the fp32 logits 4 sbV.
#   bench/cpu_scaling.sh [BINARY]   (BINARY defaults to build/megatron; pass another build to compare)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-./build/megatron}
THREADS=${THREADS:-2}
SEQS=${SEQS:-256 1024 2048}
[ -x build/fma_peak ] || ./scripts/build.sh >/dev/null
export OMP_NUM_THREADS=$THREADS
PEAK=$(./build/fma_peak | sed -n 's/.*fp32_peak_gflops=\([0-9.]*\).*/\1/p')
L=12 H=768 NH=12 V=50304 B=4
TIMING=""; $BIN train --help | grep -q -- --timing-log-level && TIMING="--timing-log-level 2"
echo "binary=$BIN threads=$THREADS fp32_peak_gflops=$PEAK"
printf "%-6s %10s %10s %8s %12s %12s %8s\n" seq ms/iter tokens/s MFU "RSS MiB" "formula MiB" "RSS/f"
for S in $SEQS; do
  ITERS=3; [ "$S" -ge 2048 ] && ITERS=2
  out=$($BIN train --mock-data --num-layers $L --hidden-size $H --num-attention-heads $NH \
    --seq-length $S --vocab-size $V --micro-batch-size $B --global-batch-size $B \
    --train-iters $((ITERS + 1)) --lr 1e-4 --log-interval 1 $TIMING 2>&1 || true)
  ms=$(echo "$out" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
       awk 'NR > 1 { s += $1; n++ } END { printf "%.1f", s / n }')
  rss=$(echo "$out" | sed -n 's/.*peak memory of rank 0 (MiB): resident \([0-9.]*\).*/\1/p')
  awk -v L=$L -v H=$H -v S=$S -v V=$V -v B=$B -v ms=$ms -v peak=$PEAK -v rss=$rss 'BEGIN {
    P = V*H + S*H + L*(12*H*H + 13*H) + 2*H
    tok = B*S / (ms / 1000); f = 6*P + 12*L*H*S
    formula = (16*P + L*64*S*B*H + 8*S*B*H + 4*S*B*V) / 1048576
    printf "%-6d %10.1f %10.1f %7.1f%% %12.1f %12.1f %8.3f\n", S, ms, tok, 100*tok*f/(peak*1e9), rss, formula, rss/formula }'
  # The last interval's phase timers.
  echo "$out" | awk '/^\(min, max\)/ { block = ""; on = 1 } on && /^ iteration|^ >/ { on = 0 }
                     on { block = block "   " $0 "\n" } END { printf "%s", block }'
done
