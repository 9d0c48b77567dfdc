#!/usr/bin/env bash
# `megatron convert` of a ~1.2 B-parameter Llama (Llama 3.2 1B's shapes, random bf16 weights,
# 2.47 GB): wall time and peak resident memory (/usr/bin/time -v "Maximum resident set size")
# of each direction, HF -> checkpoint (TP 1 x PP 1 and TP 2 x PP 2) and checkpoint -> HF
# (sharded at 1GB), printed next to the model's size. The round trip is checked bit-identical
# before the numbers count. MEGATRON=path/to/megatron skips the build; CONVERT_BENCH_DIR picks
# the scratch directory (about 10 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MEGATRON:-}" ]; then ./scripts/build.sh >/dev/null; MEGATRON=./build/megatron; fi
DIR=${CONVERT_BENCH_DIR:-build/bench_convert}
rm -rf "$DIR"; mkdir -p "$DIR"
/usr/bin/python3 bench/convert_llama_model.py write "$DIR/hf"
bytes=$(stat -c %s "$DIR/hf/model.safetensors")
run() {  # label, convert flags: prints seconds and peak RSS
  local label=$1; shift
  /usr/bin/time -v "$MEGATRON" convert "$@" > "$DIR/log" 2> "$DIR/time" || { cat "$DIR/log" "$DIR/time"; exit 1; }
  local secs rss
  secs=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): \(.*\)/\1/p' "$DIR/time")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): \(.*\)/\1/p' "$DIR/time")
  printf "%-44s %10s %12.0f %8.2f\n" "$label" "$secs" "$((rss / 1024))" "$(echo "$rss * 1024 / $bytes" | bc -l)"
}
printf "model: %s bytes (bf16 safetensors, %s)\n" "$bytes" "$(numfmt --to=iec "$bytes")"
printf "%-44s %10s %12s %8s\n" direction "wall" "peak RSS MB" "x model"
run "hf-to-megatron (TP 1 x PP 1)" --direction hf-to-megatron --load "$DIR/hf" --save "$DIR/ck"
run "hf-to-megatron (TP 2 x PP 2)" --direction hf-to-megatron --load "$DIR/hf" --save "$DIR/ck22" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
run "megatron-to-hf (from TP 1, one file)" --direction megatron-to-hf --load "$DIR/ck" --save "$DIR/back"
run "megatron-to-hf (from TP 2 x PP 2, 1GB shards)" --direction megatron-to-hf --load "$DIR/ck22" \
  --save "$DIR/back22" --max-shard-size 1GB
/usr/bin/python3 bench/convert_llama_model.py same "$DIR/hf" "$DIR/back"
/usr/bin/python3 bench/convert_llama_model.py same "$DIR/hf" "$DIR/back22"
rm -rf "$DIR"
