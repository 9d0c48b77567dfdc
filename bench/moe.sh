#!/usr/bin/env bash
# Mixture-of-experts throughput and where its time goes (docs/moe.md, docs/benchmarks.md):
#   [ROUNDS=2] [MG_BINARY=path] bench/moe.sh
# 1. bench/train_throughput.sh mixtral-tiny: a Mixtral-style model (2 layers, hidden 128, GQA,
#    8 SwiGLU experts of width 256, top-2, load-balancing loss 0.01) against the PyTorch
#    reference of the same model (bench/torch_llama_train.py --num-experts: eager, tokens sorted
#    by expert, one SwiGLU per expert, index_add_ to combine), tokens/s in one run.
# 2. Ours once more under --timing-log-level 2 (per-expert GEMMs and --moe-grouped-gemm, f32 and
#    bf16): tokens/s and the MoE layers' time split into router (GEMM,
#    top-k, losses), permute (gathering the tokens by expert and scattering their gradients),
#    experts (their MLPs) and combine (the weighted sum and its backward), forward and backward
#    together, in ms per iteration, next to the whole iteration.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${MG_BINARY:-./build/megatron}
[ -n "${MG_BINARY:-}" ] || ./scripts/build.sh megatron >/dev/null
MG_BINARY=$BIN bench/train_throughput.sh mixtral-tiny
# Timers per log interval: the second interval's (iterations 11-20, past the warm-up); the
# experts' GEMMs as one call per expert and as grouped ops (--moe-grouped-gemm), f32 and bf16,
# in the same run.
for prec in "" --bf16; do
  for grouped in "" --moe-grouped-gemm; do
  OMP_NUM_THREADS=${THREADS:-2} "$BIN" train --mock-data --num-layers 2 --hidden-size 128 \
    --num-attention-heads 4 --seq-length 128 --vocab-size 1024 --normalization RMSNorm --swiglu \
    --ffn-hidden-size 352 --position-embedding-type rope --group-query-attention --num-query-groups 2 \
    --disable-bias-linear --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0 \
    --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-aux-loss-coeff 0.01 \
    --micro-batch-size 4 --global-batch-size 4 --lr 1e-4 --train-iters 20 --log-interval 10 \
    --timing-log-level 2 $prec $grouped 2>&1 | awk -v tag="${prec:-f32} ${grouped:-per-expert}" '
      / iteration +20\// { it = $0; sub(/.*elapsed time per iteration \(ms\): /, "", it); sub(/ .*/, "", it) }
      it != "" && /^    (forward-backward|compute\/gemm|moe\/)/ {
        v = $0; sub(/.*: \(/, "", v); sub(/,.*/, "", v); name = $1; split_ms = split_ms " " name "=" v }
      END { printf "moe_time_split_ms_per_iter: %s tokens/s=%.0f iteration=%s%s\n", tag, 512000 / it, it, split_ms }'
  done
done
# 3. The bytes each rank sends over the EP group per step (`ep comm bytes`, rank 0's line; the
#    mean over 10 steps), EP 1, 2, 4 on as many ranks (DP = EP), both dispatchers.
for ep in 1 2 4; do
  for disp in alltoall allgather; do
    OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np $ep "$BIN" train --mock-data \
      --num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --vocab-size 1024 \
      --normalization RMSNorm --swiglu --ffn-hidden-size 352 --position-embedding-type rope \
      --group-query-attention --num-query-groups 2 --disable-bias-linear \
      --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0 \
      --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-aux-loss-coeff 0.01 \
      --micro-batch-size 4 --global-batch-size $((4 * ep)) --lr 1e-4 --train-iters 10 \
      --log-interval 1 --expert-model-parallel-size $ep --moe-token-dispatcher-type $disp 2>&1 |
      awk -v ep=$ep -v d=$disp '/ iteration +[0-9]+\// { n++; if (match($0, /ep comm bytes: [0-9]+/)) s += substr($0, RSTART + 15, RLENGTH - 15) }
        END { printf "ep=%d dispatcher=%s ep_comm_bytes_per_step=%.0f\n", ep, d, n ? s / n : 0 }'
  done
done
# 4. Parallel folding on 2 ranks with TP 2 + SP for attention (docs/moe.md): the experts split by
#    TP (expert TP 2, the default), whole experts on both ranks (expert TP 1, expert DP 2), and
#    whole experts split over EP 2 (expert TP 1, alltoall): tokens/s (mean of iterations 11-20)
#    and this rank's TP and EP bytes per step.
for fold in "" "--expert-tensor-parallel-size 1" \
            "--expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall"; do
  OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 "$BIN" train --mock-data \
    --num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --vocab-size 1024 \
    --normalization RMSNorm --swiglu --ffn-hidden-size 352 --position-embedding-type rope \
    --group-query-attention --num-query-groups 2 --disable-bias-linear \
    --untie-embeddings-and-output-weights --attention-dropout 0 --hidden-dropout 0 \
    --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-aux-loss-coeff 0.01 \
    --micro-batch-size 4 --global-batch-size 4 --lr 1e-4 --train-iters 20 --log-interval 1 \
    --tensor-model-parallel-size 2 --sequence-parallel $fold 2>&1 |
    awk -v f="${fold:-expert TP 2 (= TP)}" '/ iteration +[0-9]+\// { n++; if (n <= 10) next;
        t = $0; sub(/.*elapsed time per iteration \(ms\): /, "", t); sub(/ .*/, "", t); ms += t;
        if (match($0, /tp comm bytes: [0-9]+/)) tp = substr($0, RSTART + 15, RLENGTH - 15);
        ep = 0; if (match($0, /ep comm bytes: [0-9]+/)) ep = substr($0, RSTART + 15, RLENGTH - 15) }
      END { printf "folding: %s tokens/s=%.0f tp_comm_bytes=%s ep_comm_bytes=%s\n", f, 512 * 10 / (ms / 1000), tp, ep }'
done
