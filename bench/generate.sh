#!/usr/bin/env bash
# Decode speed and time to first token of the inference engine against a PyTorch KV-cache
# reference in the same run (docs/serving.md): GPT-2 124M and the ~125M Llama (GQA 4, SwiGLU,
# RoPE), batch 1 and 16, PROMPT-token prompts, NEW greedy tokens each, best of REPEAT; both
# sides fp32 on THREADS threads, random weights of the same shapes (their parameter counts are
# printed and must agree). bench/generate.cpp and bench/torch_generate.py say what is timed.
# PyTorch runs with OMP_WAIT_POLICY=PASSIVE, its fastest setting here: Debian's torch multiplies
# with OpenBLAS's own threads, which spinning OpenMP workers slowed 2-4x in decode.
#   [THREADS=2] [PROMPT=64] [NEW=32] [REPEAT=3] [MG_BUILD=build-dev] bench/generate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${MG_BUILD:-build}
[ -n "${MG_BUILD:-}" ] || { ./scripts/build.sh generate_bench >/dev/null; }
THREADS=${THREADS:-2} PROMPT=${PROMPT:-64} NEW=${NEW:-32} REPEAT=${REPEAT:-3}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); threads=$THREADS"
value() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
for model in gpt2 llama; do
  for batch in 1 16; do
    ours=$(OMP_NUM_THREADS=$THREADS "$BUILD/generate_bench" $model $batch $PROMPT $NEW $REPEAT)
    ref=$(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_generate.py $model $batch $PROMPT $NEW $REPEAT \
          --threads $THREADS)
    echo "$ours"
    echo "$ref"
    [ "$(echo "$ours" | value params)" = "$(echo "$ref" | value params)" ] ||
      { echo "parameter counts differ: the models are not the same" >&2; exit 1; }
    awk -v m=$model -v b=$batch -v td="$(echo "$ours" | value decode_tokens_per_s)" \
        -v rd="$(echo "$ref" | value decode_tokens_per_s)" -v tt="$(echo "$ours" | value ttft_ms)" \
        -v rt="$(echo "$ref" | value ttft_ms)" \
        'BEGIN { printf "ratio: model=%s batch=%d decode_x=%.2f ttft_x=%.2f (megatron over torch: decode tokens/s, torch ttft / ours)\n", m, b, td / rd, rt / tt }'
  done
done
