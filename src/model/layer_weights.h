// One transformer layer's parameters as the layer reads them (layers/transformer_layer.h's
// LayerWeights), from a rank's parameter layout: the training model reads its parameters and
// its gradients through it, the inference engine its parameters.
#pragma once
#include <cstdint>
#include <functional>

#include "layers/transformer_layer.h"
#include "model/config.h"
#include "model/param_layout.h"

namespace mg {

// Where a parameter lives: a matrix in the layout's dtype (or f32 gradients), a 1-D parameter
// as f32.
struct ParamAccess {
  std::function<void*(const ParamSpec&)> matrix;
  std::function<float*(const ParamSpec&)> vector;
};

// Global layer `layer` of cfg in `layout` (which must hold it, with this shard's experts).
// Absent parameters (RMSNorm's bias, biases under --disable-bias-linear) are null; a parameter
// the layer's spec says it has must be in the layout and one it lacks must not, so a misspelt
// name is an error here, not a null weight in a kernel.
LayerWeights layer_weights(const GPTConfig& cfg, const ShardSpec& shard, const ParamLayout& layout,
                           int64_t layer, const ParamAccess& at);

}  // namespace mg
