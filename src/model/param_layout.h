// Parameters of one rank in one flat buffer: each parameter is a named view (Megatron-Core's
// names) at an offset, with its shape, init rule and whether weight decay applies. Grads use
// the same offsets in a second flat fp32 buffer.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/tensor.h"

namespace mg {

enum class InitKind { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;     // e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  Shape shape;          // [out, in] for linear weights, as Megatron stores them
  int64_t offset = 0;   // elements from the start of the flat buffer
  InitKind init = InitKind::Zeros;
  float init_std = 0.f; // for InitKind::Normal
  bool weight_decay = false;  // false for biases and 1-D params (Megatron's rule)
  int64_t numel() const { return shape_numel(shape); }
};

class ParamLayout {
 public:
  // Appends a parameter; returns its index.
  size_t add(std::string name, Shape shape, InitKind init, float init_std = 0.f);
  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec& get(const std::string& name) const;
  int64_t total_numel() const { return total_; }

 private:
  std::vector<ParamSpec> params_;
  int64_t total_ = 0;
};

// The GPT-2 parameter list in Megatron-Core registration order.
ParamLayout gpt_param_layout(const GPTConfig& cfg);

// Fills params per each spec's init rule. Each parameter draws from its own Philox stream keyed
// by (seed, name), so values do not depend on the layout or on other parameters.
void init_params(const ParamLayout& layout, float* params, uint64_t seed);

}  // namespace mg
