#include "checkpoint/hf_llama.h"

#include "core/error.h"
#include "model/param_layout.h"

namespace mg {

namespace {

// The HF tensors of our parameter `ours` (a name of gpt_param_layout(c)); `qwen3_moe` picks
// Qwen3-MoE's expert names over Mixtral's.
std::vector<HfRows> parts_of(const std::string& ours, const GPTConfig& c, bool qwen3_moe) {
  const int64_t H = c.hidden_size, V = c.vocab_size, F = c.ffn(), HD = c.head_dim();
  const int64_t NH = c.num_attention_heads, NG = c.query_groups();
  auto whole = [](std::string name, Shape s) {
    const int64_t rows = s[0];
    return std::vector<HfRows>{{std::move(name), std::move(s), 0, rows}};
  };
  if (ours == "embedding.word_embeddings.weight") return whole("model.embed_tokens.weight", {V, H});
  if (ours == "output_layer.weight") return whole("lm_head.weight", {V, H});
  if (ours == "decoder.final_layernorm.weight") return whole("model.norm.weight", {H});
  const std::string layers = "decoder.layers.";
  MG_CHECK(ours.rfind(layers, 0) == 0, "no HF tensor for ", ours);
  const size_t dot = ours.find('.', layers.size());
  const std::string i = ours.substr(layers.size(), dot - layers.size());
  const std::string rest = ours.substr(dot + 1);
  const std::string hf = "model.layers." + i + ".";
  if (rest == "input_layernorm.weight") return whole(hf + "input_layernorm.weight", {H});
  if (rest == "pre_mlp_layernorm.weight") return whole(hf + "post_attention_layernorm.weight", {H});
  if (rest == "self_attention.linear_proj.weight")
    return whole(hf + "self_attn.o_proj.weight", {H, NH * HD});
  if (rest == "self_attention.linear_proj.bias") return whole(hf + "self_attn.o_proj.bias", {H});
  if (rest == "mlp.linear_fc2.weight") return whole(hf + "mlp.down_proj.weight", {H, F});
  // Qwen3: each query and key head RMS-normalised over its HD channels before RoPE.
  if (rest == "self_attention.q_layernorm.weight")
    return whole(hf + "self_attn.q_norm.weight", {HD});
  if (rest == "self_attention.k_layernorm.weight")
    return whole(hf + "self_attn.k_norm.weight", {HD});
  // Mixtral: the router is block_sparse_moe.gate; expert e's fc1 = [w1; w3] (gate; up), fc2 = w2.
  // Qwen3-MoE: the router is mlp.gate; expert e's fc1 = [gate_proj; up_proj], fc2 = down_proj.
  const int64_t E = c.num_experts, FE = c.moe_ffn();
  const std::string moe = hf + (qwen3_moe ? "mlp." : "block_sparse_moe.");
  if (rest == "mlp.router.weight") return whole(moe + "gate.weight", {E, H});
  const std::string experts = "mlp.experts.local_experts.";
  if (rest.rfind(experts, 0) == 0) {
    const size_t at = rest.find('.', experts.size());
    const std::string e = rest.substr(experts.size(), at - experts.size());
    const std::string w = moe + "experts." + e + ".";
    const std::string what = rest.substr(at + 1);
    const char* gate = qwen3_moe ? "gate_proj" : "w1";
    const char* up = qwen3_moe ? "up_proj" : "w3";
    const char* down = qwen3_moe ? "down_proj" : "w2";
    if (what == "linear_fc1.weight")
      return {{w + gate + ".weight", {FE, H}, 0, FE}, {w + up + ".weight", {FE, H}, 0, FE}};
    if (what == "linear_fc2.weight") return whole(w + down + ".weight", {H, FE});
  }
  if (rest == "mlp.linear_fc2.bias") return whole(hf + "mlp.down_proj.bias", {H});
  for (const char* kind : {"weight", "bias"}) {
    const bool w = std::string(kind) == "weight";
    auto shape = [&](int64_t rows) { return w ? Shape{rows, H} : Shape{rows}; };
    if (rest == std::string("mlp.linear_fc1.") + kind) {
      return {{hf + "mlp.gate_proj." + kind, shape(F), 0, F},
              {hf + "mlp.up_proj." + kind, shape(F), 0, F}};
    }
    if (rest == std::string("self_attention.linear_qkv.") + kind) {
      // Megatron's grouped rows: for each group, its NH/NG query heads, then one K and one V head.
      std::vector<HfRows> p;
      const int64_t qpg = NH / NG;
      for (int64_t g = 0; g < NG; ++g) {
        p.push_back({hf + "self_attn.q_proj." + kind, shape(NH * HD), g * qpg * HD, qpg * HD});
        p.push_back({hf + "self_attn.k_proj." + kind, shape(NG * HD), g * HD, HD});
        p.push_back({hf + "self_attn.v_proj." + kind, shape(NG * HD), g * HD, HD});
      }
      return p;
    }
  }
  MG_CHECK(false, "no HF tensor for ", ours);
  return {};
}

}  // namespace

std::vector<LlamaTensor> llama_tensors(const GPTConfig& cfg, const std::string& architecture) {
  std::vector<LlamaTensor> out;
  const ParamLayout layout = gpt_param_layout(cfg);
  const bool qwen3_moe = architecture == "Qwen3MoeForCausalLM";
  for (const ParamSpec& p : layout.params())
    out.push_back({p.name, parts_of(p.name, cfg, qwen3_moe), p.traits.norm_weight});
  return out;
}

bool is_hf_buffer(const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); }

}  // namespace mg
