#include "model/param_layout.h"

#include <algorithm>
#include <numeric>
#include <cmath>

#include "core/checked_math.h"
#include "core/rng.h"

namespace mg {

size_t ParamLayout::add(const ParamDecl& d, const ShardSpec& shard) {
  ParamSpec p;
  p.name = d.name;
  p.global_shape = d.global_shape;
  p.sharding = d.sharding;
  p.tp_size = shard.split_size(d.sharding);
  p.tp_rank = shard.split_rank(d.sharding);
  if (d.sharding.split())
    MG_CHECK(d.global_shape[size_t(d.sharding.split_dim)] % (p.tp_size * d.sharding.stride) == 0,
             p.name, " dim ", d.sharding.split_dim, " not divisible by TP ", p.tp_size,
             " x stride ", d.sharding.stride);
  p.shape = local_shape(d.global_shape, d.sharding, p.tp_size);
  p.offset = total_;
  p.init = d.init;
  p.init_std = d.init_std;
  p.traits = d.traits;
  total_ += p.numel();
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

void ParamLayout::assign_buckets(int64_t bucket_size, int64_t dp, int64_t expert_dp) {
  auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  buckets_.clear();
  bucket_expert_.clear();
  int64_t bucket_start = 0, next = 0;
  // The dense parameters' buckets, then the experts' (reduced over another group).
  for (const bool experts : {false, true}) {
    const int64_t group = experts ? expert_dp : dp;
    const int64_t pad = group > 0 ? std::lcm(group, int64_t(128)) : 1;
    const int64_t align = dp > 0 ? 64 : 1;
    auto close = [&](int64_t end) {
      const int64_t padded = round_up(end, pad);
      buckets_.push_back({bucket_start, padded});
      bucket_expert_.push_back(experts);
      bucket_start = next = padded;
    };
    for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
      if ((it->sharding.expert >= 0) != experts) continue;
      // The word embedding and its tied copy (not an untied output layer: Megatron isolates
      // only the shared embedding).
      const bool shared = it->name == "embedding.word_embeddings.weight" || it->sharding.tied_copy;
      if (shared && next > bucket_start) close(next);
      it->offset = round_up(next, align);
      next = it->offset + it->numel();
      if (shared || next - bucket_start >= bucket_size) close(next);
    }
    if (next > bucket_start) close(next);
  }
  total_ = bucket_start;
}

ParamLayout ParamLayout::slice(int begin, int end) const {
  ParamLayout l = *this;
  l.params_.assign(params_.begin() + begin, params_.begin() + end);
  return l;
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

std::vector<ParamDecl> model_param_decls(const GPTConfig& cfg, const ShardSpec& shard) {
  const int64_t H = cfg.hidden_size, V = cfg.padded_vocab_size();
  const InitScales init{cfg.init_method_std,
                        cfg.init_method_std / std::sqrt(2.0f * float(cfg.num_layers))};
  const int64_t end = shard.layer_end < 0 ? cfg.num_layers : shard.layer_end;
  std::vector<ParamDecl> d;
  if (shard.first_stage)
    embedding_params(d, V, H, cfg.max_positions(), cfg.learned_positions(), init);
  for (int64_t i = shard.layer_begin; i < end; ++i) {
    const size_t first = d.size();
    transformer_layer_params(d, i, cfg.layer_spec(i), H, init);
    if (shard.ep_size > 1)  // this EP rank's experts only
      d.erase(std::remove_if(d.begin() + std::ptrdiff_t(first), d.end(),
                             [&](const ParamDecl& p) {
                               return !shard.holds(p.sharding, cfg.num_experts);
                             }),
              d.end());
  }
  if (shard.last_stage) {
    const size_t first = d.size();
    norm_params(d, "decoder.final_layernorm", cfg.norm(), cfg.norm_weight_offset(), H);
    for (size_t i = first; i < d.size(); ++i) d[i].traits.part = ModelPart::Head;
    if (!cfg.tied_output() || !shard.first_stage)
      output_params(d, V, H, /*tied_copy=*/cfg.tied_output(), init);
  }
  return d;
}

ParamLayout gpt_param_layout(const GPTConfig& cfg, const ShardSpec& shard) {
  ParamLayout l;
  for (const ParamDecl& d : model_param_decls(cfg, shard)) l.add(d, shard);
  return l;
}

namespace {
// The flags that size a parameter, for an overflow message.
const char* size_flags(const std::string& name) {
  if (name.ends_with("word_embeddings.weight") || name.starts_with("output_layer"))
    return "--vocab-size x --hidden-size";
  if (name.ends_with("position_embeddings.weight"))
    return "--max-position-embeddings (default: --seq-length) x --hidden-size";
  if (name.find("linear_qkv") != std::string::npos)
    return "(--num-attention-heads + 2 x --num-query-groups) x --kv-channels x --hidden-size";
  if (name.find("linear_proj") != std::string::npos)
    return "--hidden-size x --num-attention-heads x --kv-channels";
  if (name.find("shared_experts.linear_fc") != std::string::npos)
    return "--moe-shared-expert-intermediate-size x --hidden-size";
  if (name.find("experts.local_experts") != std::string::npos)
    return "--moe-ffn-hidden-size x --hidden-size";
  if (name.find("router") != std::string::npos) return "--num-experts x --hidden-size";
  if (name.find("linear_fc") != std::string::npos) return "--ffn-hidden-size x --hidden-size";
  return "--hidden-size";
}

void add_count(ParamCount& c, const std::vector<ParamDecl>& decls, const ShardSpec& shard) {
  for (const ParamDecl& d : decls) {
    const std::string what = "elements of " + d.name + " (" + size_flags(d.name) + ")";
    int64_t n = 1;
    for (int64_t x : local_shape(d.global_shape, d.sharding, shard.split_size(d.sharding))) {
      MG_USER_CHECK(x >= 0, what, ": a dimension is negative (", x, ")");
      n = checked_mul(n, x, what);
    }
    c.elements = checked_add(c.elements, n, "parameter elements");
    if (d.global_shape.size() == 1) c.vector_elements += n;
    if (d.sharding.expert >= 0) c.expert_elements += n;
    ++c.tensors;
  }
}
}  // namespace

ParamCount shard_param_count(const GPTConfig& cfg, const ShardSpec& shard) {
  ShardSpec outer = shard;  // the embedding and the head: no layers
  outer.layer_begin = outer.layer_end = 0;
  ParamCount c;
  add_count(c, model_param_decls(cfg, outer), shard);
  const int64_t end = shard.layer_end < 0 ? cfg.num_layers : shard.layer_end;
  const int64_t layers = end - shard.layer_begin;
  if (layers <= 0) return c;
  // The layers come in two kinds (dense and MoE, --moe-layer-freq): each kind counted once.
  const GPTConfig::LayerKinds kinds = cfg.layer_kinds(shard.layer_begin, end);
  const char* what = "parameter elements (--num-layers x the elements of one layer)";
  for (const bool moe : {false, true}) {
    const int64_t n = moe ? kinds.moe : layers - kinds.moe;
    if (n == 0) continue;
    const int64_t l = moe ? kinds.first_moe : kinds.first_dense;
    std::vector<ParamDecl> one;
    const float unused_std = 0.f;  // init scales do not change sizes
    transformer_layer_params(one, l, cfg.layer_spec(l), cfg.hidden_size, {unused_std, unused_std});
    std::erase_if(one,
                  [&](const ParamDecl& p) { return !shard.holds(p.sharding, cfg.num_experts); });
    ParamCount layer;
    add_count(layer, one, shard);
    c.elements = checked_add(c.elements, checked_mul(n, layer.elements, what), what);
    c.vector_elements =
        checked_add(c.vector_elements, checked_mul(n, layer.vector_elements, what), what);
    c.tensors = checked_add(c.tensors, checked_mul(n, layer.tensors, what), what);
    c.expert_elements =
        checked_add(c.expert_elements, checked_mul(n, layer.expert_elements, what), what);
  }
  return c;
}

void init_params(const ParamLayout& layout, float* params, uint64_t seed) {
  for (const ParamSpec& p : layout.params()) {
    float* dst = params + p.offset;
    switch (p.init) {
      case InitKind::Normal: {
        const uint64_t stream = stream_id(p.name.c_str());
        // Runs of elements contiguous in both the shard and the global tensor: rows for a
        // split along dim 1, stacked parts for a strided split along dim 0.
        int64_t run = p.numel();
        if (p.sharding.split_dim == 1) run = p.shape[1];
        if (p.sharding.split_dim == 0) run = p.numel() / p.sharding.stride;
        for (int64_t b = 0; b < p.numel(); b += run)
          fill_normal(dst + b, run, p.init_std, seed, stream, global_index(p, b));
        break;
      }
      case InitKind::Zeros: std::fill(dst, dst + p.numel(), 0.f); break;
      case InitKind::Ones: std::fill(dst, dst + p.numel(), 1.f); break;
    }
  }
}

}  // namespace mg
