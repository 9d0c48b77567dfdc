#!/usr/bin/env bash
# `megatron serve` under load (docs/serving.md): a GPT-2 124M-shaped checkpoint (random weights:
# one training step on mock data), served on one process; CLIENTS concurrent curl clients each
# send REQUESTS requests (a 64-token prompt, 32 tokens greedy) one after another. Continuous
# batching on and off (--inference-static-batching) in the same run: requests/s, generated
# tokens/s, and the p50 / p99 request latency; every answer is checked to be a 200 with 32
# tokens.
#   [CLIENTS=16] [REQUESTS=4] [MG_BINARY=path] bench/serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MG_BINARY:-./build/megatron}
[ -n "${MG_BINARY:-}" ] || ./scripts/build.sh megatron >/dev/null
CLIENTS=${CLIENTS:-16} REQUESTS=${REQUESTS:-4}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
MODEL="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --vocab-size 50257 --tokenizer-type NullTokenizer"
"$BIN" train --mock-data $MODEL --micro-batch-size 1 --global-batch-size 1 --train-iters 1 --lr 1e-4 \
  --save "$work/ck" >/dev/null
prompt=$(seq -s ' ' 100 163)  # 64 tokens
for mode in continuous static; do
  flags=""; [ $mode = static ] && flags=--inference-static-batching
  "$BIN" serve --load "$work/ck" --vocab-size 50257 --tokenizer-type NullTokenizer --port 0 \
    --inference-max-seq-length 128 --inference-max-requests $CLIENTS $flags >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q 'on http://' "$work/log" && break; sleep 0.1; done
  port=$(sed -n 's/.*on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/log")
  start=$(date +%s.%N)
  for c in $(seq $CLIENTS); do
    (for r in $(seq $REQUESTS); do
       curl -s -o "$work/out.$c.$r" -w '%{http_code} %{time_total}\n' -X PUT -H 'Content-Type: application/json' \
         -d "{\"prompts\": [\"$prompt\"], \"tokens_to_generate\": 32, \"top_k\": 1, \"stop_token\": 50256}" \
         "http://127.0.0.1:$port/api"
     done) >"$work/times.$c" &
  done
  wait $(jobs -p | grep -v "^$pid$")
  end=$(date +%s.%N)
  kill $pid; wait $pid || true
  n=$((CLIENTS * REQUESTS))
  bad=$(cat "$work"/times.* | awk '$1 != 200' | wc -l)
  short=0
  for f in "$work"/out.*; do
    [ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tokens"][0]))' "$f")" = 96 ] || short=$((short + 1))
  done
  cat "$work"/times.* | awk '{print $2}' | sort -n >"$work/lat"
  p50=$(awk -v n=$n 'NR == int(n * 0.50 + 0.5) {print $1}' "$work/lat")
  p99=$(awk -v n=$n 'NR == int(n * 0.99 + 0.5) {print $1}' "$work/lat")
  awk -v m=$mode -v n=$n -v s="$start" -v e="$end" -v p50="$p50" -v p99="$p99" -v bad=$bad -v short=$short \
    'BEGIN { t = e - s; printf "serve: %s clients=%d requests=%d seconds=%.1f requests_per_s=%.2f tokens_per_s=%.1f p50_s=%s p99_s=%s errors=%d wrong_length=%d\n", m, '"$CLIENTS"', n, t, n / t, n * 32 / t, p50, p99, bad, short }'
  rm -f "$work"/out.* "$work"/times.*
done
