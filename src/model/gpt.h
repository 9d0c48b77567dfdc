// GPT-2 language model on one rank: embedding -> L transformer layers -> final LayerNorm ->
// logits through the tied word embedding -> fused softmax cross-entropy. Parameters live in one
// flat buffer, grads in one flat fp32 buffer with the same layout; backward ADDS into grads,
// which is what makes micro-batch accumulation work.
#pragma once
#include <memory>
#include <vector>

#include "layers/transformer_layer.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "tensor/tensor.h"

namespace mg {

// One micro-batch, each array B*S long, row-major [B, S].
struct MicroBatch {
  const int32_t* tokens;
  const int32_t* position_ids;
  const int32_t* labels;
  const float* loss_mask;  // 0 excludes a token from the loss
};

class GPTModel {
 public:
  GPTModel(const GPTConfig& cfg, int64_t micro_batch_size);

  const GPTConfig& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  float* params() { return params_.data<float>(); }
  float* grads() { return grads_.data<float>(); }
  int64_t num_params() const { return layout_.total_numel(); }
  void init(uint64_t seed);
  void zero_grads() { grads_.zero(); }

  // Returns sum(loss * mask) / sum(mask) over the micro-batch (Megatron's per-micro-batch mean);
  // 0 if every token is masked.
  double forward(const MicroBatch& mb);
  // Backpropagates loss_scale * (the value forward returned); grads +=. Call after forward.
  void backward(float loss_scale);
  // Logits (B, S, V_padded) of the last forward; invalid after backward (overwritten in place).
  const float* logits() const { return logits_.data<float>(); }

  // Bytes held by activations and scratch (for the memory report).
  size_t activation_bytes() const;

 private:
  LayerWeights layer_view(float* base, int64_t layer) const;

  GPTConfig cfg_;
  LayerDims dims_;
  ParamLayout layout_;
  Tensor params_, grads_;               // (P) flat
  std::vector<LayerWeights> layer_params_, layer_grads_;  // per-layer views, built once
  std::vector<Tensor> resid_;           // L+1 x (N, H): input of each layer, then the output
  std::vector<std::unique_ptr<LayerCache>> caches_;
  LayerScratch scratch_;
  Tensor lnf_, lnf_mean_, lnf_rstd_;    // (N, H), (N), (N)
  Tensor logits_;                       // (N, V)
  Tensor losses_, lse_, dlosses_;       // (N)
  Tensor d_resid_, d_lnf_;              // (N, H)
  Tensor tokens_, positions_, labels_;  // (N) i32, copies of the batch for backward
  Tensor mask_;                         // (N)
  double mask_sum_ = 0;
};

}  // namespace mg
