#!/usr/bin/env bash
# GPU causal attention, side by side in one run: our f32 CUDA-core kernels, our tensor-core
# kernels (bf16 operands) and PyTorch's fused SDPA (bf16), forward and backward, at the
# attention shapes of bench/gpu_train_throughput.sh (GPT-2 124M: B=8 NH=12; 774M: B=4 NH=20;
# S=1024, HD=64). Binary: $MG_GPU_ATTENTION (scripts/gpu-check.sh's packed one), else
# build/gpu_attention.   bench/gpu_attention.sh [B S NH HD ...]
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${MG_GPU_ATTENTION:-./build/gpu_attention}
PY=${MG_PYTHON:-python3}
SHAPES=${*:-8 1024 12 64 4 1024 20 64}
timeout "${TIMEOUT:-60}" "$BIN" $SHAPES || echo "gpu_attention failed or timed out"
timeout "${TIMEOUT:-60}" "$PY" bench/torch_attention.py $SHAPES || echo "torch_attention failed or timed out"
