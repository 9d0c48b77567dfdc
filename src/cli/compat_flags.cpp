// The compatibility tables of compat_flags.h. Each row is one Megatron-LM flag; the reasons are
// the ones docs/megatron-compat.md prints (tests/cli/compat_flags_test.cpp checks the doc).
#include "cli/compat_flags.h"

#include "core/error.h"

namespace mg {

namespace {

constexpr NoOpFlag kTrainNoOp[] = {
    {"--attention-backend", "NAME", "flash|fused|unfused|local|auto",
     "which attention kernel runs (TE flash-attn, cuDNN fused, unfused, PyTorch local)",
     "one attention implementation (flash-style tiles, fp32 softmax): every backend computes the "
     "same function"},
    {"--use-flash-attn", "", "", "the flash-attn kernel (legacy spelling of --attention-backend)",
     "the one attention implementation is flash-style already"},
    {"--transformer-impl", "NAME", "local|transformer_engine|inference_optimized",
     "Transformer Engine modules or Megatron's PyTorch ones",
     "one implementation of each layer; the math is the same"},
    {"--use-mcore-models", "", "",
     "Megatron-Core models instead of the removed legacy ones (deprecated upstream)",
     "there is one model implementation, Megatron-Core's structure"},
    {"--no-masked-softmax-fusion", "", "", "turns off the fused scale + mask + softmax CUDA kernel",
     "no separate softmax kernel: attention fuses it, with the same result"},
    {"--no-bias-gelu-fusion", "", "", "turns off the fused bias + GeLU kernel",
     "kernel fusion does not change the result"},
    {"--no-bias-swiglu-fusion", "", "", "turns off the fused bias + SwiGLU kernel",
     "kernel fusion does not change the result"},
    {"--no-bias-dropout-fusion", "", "", "turns off the fused bias + dropout + add kernel",
     "kernel fusion does not change the result"},
    {"--no-rope-fusion", "", "", "turns off the fused RoPE kernel",
     "kernel fusion does not change the result"},
    {"--no-persist-layer-norm", "", "", "turns off apex's persistent LayerNorm kernel",
     "one LayerNorm/RMSNorm implementation"},
    {"--no-gradient-accumulation-fusion", "", "",
     "turns off weight-grad GEMMs accumulating straight into fp32 main_grad",
     "weight grads always accumulate into the fp32 grad buffer"},
    {"--cross-entropy-loss-fusion", "", "", "the fused vocab-parallel cross-entropy kernel",
     "the vocab-parallel cross entropy computes the same loss and gradient either way"},
    {"--cross-entropy-fusion-impl", "NAME", "native|te",
     "which fused cross-entropy implementation (with --cross-entropy-loss-fusion)",
     "one cross-entropy implementation"},
    {"--attention-softmax-in-fp32", "", "", "attention softmax in fp32 under --fp16/--bf16",
     "the softmax is always computed in fp32"},
    {"--accumulate-allreduce-grads-in-fp32", "", "",
     "fp32 main grads reduced in fp32 (forced on for --bf16 upstream)",
     "grads are always accumulated and reduced in fp32"},
    {"--tp-comm-overlap", "", "",
     "Transformer Engine userbuffers overlapping TP communication with GEMMs",
     "scheduling only: the same collectives give the same values"},
    {"--distribute-saved-activations", "", "",
     "with full recompute, split each layer's saved input across TP ranks",
     "memory placement only: the recomputed values are the same"},
    {"--manual-gc", "", "", "Python garbage collection at fixed intervals",
     "no Python interpreter in the loop"},
    {"--manual-gc-interval", "N", "", "iterations between manual Python GC runs",
     "no Python interpreter in the loop"},
    {"--empty-unused-memory-level", "N", "0|1|2",
     "calls torch.cuda.empty_cache() after steps (1) or also after evaluation (2)",
     "no PyTorch caching allocator to empty; memory use only"},
    {"--num-workers", "N", "", "PyTorch DataLoader worker processes",
     "one prefetching reader thread; the batches are the same"},
    {"--num-dataset-builder-threads", "N", "", "threads building the dataset indices at start-up",
     "the indices are identical whatever builds them"},
    {"--no-mmap-bin-files", "", "", "reads .bin files with file reads instead of mmap",
     "the tokens read are the same; .bin files are always mapped"},
    {"--no-create-attention-mask-in-dataloader", "", "",
     "the data loader does not build an [S, S] mask (the kernels mask causally)",
     "no mask is ever materialised: attention masks causally in the kernel"},
    {"--data-impl", "NAME", "mmap|lazy|cached|infer",
     "the .bin reader (removed upstream in 2023; mmap is the only one left)",
     "the tokens read are the same"},
    {"--DDP-impl", "NAME", "local|torch",
     "Megatron's own DDP or torch DDP (removed upstream; Megatron-Core's DDP is the only one)",
     "both average the same gradients over data-parallel ranks"},
    {"--moe-permute-fusion", "", "",
     "Transformer Engine's fused kernels for the MoE token permutation and un-permutation",
     "the permutation (gather_rows) and the weighted un-permutation (combine_rows) are one op "
     "each here, with the same results"},
    {"--profile", "", "", "an nsys / PyTorch profiler window (with --profile-step-start/end)",
     "no profiler hooks: run nsys or perf around the process; --timing-log-level gives phase "
     "timers"},
    {"--profile-step-start", "N", "", "first profiled iteration (with --profile)",
     "no profiler hooks"},
    {"--profile-step-end", "N", "", "last profiled iteration (with --profile)",
     "no profiler hooks"},
};

constexpr NotYetFlag kTrainNotYet[] = {
    {"--fp8-format", "NAME", "fp8 GEMMs (Transformer Engine recipes)"},
    {"--fp8-recipe", "NAME", "fp8 GEMMs (Transformer Engine recipes)"},
    {"--fp8-amax-history-len", "N", "fp8 GEMMs (delayed-scaling amax history)"},
    {"--fp8-amax-compute-algo", "NAME", "fp8 GEMMs (delayed-scaling amax reduction)"},
    {"--fp8-margin", "N", "fp8 GEMMs (scaling margin)"},
    {"--fp8-param-gather", "", "fp8 GEMMs (fp8 parameter all-gather)"},
    {"--first-last-layers-bf16", "", "fp8 GEMMs (bf16 first/last layers)"},
    {"--fp4-format", "NAME", "fp4 GEMMs"},
    {"--moe-router-enable-expert-bias", "",
     "aux-loss-free load balancing (a per-expert routing bias updated every step)"},
    {"--moe-router-bias-update-rate", "X",
     "aux-loss-free load balancing (a per-expert routing bias updated every step)"},
    {"--step-batch-size-schedule", "SCHEDULE...", "a token-based global batch size schedule"},
    {"--ckpt-format", "NAME",
     "checkpoints are megatron-cpp's own sharded format (docs/checkpoint-format.md), which "
     "reshards across TP/PP/DP layouts as torch_dist does but is not PyTorch DCP or torch; drop "
     "the flag"},
    {"--wandb-project", "NAME", "Weights & Biases logging"},
    {"--wandb-exp-name", "NAME", "Weights & Biases logging"},
    {"--wandb-save-dir", "DIR", "Weights & Biases logging"},
};

// (--expert-model-parallel-size was one until expert parallelism came.)
constexpr std::span<const DefaultOnlyFlag> kTrainDefaultOnly{};

constexpr RenamedFlag kTrainRenamed[] = {
    // The 2021 flags meant full recompute, with --activations-checkpoint-num-layers 1 by default.
    {"--activations-checkpoint-method", "NAME",
     "--recompute-granularity full --recompute-num-layers 1 --recompute-method"},
    {"--activations-checkpoint-num-layers", "N", "--recompute-num-layers"},
    {"--checkpoint-activations", "",
     "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"},
    {"--distribute-checkpointed-activations", "", "--distribute-saved-activations"},
    {"--batch-size", "B", "--micro-batch-size"},
    {"--model-parallel-size", "TP", "--tensor-model-parallel-size"},
    {"--warmup", "X", "--lr-warmup-fraction"},
};

constexpr NoOpFlag kPreprocessNoOp[] = {
    {"--lang", "NAME", "", "the NLTK language of --split-sentences",
     "--split-sentences is refused, so there is no sentence splitter to configure"},
    {"--workers-to-check", "N...", "", "worker counts tried by --find-optimal-num-workers",
     "only read by --find-optimal-num-workers, which is refused"},
    {"--max-documents", "N", "", "documents per trial of --find-optimal-num-workers",
     "only read by --find-optimal-num-workers, which is refused"},
};

constexpr NotYetFlag kPreprocessNotYet[] = {
    {"--find-optimal-num-workers", "", "timing trial runs to pick --workers"},
};

}  // namespace

const CompatTables& compat_tables(const std::string& command) {
  static const CompatTables train{kTrainNoOp, kTrainNotYet, kTrainDefaultOnly, kTrainRenamed};
  static const CompatTables preprocess{kPreprocessNoOp, kPreprocessNotYet, {}, {}};
  static const CompatTables none{};
  return command == "train" ? train : command == "preprocess" ? preprocess : none;
}

std::string not_yet_message(const std::string& flag, const std::string& what) {
  return str_cat(flag, " is not supported by megatron-cpp yet (", what,
                 "); see docs/megatron-compat.md");
}

std::string renamed_message(const std::string& flag, const std::string& replacement) {
  return str_cat(flag, " was removed from Megatron-LM: use ", replacement,
                 " instead (docs/megatron-compat.md)");
}

}  // namespace mg
