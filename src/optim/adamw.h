// AdamW over the flat parameter buffer with global-norm gradient clipping. Weight decay is
// skipped for biases and 1-D parameters (Megatron's rule), so the buffer is walked as runs of
// parameters sharing the same decay setting.
#pragma once
#include <vector>

#include "model/param_layout.h"
#include "tensor/tensor.h"

namespace mg {

struct AdamWConfig {
  float weight_decay = 0.01f;  // --weight-decay (decoupled)
  float beta1 = 0.9f;          // --adam-beta1
  float beta2 = 0.999f;        // --adam-beta2
  float eps = 1e-8f;           // --adam-eps
  float clip_grad = 1.0f;      // --clip-grad: max global L2 norm; 0 disables clipping
  void validate() const;
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWConfig& cfg);

  // Clips grads in place given the global grad norm (computed over all ranks by the caller),
  // then updates params.
  void step(float* params, float* grads, float lr, double grad_norm);
  // Single-rank convenience: computes the norm of these grads, then steps. Returns the norm.
  double step(float* params, float* grads, float lr);
  int64_t steps_taken() const { return t_; }
  size_t state_bytes() const { return m_.nbytes() + v_.nbytes(); }

 private:
  struct Run {
    int64_t offset, numel;
    bool decay;
  };
  AdamWConfig cfg_;
  std::vector<Run> runs_;
  int64_t total_;
  Tensor m_, v_;  // first and second moments (P)
  int64_t t_ = 0;
};

}  // namespace mg
