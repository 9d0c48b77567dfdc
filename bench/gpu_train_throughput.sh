#!/usr/bin/env bash
# GPU training throughput: megatron-cpp (--device cuda --bf16) against the PyTorch reference
# (bench/torch_gpt2_train.py on the same GPU, bf16 autocast, fused SDPA attention, eager and
# torch.compile) on GPT-2 configs at seq 1024, in one run. MFU is model FLOPs per token
# (6 * params + 12 * layers * hidden * seq) x tokens/s over the dense bf16 peak, 989 TFLOP/s
# for an H100/H200 SXM (PEAK_TFLOPS to override).
#   bench/gpu_train_throughput.sh [gpt2-124m|gpt2-774m ...]      (default: both)
# Binary: $MG_BINARY (scripts/gpu-check.sh's packed one), else build/megatron. Each program
# gets TIMEOUT seconds per config (default 150) so one slow side cannot eat the machine's time.
# Ends each config with: config=... megatron_tokens_per_s=A torch_tokens_per_s=B ratio=A/B mfu=M
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${MG_BINARY:-./build/megatron}
PY=${MG_PYTHON:-python3}
PEAK=${PEAK_TFLOPS:-989}
TIMEOUT=${TIMEOUT:-150}
CONFIGS=${*:-gpt2-124m gpt2-774m}

value() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | tail -1; }
for CONFIG in $CONFIGS; do
  case "$CONFIG" in
    gpt2-124m) L=12 H=768 NH=12 S=1024 V=50304 B=8 ITERS=10 WARM=3 ;;
    gpt2-774m) L=36 H=1280 NH=20 S=1024 V=50304 B=4 ITERS=10 WARM=3 ;;
    *) echo "unknown config '$CONFIG' (gpt2-124m | gpt2-774m)" >&2; exit 2 ;;
  esac
  FLOPS=$(awk -v L=$L -v H=$H -v S=$S -v V=$V 'BEGIN {
    P = V*H + S*H + L*(12*H*H + 13*H) + 2*H; printf "%.0f", 6*P + 12*L*H*S }')
  mfu() { awk -v t="$1" -v f=$FLOPS -v p=$PEAK 'BEGIN { if (t == "") print "n/a"; else printf "%.3f", t * f / (p * 1e12) }'; }
  echo "config=$CONFIG layers=$L hidden=$H heads=$NH seq=$S vocab=$V micro_batch=$B peak_tflops=$PEAK"
  ours=$(timeout "$TIMEOUT" "$BIN" train --mock-data --device cuda --bf16 --num-layers $L \
      --hidden-size $H --num-attention-heads $NH --seq-length $S --vocab-size $V \
      --micro-batch-size $B --global-batch-size $B --train-iters $((ITERS + WARM)) --lr 1e-4 \
      --log-interval 1 --attention-dropout 0 --hidden-dropout 0 2>&1)
  A=$(echo "$ours" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
      awk -v w=$WARM -v tok=$((B * S)) 'NR > w { s += $1; n++ } END { if (n) printf "%.1f", tok / (s / n / 1000) }')
  [ -n "$A" ] || { echo "megatron failed or timed out:"; echo "$ours" | tail -5; }
  echo "megatron_tokens_per_s=${A:-n/a} mfu=$(mfu "$A")"
  best=""
  for mode in "" "--compile"; do
    t=$(timeout "$TIMEOUT" "$PY" bench/torch_gpt2_train.py --device cuda --bf16 --sdpa $mode \
        --num-layers $L --hidden-size $H --num-attention-heads $NH --seq-length $S \
        --vocab-size $V --micro-batch-size $B --iters $ITERS --warmup $WARM 2>&1)
    T=$(echo "$t" | value torch_tokens_per_s)
    [ -n "$T" ] || { echo "torch ${mode:-eager} failed or timed out:"; echo "$t" | tail -3; }
    echo "torch ${mode:-eager}: torch_tokens_per_s=${T:-n/a} mfu=$(mfu "$T")"
    if [ -n "$T" ] && { [ -z "$best" ] || awk -v a="$T" -v b="$best" 'BEGIN { exit !(a > b) }'; }; then best=$T; fi
  done
  ratio=$(awk -v a="$A" -v b="$best" 'BEGIN { if (a == "" || b == "") print "n/a"; else printf "%.2f", a / b }')
  echo "config=$CONFIG megatron_tokens_per_s=${A:-n/a} torch_tokens_per_s=${best:-n/a} ratio=$ratio mfu=$(mfu "$A")"
done
