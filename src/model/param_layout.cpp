#include "model/param_layout.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace mg {

size_t ParamLayout::add(std::string name, Shape shape, InitKind init, float init_std) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.offset = total_;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = p.shape.size() > 1 && !p.name.ends_with(".bias");
  total_ += p.numel();
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

const ParamSpec& ParamLayout::get(const std::string& name) const {
  auto it = std::find_if(params_.begin(), params_.end(),
                         [&](const ParamSpec& p) { return p.name == name; });
  MG_CHECK(it != params_.end(), "no parameter named ", name);
  return *it;
}

ParamLayout gpt_param_layout(const GPTConfig& cfg) {
  const int64_t H = cfg.hidden_size, F = cfg.ffn(), V = cfg.padded_vocab_size();
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * float(cfg.num_layers));
  ParamLayout l;
  l.add("embedding.word_embeddings.weight", {V, H}, InitKind::Normal, std);
  l.add("embedding.position_embeddings.weight", {cfg.max_positions(), H}, InitKind::Normal, std);
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i) + ".";
    l.add(p + "input_layernorm.weight", {H}, InitKind::Ones);
    l.add(p + "input_layernorm.bias", {H}, InitKind::Zeros);
    l.add(p + "self_attention.linear_qkv.weight", {3 * H, H}, InitKind::Normal, std);
    l.add(p + "self_attention.linear_qkv.bias", {3 * H}, InitKind::Zeros);
    l.add(p + "self_attention.linear_proj.weight", {H, H}, InitKind::Normal, out_std);
    l.add(p + "self_attention.linear_proj.bias", {H}, InitKind::Zeros);
    l.add(p + "pre_mlp_layernorm.weight", {H}, InitKind::Ones);
    l.add(p + "pre_mlp_layernorm.bias", {H}, InitKind::Zeros);
    l.add(p + "mlp.linear_fc1.weight", {F, H}, InitKind::Normal, std);
    l.add(p + "mlp.linear_fc1.bias", {F}, InitKind::Zeros);
    l.add(p + "mlp.linear_fc2.weight", {H, F}, InitKind::Normal, out_std);
    l.add(p + "mlp.linear_fc2.bias", {H}, InitKind::Zeros);
  }
  l.add("decoder.final_layernorm.weight", {H}, InitKind::Ones);
  l.add("decoder.final_layernorm.bias", {H}, InitKind::Zeros);
  return l;
}

void init_params(const ParamLayout& layout, float* params, uint64_t seed) {
  for (const ParamSpec& p : layout.params()) {
    float* dst = params + p.offset;
    switch (p.init) {
      case InitKind::Normal:
        fill_normal(dst, p.numel(), p.init_std, seed, stream_id(p.name.c_str()));
        break;
      case InitKind::Zeros: std::fill(dst, dst + p.numel(), 0.f); break;
      case InitKind::Ones: std::fill(dst, dst + p.numel(), 1.f); break;
    }
  }
}

}  // namespace mg
