#!/usr/bin/env bash
# `megatron serve` under load (docs/serving.md): a GPT-2 124M-shaped checkpoint (random
# weights: one training step on mock data) served on one process; CLIENTS concurrent clients
# (bench/serve_load.py) each send requests one after another for DURATION seconds (a PROMPT-token
# prompt, NEW greedy tokens). Continuous batching on and off (--inference-static-batching) in
# the same run: requests/s, generated tokens/s, p50 / p99 latency, errors and invalid answers.
#   [CLIENTS=64] [DURATION=30] [PROMPT=32] [NEW=16] [MG_BINARY=path] bench/serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MG_BINARY:-./build/megatron}
[ -n "${MG_BINARY:-}" ] || ./scripts/build.sh megatron >/dev/null
CLIENTS=${CLIENTS:-64} DURATION=${DURATION:-30} PROMPT=${PROMPT:-32} NEW=${NEW:-16}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
MODEL="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --vocab-size 50257 --tokenizer-type NullTokenizer"
"$BIN" train --mock-data $MODEL --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 1e-4 \
  --save "$work/ck" >/dev/null
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); model: GPT-2 124M f32"
for mode in continuous static; do
  flags=""; [ $mode = static ] && flags=--inference-static-batching
  "$BIN" serve --load "$work/ck" --vocab-size 50257 --tokenizer-type NullTokenizer --port 0 \
    --inference-max-seq-length $((PROMPT + NEW)) --inference-max-requests $CLIENTS $flags >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q 'on http://' "$work/log" && break; sleep 0.1; done
  port=$(sed -n 's/.*on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/log")
  echo "serve: $mode clients=$CLIENTS prompt=$PROMPT new=$NEW $(python3 bench/serve_load.py $port $CLIENTS $DURATION $PROMPT $NEW)"
  kill $pid; wait $pid || true
done
