#!/usr/bin/env bash
# Training throughput of megatron-cpp vs the PyTorch reference of the same model (GPT-2 or Llama),
# fp32 or bf16, in one run, alternating the programs (ROUNDS times each) so machine drift hits all
# alike.
#   [PRECISION=fp32|bf16] [MG_BINARY=path] [MG_BASELINE=path] bench/train_throughput.sh CONFIG
#   CONFIG: tiny | gpt2-124m | gpt2-124m-s1024 | llama-tiny | llama-125m | mixtral-tiny
# (mixtral-tiny: llama-tiny's attention with a MoE MLP in each layer, 8 SwiGLU experts of width
# 256, top-2, load-balancing loss 0.01; bench/moe.sh adds the time split of its MoE layers)
# PRECISION=bf16 runs ours with --bf16 and the reference under torch.autocast('cpu', bfloat16).
# MG_BINARY replaces build/megatron; MG_BASELINE names a second megatron binary (an older build)
# timed in the same rounds, for before/after figures.
# Validates first: our model's parameter count (from its log) must equal the reference's.
# MFU: model FLOPs per token (as our binary logs it: 6 * params, an untied model's input
# embedding excluded, + 12 * L * NH * HD * S, full-attention convention; params
# from our binary's log) x tokens/s over the peak that bench/fma_peak measures for the precision
# with the same threads (bf16: AMX or AVX512_BF16 dot products where the CPU has them).
# Peak RSS of every run (/usr/bin/time), ours next to the memory total our binary reports (its
# formula: params + grads + optimizer state + activations and scratch); also each run's CPU use
# (user + sys over wall time: ~200% for 2 threads that had both cores to themselves; less means
# other processes took CPU time).
# Means over the rounds are the result; the best round of each program is printed too (noise
# only slows a run down, so on a shared machine the best rounds are the less disturbed figures).
# The fp32 reference runs with OPENBLAS_CORETYPE=Cooperlake (Debian's OpenBLAS 0.3.21 can
# misdetect some CPUs as Prescott) and with OpenBLAS's default detection; the better of the two
# is the reference figure.
# Ends with: megatron_tokens_per_s=A torch_tokens_per_s=B ratio=A/B mfu=M
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
CONFIG=${1:-tiny}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
PRECISION=${PRECISION:-fp32}
PY=${MG_PYTHON:-/usr/bin/python3}
BIN=${MG_BINARY:-./build/megatron}
BASE=${MG_BASELINE:-}

NG="" F="" MOE=""
case "$CONFIG" in
  tiny) L=2 H=128 NH=4 S=128 V=1024 B=4 ITERS=20 WARM=3 ;;
  gpt2-124m) L=12 H=768 NH=12 S=256 V=50304 B=4 ITERS=6 WARM=2 ;;
  gpt2-124m-s1024) L=12 H=768 NH=12 S=1024 V=50304 B=4 ITERS=3 WARM=1 ;;
  llama-tiny) L=2 H=128 NH=4 NG=2 F=352 S=128 V=1024 B=4 ITERS=20 WARM=3 ;;
  llama-125m) L=12 H=768 NH=12 NG=4 F=2048 S=256 V=32000 B=4 ITERS=6 WARM=2 ;;
  mixtral-tiny) L=2 H=128 NH=4 NG=2 F=352 S=128 V=1024 B=4 ITERS=20 WARM=3
    MOE="--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-aux-loss-coeff 0.01" ;;
  *) echo "unknown config '$CONFIG' (tiny | gpt2-124m | gpt2-124m-s1024 | llama-tiny | llama-125m | mixtral-tiny)" >&2
     exit 2 ;;
esac
case "$PRECISION" in
  fp32) PFLAG="" ;;
  bf16) PFLAG="--bf16" ;;
  *) echo "PRECISION must be fp32 or bf16" >&2; exit 2 ;;
esac
# Both programs take the model by Megatron's flag names.
MODEL="--num-layers $L --hidden-size $H --num-attention-heads $NH --seq-length $S --vocab-size $V"
# The PyTorch references train without dropout: ours too (bench/dropout_cost.sh times its cost).
NODROP="--attention-dropout 0 --hidden-dropout 0"
if [ -n "$NG" ]; then
  OURS_MODEL="$MODEL $NODROP --normalization RMSNorm --swiglu --ffn-hidden-size $F --position-embedding-type rope
    --group-query-attention --num-query-groups $NG --disable-bias-linear --untie-embeddings-and-output-weights $MOE"
  TORCH="bench/torch_llama_train.py $MODEL --num-query-groups $NG --ffn-hidden-size $F $MOE"
else
  OURS_MODEL="$MODEL $NODROP" TORCH="bench/torch_gpt2_train.py $MODEL"
fi

[ -n "${MG_BINARY:-}" ] || ./scripts/build.sh megatron fma_peak >/dev/null
[ -x build/fma_peak ] || ./scripts/build.sh fma_peak >/dev/null
export OMP_NUM_THREADS=$THREADS
value() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
peaks=$(./build/fma_peak)
PEAK=$(echo "$peaks" | value ${PRECISION}_peak_gflops)
echo "config=$CONFIG precision=$PRECISION layers=$L hidden=$H heads=$NH${NG:+ query_groups=$NG ffn=$F}" \
  "seq=$S vocab=$V micro_batch=$B threads=$THREADS"
echo "cpu=\"$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)\" $peaks"
echo "binary=$BIN${BASE:+ baseline=$BASE}"

RSS_FILE=$(mktemp); trap 'rm -f "$RSS_FILE"' EXIT
max_rss_mib() { awk '{ printf "%.1f", $1 / 1024 }' "$RSS_FILE"; }
cpu_use() { awk '{ print $2 }' "$RSS_FILE"; }
# $1: binary, $2: iterations. Log lines of one run; its peak RSS in RSS_FILE.
ours_run() {
  /usr/bin/time -f "%M %P" -o "$RSS_FILE" "$1" train --mock-data $OURS_MODEL --micro-batch-size $B \
    --global-batch-size $B --train-iters "$2" --lr 1e-4 --log-interval 1 $PFLAG
}
# $1: binary. The first WARM iterations are dropped from the mean.
ours() {
  local out; out=$(ours_run "$1" $((ITERS + WARM)))
  echo "$out" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' |
    awk -v w=$WARM -v tok=$((B * S)) -v rss="$(max_rss_mib)" -v cpu="$(cpu_use)" -v formula="$(echo "$out" | sed -n 's/.* | total \([0-9.]*\) .*/\1/p')" '
      NR > w { s += $1; n++ } END {
      printf "ms_per_iter=%.1f tokens_per_s=%.1f peak_rss_mib=%s memory_formula_mib=%s cpu=%s\n",
             s / n, tok / (s / n / 1000), rss, formula, cpu }'
}
torch_ref() {  # extra flags in $@
  "$PY" $TORCH --micro-batch-size $B --threads $THREADS $PFLAG "$@"
}
timed_torch() {
  local t; t=$(/usr/bin/time -f "%M %P" -o "$RSS_FILE" "$PY" $TORCH --micro-batch-size $B \
    --threads $THREADS $PFLAG --iters $ITERS --warmup $WARM)
  echo "$t peak_rss_mib=$(max_rss_mib) cpu=$(cpu_use)"
}

# Validation: one step of each side; same parameter count; which kernels ran.
check=$(ONEDNN_VERBOSE=1 ours_run "$BIN" 1)
echo "$check" | grep -E '^ > (number of parameters|precision|memory)'
PARAMS=$(echo "$check" | sed -n 's/.*(whole model: \([0-9]*\)).*/\1/p')
tcheck=$(ONEDNN_VERBOSE=1 OPENBLAS_VERBOSE=2 torch_ref --iters 0 --warmup 1 2>&1)
TPARAMS=$(echo "$tcheck" | value torch_params)
kernels() {  # oneDNN primitives (implementation: executions) and OpenBLAS's core, if any
  grep -E '^onednn_verbose,exec|^Core:' | awk -F, '/^Core/ { print "openblas_" $0; next }
    { n[$4 ":" $5]++ } END { for (k in n) printf "onednn %s x%d\n", k, n[k] }' | sort | paste -sd' '
}
echo "megatron_params=$PARAMS torch_params=$TPARAMS"
echo "megatron kernels: $(echo "$check" | kernels)$([ -n "$PFLAG" ] ||
  echo "fp32 GEMMs: dnnl_sgemm (oneDNN's verbose mode does not log it)")"
echo "torch kernels: $(echo "$tcheck" | kernels)"
[ "$PARAMS" = "$TPARAMS" ] || { echo "parameter counts differ: the models are not the same" >&2; exit 1; }
# The binary's own count (its log states it): 6 x parameters (an untied model's input
# embedding, a lookup, excluded) + 12 x layers x heads x head dim x seq length.
FLOPS_PER_TOKEN=$(echo "$check" | sed -n 's/.*model FLOPs per token: \([0-9]*\).*/\1/p')
[ -n "$FLOPS_PER_TOKEN" ] || FLOPS_PER_TOKEN=$(awk -v P=$PARAMS -v L=$L -v H=$H -v S=$S \
  'BEGIN { printf "%.0f", 6*P + 12*L*H*S }')  # a baseline binary that does not log it
mfu() { awk -v a=$1 -v f=$FLOPS_PER_TOKEN -v p=$PEAK 'BEGIN { printf "%.3f", a * f / (p * 1e9) }'; }
echo "flops_per_token=$FLOPS_PER_TOKEN ${PRECISION}_peak_gflops=$PEAK"

ours_all=() base_all=() torch_all=() torch_default_all=() rss=() base_rss=() trss=()
for r in $(seq 1 "$ROUNDS"); do
  # The 1-minute load average (this run's own threads included) before each round.
  echo "round $r: loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  o=$(ours "$BIN"); echo "round $r: megatron $o"
  ours_all+=("$(echo "$o" | value tokens_per_s)"); rss+=("$(echo "$o" | value peak_rss_mib)")
  FORMULA=$(echo "$o" | value memory_formula_mib)
  if [ -n "$BASE" ]; then
    b=$(ours "$BASE"); echo "round $r: baseline $b"
    base_all+=("$(echo "$b" | value tokens_per_s)"); base_rss+=("$(echo "$b" | value peak_rss_mib)")
  fi
  t=$(OPENBLAS_CORETYPE=Cooperlake timed_torch); echo "round $r: torch OPENBLAS_CORETYPE=Cooperlake $t"
  torch_all+=("$(echo "$t" | value torch_tokens_per_s)"); trss+=("$(echo "$t" | value peak_rss_mib)")
  d=$(unset OPENBLAS_CORETYPE; timed_torch); echo "round $r: torch OpenBLAS default $d"
  torch_default_all+=("$(echo "$d" | value torch_tokens_per_s)"); trss+=("$(echo "$d" | value peak_rss_mib)")
done

mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }
max() { printf '%s\n' "$@" | sort -g | tail -1; }
A=$(mean "${ours_all[@]}")
C=$(mean "${torch_all[@]}")
D=$(mean "${torch_default_all[@]}")
# The reference is the better of its two OpenBLAS settings.
Bt=$(awk -v c=$C -v d=$D 'BEGIN { print (c >= d ? c : d) }')
RSS=$(max "${rss[@]}")
echo "peak_rss_mib: megatron=$RSS (memory report total $FORMULA, RSS/total" \
  "$(awk -v a=$RSS -v f=$FORMULA 'BEGIN { printf "%.3f", a / f }')) torch=$(max "${trss[@]}")" \
  "${BASE:+baseline=$(max "${base_rss[@]}")}"
if [ -n "$BASE" ]; then
  Bb=$(mean "${base_all[@]}")
  echo "baseline_tokens_per_s=$Bb baseline_mfu=$(mfu $Bb) megatron_vs_baseline=$(awk -v a=$A -v b=$Bb 'BEGIN { printf "%.3f", a / b }')"
fi
echo "torch_cooperlake_tokens_per_s=$C torch_default_openblas_tokens_per_s=$D torch_best_mfu=$(mfu $Bt)"
BEST_A=$(max "${ours_all[@]}") BEST_T=$(max "${torch_all[@]}" "${torch_default_all[@]}")
echo "best rounds: megatron_tokens_per_s=$BEST_A torch_tokens_per_s=$BEST_T" \
  "ratio=$(awk -v a=$BEST_A -v b=$BEST_T 'BEGIN { printf "%.2f", a / b }') mfu=$(mfu $BEST_A)" \
  "${BASE:+baseline_tokens_per_s=$(max "${base_all[@]}")}"
echo "megatron_tokens_per_s=$A torch_tokens_per_s=$Bt ratio=$(awk -v a=$A -v b=$Bt 'BEGIN { printf "%.2f", a / b }') mfu=$(mfu $A)"
