#include "model/layer_weights.h"

#include <string>

#include "core/error.h"

namespace mg {

LayerWeights layer_weights(const GPTConfig& cfg, const ShardSpec& shard, const ParamLayout& layout,
                           int64_t layer, const ParamAccess& at) {
  const std::string p = "decoder.layers." + std::to_string(layer) + ".";
  const LayerSpec spec = cfg.layer_spec(layer);
  auto vec = [&](const std::string& suffix, bool present) -> float* {
    const std::string n = p + suffix;
    MG_CHECK(layout.has(n) == present, n, present ? " missing from" : " unexpected in",
             " the parameter layout");
    return present ? at.vector(layout.get(n)) : nullptr;
  };
  auto mat = [&](const std::string& suffix) { return at.matrix(layout.get(p + suffix)); };
  const bool ln = spec.norm == NormKind::LayerNorm, qk = spec.qk_layernorm, bias = spec.linear_bias;
  // The dense MLP: a dense layer's, or a MoE layer's shared experts (absent: null).
  const std::string mlp = spec.is_moe() ? "mlp.shared_experts." : "mlp.";
  const bool dense = spec.has_dense_mlp();
  auto mlp_mat = [&](const std::string& n) { return dense ? mat(mlp + n) : nullptr; };
  LayerWeights w{vec("input_layernorm.weight", true),
                 vec("input_layernorm.bias", ln),
                 mat("self_attention.linear_qkv.weight"),
                 vec("self_attention.linear_qkv.bias", spec.qkv_bias),
                 mat("self_attention.linear_proj.weight"),
                 vec("self_attention.linear_proj.bias", bias),
                 vec("self_attention.q_layernorm.weight", qk),
                 vec("self_attention.q_layernorm.bias", qk && ln),
                 vec("self_attention.k_layernorm.weight", qk),
                 vec("self_attention.k_layernorm.bias", qk && ln),
                 vec("pre_mlp_layernorm.weight", true),
                 vec("pre_mlp_layernorm.bias", ln),
                 mlp_mat("linear_fc1.weight"),
                 vec(mlp + "linear_fc1.bias", dense && bias),
                 mlp_mat("linear_fc2.weight"),
                 vec(mlp + "linear_fc2.bias", dense && bias),
                 {}};
  if (spec.is_moe()) {
    w.moe.router_w = mat("mlp.router.weight");
    const int64_t local = spec.moe.num_experts / shard.ep_size;  // this EP rank's experts
    for (int64_t e = shard.ep_rank * local; e < (shard.ep_rank + 1) * local; ++e) {
      const std::string x = "mlp.experts.local_experts." + std::to_string(e) + ".";
      w.moe.fc1_w.push_back(mat(x + "linear_fc1.weight"));
      w.moe.fc1_b.push_back(vec(x + "linear_fc1.bias", bias));
      w.moe.fc2_w.push_back(mat(x + "linear_fc2.weight"));
      w.moe.fc2_b.push_back(vec(x + "linear_fc2.bias", bias));
    }
  }
  return w;
}

}  // namespace mg
