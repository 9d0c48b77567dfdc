#include "model/param_layout.h"

#include <algorithm>
#include <numeric>
#include <cmath>

#include "core/rng.h"

namespace mg {

size_t ParamLayout::add(std::string name, Shape global_shape, int tp_split_dim, InitKind init,
                        float init_std, const ShardSpec& shard) {
  ParamSpec p;
  p.name = std::move(name);
  p.global_shape = global_shape;
  p.shape = std::move(global_shape);
  p.tp_split_dim = tp_split_dim;
  if (tp_split_dim >= 0) {
    MG_CHECK(p.shape[tp_split_dim] % shard.tp_size == 0, p.name, " dim ", tp_split_dim,
             " not divisible by TP ", shard.tp_size);
    p.shape[tp_split_dim] /= shard.tp_size;
  }
  p.offset = total_;
  p.init = init;
  p.init_std = init_std;
  p.weight_decay = p.shape.size() > 1 && !p.name.ends_with(".bias");
  total_ += p.numel();
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

void ParamLayout::assign_buckets(int64_t bucket_size, int64_t dp) {
  const int64_t pad = dp > 0 ? std::lcm(dp, int64_t(128)) : 1;
  const int64_t align = dp > 0 ? 64 : 1;
  auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  buckets_.clear();
  int64_t bucket_start = 0, next = 0;
  auto close = [&](int64_t end) {
    const int64_t padded = round_up(end, pad);
    buckets_.push_back({bucket_start, padded});
    bucket_start = next = padded;
  };
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    const bool shared = it->name == "embedding.word_embeddings.weight" ||
                        it->name == "output_layer.weight";
    if (shared && next > bucket_start) close(next);
    it->offset = round_up(next, align);
    next = it->offset + it->numel();
    if (shared || next - bucket_start >= bucket_size) close(next);
  }
  if (next > bucket_start) close(next);
  total_ = bucket_start;
}

const ParamSpec& ParamLayout::get(const std::string& name) const {
  auto it = std::find_if(params_.begin(), params_.end(),
                         [&](const ParamSpec& p) { return p.name == name; });
  MG_CHECK(it != params_.end(), "no parameter named ", name);
  return *it;
}

bool ParamLayout::has(const std::string& name) const {
  return std::any_of(params_.begin(), params_.end(),
                     [&](const ParamSpec& p) { return p.name == name; });
}

ParamLayout gpt_param_layout(const GPTConfig& cfg, const ShardSpec& shard) {
  const int64_t H = cfg.hidden_size, F = cfg.ffn(), V = cfg.padded_vocab_size();
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * float(cfg.num_layers));
  const int64_t end = shard.layer_end < 0 ? cfg.num_layers : shard.layer_end;
  ParamLayout l;
  auto add = [&](const std::string& name, Shape shape, int split, InitKind init, float s = 0.f) {
    return l.add(name, std::move(shape), split, init, s, shard);
  };
  auto sp = [&](size_t idx) { l.param(idx).sequence_parallel = true; };
  if (shard.first_stage) {
    add("embedding.word_embeddings.weight", {V, H}, 0, InitKind::Normal, std);
    add("embedding.position_embeddings.weight", {cfg.max_positions(), H}, -1, InitKind::Normal,
        std);
  }
  for (int64_t i = shard.layer_begin; i < end; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i) + ".";
    sp(add(p + "input_layernorm.weight", {H}, -1, InitKind::Ones));
    sp(add(p + "input_layernorm.bias", {H}, -1, InitKind::Zeros));
    add(p + "self_attention.linear_qkv.weight", {3 * H, H}, 0, InitKind::Normal, std);
    add(p + "self_attention.linear_qkv.bias", {3 * H}, 0, InitKind::Zeros);
    add(p + "self_attention.linear_proj.weight", {H, H}, 1, InitKind::Normal, out_std);
    sp(add(p + "self_attention.linear_proj.bias", {H}, -1, InitKind::Zeros));
    sp(add(p + "pre_mlp_layernorm.weight", {H}, -1, InitKind::Ones));
    sp(add(p + "pre_mlp_layernorm.bias", {H}, -1, InitKind::Zeros));
    add(p + "mlp.linear_fc1.weight", {F, H}, 0, InitKind::Normal, std);
    add(p + "mlp.linear_fc1.bias", {F}, 0, InitKind::Zeros);
    add(p + "mlp.linear_fc2.weight", {H, F}, 1, InitKind::Normal, out_std);
    sp(add(p + "mlp.linear_fc2.bias", {H}, -1, InitKind::Zeros));
  }
  if (shard.last_stage) {
    sp(add("decoder.final_layernorm.weight", {H}, -1, InitKind::Ones));
    sp(add("decoder.final_layernorm.bias", {H}, -1, InitKind::Zeros));
    if (!shard.first_stage) {
      // Tied output layer on the last stage: zero-initialized, then summed with the first
      // stage's word embedding over the embedding group (Megatron's scheme).
      l.param(add("output_layer.weight", {V, H}, 0, InitKind::Zeros)).tied_copy = true;
    }
  }
  return l;
}

int64_t global_index(const ParamSpec& p, int64_t local_index, int64_t tp_size, int64_t tp_rank) {
  if (p.tp_split_dim < 0 || tp_size == 1) return local_index;
  if (p.tp_split_dim == 0) return tp_rank * p.numel() + local_index;
  // Split along dim 1 of a 2-D [rows, cols] tensor.
  const int64_t local_cols = p.shape[1], row = local_index / local_cols;
  return row * p.global_shape[1] + tp_rank * local_cols + local_index % local_cols;
}

void init_params(const ParamLayout& layout, float* params, uint64_t seed, const ShardSpec& shard) {
  for (const ParamSpec& p : layout.params()) {
    float* dst = params + p.offset;
    switch (p.init) {
      case InitKind::Normal: {
        const uint64_t stream = stream_id(p.name.c_str());
        if (p.tp_split_dim == 1) {  // one contiguous global run per row
          const int64_t cols = p.shape[1];
          for (int64_t r = 0; r < p.shape[0]; ++r)
            fill_normal(dst + r * cols, cols, p.init_std, seed, stream,
                        global_index(p, r * cols, shard.tp_size, shard.tp_rank));
        } else {
          fill_normal(dst, p.numel(), p.init_std, seed, stream,
                      global_index(p, 0, shard.tp_size, shard.tp_rank));
        }
        break;
      }
      case InitKind::Zeros: std::fill(dst, dst + p.numel(), 0.f); break;
      case InitKind::Ones: std::fill(dst, dst + p.numel(), 1.f); break;
    }
  }
}

}  // namespace mg
