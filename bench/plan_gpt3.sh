#!/bin/bash
# megatron plan on upstream's GPT-3 175B script (examples/gpt3/train_gpt3_175b_distributed.sh,
# its arguments as the script passes them; the data and tokenizer paths need not exist) on 1024
# H100s: the one layout, then --search's five fastest and how long the search took.
#   MG_BINARY=build-dev/megatron bench/plan_gpt3.sh
set -euo pipefail
BIN=${MG_BINARY:-build-dev/megatron}
ARGS=(--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048
  --max-position-embeddings 2048 --attention-backend auto
  --micro-batch-size 1 --global-batch-size 1536 --rampup-batch-size 16 16 5859375
  --train-iters 500000 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006
  --clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6
  --lr-warmup-fraction .001 --lr-decay-iters 430000
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16
  --data-path data/my-gpt3_00_text_document --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt
  --split 949,50,1 --log-interval 100 --save-interval 10000 --eval-interval 1000
  --save ckpt --load ckpt --eval-iters 10 --tensorboard-dir tb)
"$BIN" plan --num-gpus 1024 --device-profile h100-sxm "${ARGS[@]}"
start=$(date +%s.%N)
"$BIN" plan --num-gpus 1024 --device-profile h100-sxm --search --top 5 "${ARGS[@]}"
echo "search took $(echo "$(date +%s.%N) - $start" | bc) s"
