#!/usr/bin/env bash
# GPT-2 BPE throughput: `megatron preprocess` (JSON parsing + BPE + writing .bin/.idx) with 1
# and 2 workers against the JavaScript reference encoder (npm gpt-3-encoder, BPE only, timed
# inside node) on the same documents: the fortunes corpus, one JSON line per fortune.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh >/dev/null
GPT2=third_party/npm/node_modules/gpt-3-encoder
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
find /usr/share/games/fortunes -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z |
  xargs -0 cat | iconv -f utf-8 -t utf-8 -c | LC_ALL=C awk 'BEGIN { RS = "\n%\n" } {
    gsub(/\\/, "\\\\\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "\\r"); gsub(/\n/, "\\n")
      gsub(/[\001-\037]/, " ")
    if (length($0) > 0) printf "{\"text\": \"%s\\n\"}\n", $0 }' > "$WORK/docs.jsonl"
echo "corpus: $(wc -l < "$WORK/docs.jsonl") documents, $(wc -c < "$WORK/docs.jsonl") bytes of JSON"
for w in 1 2; do
  ./build/megatron preprocess --input "$WORK/docs.jsonl" --output-prefix "$WORK/out$w" \
    --tokenizer-type GPT2BPETokenizer --vocab-file $GPT2/encoder.json --merge-file $GPT2/vocab.bpe \
    --append-eod --workers $w --skip-bad-lines | sed 's/^/megatron: /'
done
js=$(node tests/reference/gpt2_encode.js "$PWD/$GPT2" < "$WORK/docs.jsonl" 2>&1 >/dev/null)
secs=$(echo "$js" | sed -n 's/.*js_encode_seconds=\([0-9.]*\).*/\1/p')
bytes=$(echo "$js" | sed -n 's/.*js_bytes=\([0-9]*\).*/\1/p')
awk -v s="$secs" -v b="$bytes" 'BEGIN { printf "javascript gpt-3-encoder: %d text bytes in %.2f s: %.2f MB/s (BPE only, 1 thread)\n", b, s, b / 1e6 / s }'
