#include "layers/block_params.h"

#include "core/error.h"

namespace mg {

namespace {
Sharding replicated_sp() {
  Sharding s;
  s.sequence_parallel = true;
  return s;
}
Sharding split(int dim, int64_t stride = 1) {
  Sharding s;
  s.split_dim = dim;
  s.stride = stride;
  return s;
}
Sharding vocab_rows() {  // vocab-parallel: rows split, their count padded for the TP size
  Sharding s = split(0);
  s.vocab_padded = true;
  return s;
}
}  // namespace

// Biases (and norms' biases) take no weight decay.
const ParamTraits kBias{.weight_decay = false};

void embedding_params(std::vector<ParamDecl>& out, int64_t V, int64_t H, int64_t max_positions,
                      bool learned_positions, const InitScales& init) {
  out.push_back({"embedding.word_embeddings.weight",
                 {V, H},
                 vocab_rows(),
                 InitKind::Normal,
                 init.std,
                 {.embedding_or_output = true, .part = ModelPart::Embedding}});
  if (learned_positions)
    out.push_back({"embedding.position_embeddings.weight",
                   {max_positions, H},
                   Sharding{},
                   InitKind::Normal,
                   init.std,
                   {.part = ModelPart::Embedding}});
}

void norm_params(std::vector<ParamDecl>& out, const std::string& prefix, NormKind kind,
                 float weight_offset, int64_t H) {
  MG_CHECK(weight_offset == 0.f || weight_offset == 1.f, "norm weight offset ", weight_offset);
  out.push_back({prefix + ".weight",
                 {H},
                 replicated_sp(),
                 weight_offset == 0.f ? InitKind::Ones : InitKind::Zeros,
                 0.f,
                 {.weight_decay = false, .norm_weight = true}});
  if (kind == NormKind::LayerNorm)
    out.push_back({prefix + ".bias", {H}, replicated_sp(), InitKind::Zeros, 0.f, kBias});
}

void attention_params(std::vector<ParamDecl>& out, const std::string& prefix, const LayerSpec& s,
                      int64_t H, const InitScales& init) {
  const int64_t QKV = s.qkv_rows(), A = s.heads * s.kv_channels;
  out.push_back({prefix + "linear_qkv.weight", {QKV, H}, split(0), InitKind::Normal, init.std});
  if (s.qkv_bias)
    out.push_back({prefix + "linear_qkv.bias", {QKV}, split(0), InitKind::Zeros, 0.f, kBias});
  out.push_back({prefix + "linear_proj.weight", {H, A}, split(1), InitKind::Normal, init.out_std});
  if (s.linear_bias)
    out.push_back({prefix + "linear_proj.bias", {H}, replicated_sp(), InitKind::Zeros, 0.f, kBias});
  if (s.qk_layernorm) {  // over HD channels of this rank's heads: grads partial across TP
    const size_t first = out.size();
    norm_params(out, prefix + "q_layernorm", s.norm, s.norm_weight_offset, s.kv_channels);
    norm_params(out, prefix + "k_layernorm", s.norm, s.norm_weight_offset, s.kv_channels);
    for (size_t i = first; i < out.size(); ++i) {
      out[i].sharding.sequence_parallel = false;
      out[i].sharding.tp_partial = true;
    }
  }
}

void mlp_params(std::vector<ParamDecl>& out, const std::string& prefix, const LayerSpec& s,
                int64_t H, const InitScales& init) {
  const int64_t stride = s.mlp == MlpKind::SwiGLU ? 2 : 1;
  out.push_back({prefix + "linear_fc1.weight",
                 {s.fc1_rows(), H},
                 split(0, stride),
                 InitKind::Normal,
                 init.std});
  if (s.linear_bias)
    out.push_back({prefix + "linear_fc1.bias",
                   {s.fc1_rows()},
                   split(0, stride),
                   InitKind::Zeros,
                   0.f,
                   kBias});
  out.push_back(
      {prefix + "linear_fc2.weight", {H, s.ffn}, split(1), InitKind::Normal, init.out_std});
  if (s.linear_bias)
    out.push_back({prefix + "linear_fc2.bias", {H}, replicated_sp(), InitKind::Zeros, 0.f, kBias});
}

namespace {
// An expert's MLP (or the shared experts'): as mlp_params, but its linear_fc2 bias is added to
// the TP-partial outputs on TP rank 0 before they are combined and reduced, so its gradient,
// taken from the full output gradient, is whole on every rank (not partial under SP).
void expert_mlp_params(std::vector<ParamDecl>& out, const std::string& prefix, const LayerSpec& s,
                       int64_t ffn, int64_t fc1_rows, int64_t H, const InitScales& init) {
  const int64_t stride = s.mlp == MlpKind::SwiGLU ? 2 : 1;
  out.push_back(
      {prefix + "linear_fc1.weight", {fc1_rows, H}, split(0, stride), InitKind::Normal, init.std});
  if (s.linear_bias)
    out.push_back(
        {prefix + "linear_fc1.bias", {fc1_rows}, split(0, stride), InitKind::Zeros, 0.f, kBias});
  out.push_back({prefix + "linear_fc2.weight", {H, ffn}, split(1), InitKind::Normal, init.out_std});
  if (s.linear_bias)
    out.push_back({prefix + "linear_fc2.bias", {H}, Sharding{}, InitKind::Zeros, 0.f, kBias});
}
}  // namespace

void moe_params(std::vector<ParamDecl>& out, const std::string& prefix, const LayerSpec& s,
                int64_t H, const InitScales& init) {
  out.push_back(
      {prefix + "router.weight", {s.moe.num_experts, H}, Sharding{}, InitKind::Normal, init.std});
  for (int64_t e = 0; e < s.moe.num_experts; ++e) {
    const size_t first = out.size();
    expert_mlp_params(out, prefix + "experts.local_experts." + std::to_string(e) + ".", s,
                      s.moe.ffn, s.expert_fc1_rows(), H, init);
    for (size_t i = first; i < out.size(); ++i) out[i].sharding.expert = e;
  }
  if (s.ffn > 0)
    expert_mlp_params(out, prefix + "shared_experts.", s, s.ffn, s.fc1_rows(), H, init);
}

void transformer_layer_params(std::vector<ParamDecl>& out, int64_t layer, const LayerSpec& s,
                              int64_t H, const InitScales& init) {
  const std::string p = "decoder.layers." + std::to_string(layer) + ".";
  const size_t first = out.size();
  norm_params(out, p + "input_layernorm", s.norm, s.norm_weight_offset, H);
  attention_params(out, p + "self_attention.", s, H, init);
  norm_params(out, p + "pre_mlp_layernorm", s.norm, s.norm_weight_offset, H);
  if (s.is_moe()) moe_params(out, p + "mlp.", s, H, init);
  else mlp_params(out, p + "mlp.", s, H, init);
  for (size_t i = first; i < out.size(); ++i) out[i].traits.layer = layer;
}

void output_params(std::vector<ParamDecl>& out, int64_t V, int64_t H, bool tied_copy,
                   const InitScales& init) {
  Sharding s = vocab_rows();
  s.tied_copy = tied_copy;
  out.push_back({"output_layer.weight",
                 {V, H},
                 s,
                 tied_copy ? InitKind::Zeros : InitKind::Normal,
                 tied_copy ? 0.f : init.std,
                 {.embedding_or_output = true, .part = ModelPart::Head}});
}

}  // namespace mg
