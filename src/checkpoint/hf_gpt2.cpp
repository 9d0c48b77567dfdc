#include "checkpoint/hf_gpt2.h"

#include <climits>

#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/files.h"
#include "checkpoint/json_fields.h"
#include "core/error.h"
#include "core/log.h"
#include "model/param_layout.h"

namespace mg {

namespace {

using json = nlohmann::json;

// One HF tensor <-> one of ours: how element (r, c) of ours maps to HF's flat index.
struct Mapping {
  std::string hf, ours;
  Shape hf_shape;
  enum Kind { Copy, Transpose, QkvWeight, QkvBias } kind;
};

std::vector<Mapping> mappings(const GPTConfig& c) {
  const int64_t H = c.hidden_size, F = c.ffn();
  std::vector<Mapping> m = {{"transformer.wte.weight",
                             "embedding.word_embeddings.weight",
                             {c.vocab_size, H},
                             Mapping::Copy},
                            {"transformer.wpe.weight",
                             "embedding.position_embeddings.weight",
                             {c.max_positions(), H},
                             Mapping::Copy}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    const std::string d = "decoder.layers." + std::to_string(i) + ".";
    auto add = [&](const std::string& a, const std::string& b, Shape s, Mapping::Kind k) {
      m.push_back({h + a, d + b, std::move(s), k});
    };
    add("ln_1.weight", "input_layernorm.weight", {H}, Mapping::Copy);
    add("ln_1.bias", "input_layernorm.bias", {H}, Mapping::Copy);
    add("attn.c_attn.weight", "self_attention.linear_qkv.weight", {H, 3 * H}, Mapping::QkvWeight);
    add("attn.c_attn.bias", "self_attention.linear_qkv.bias", {3 * H}, Mapping::QkvBias);
    add("attn.c_proj.weight", "self_attention.linear_proj.weight", {H, H}, Mapping::Transpose);
    add("attn.c_proj.bias", "self_attention.linear_proj.bias", {H}, Mapping::Copy);
    add("ln_2.weight", "pre_mlp_layernorm.weight", {H}, Mapping::Copy);
    add("ln_2.bias", "pre_mlp_layernorm.bias", {H}, Mapping::Copy);
    add("mlp.c_fc.weight", "mlp.linear_fc1.weight", {H, F}, Mapping::Transpose);
    add("mlp.c_fc.bias", "mlp.linear_fc1.bias", {F}, Mapping::Copy);
    add("mlp.c_proj.weight", "mlp.linear_fc2.weight", {F, H}, Mapping::Transpose);
    add("mlp.c_proj.bias", "mlp.linear_fc2.bias", {H}, Mapping::Copy);
  }
  m.push_back({"transformer.ln_f.weight", "decoder.final_layernorm.weight", {H}, Mapping::Copy});
  m.push_back({"transformer.ln_f.bias", "decoder.final_layernorm.bias", {H}, Mapping::Copy});
  return m;
}

// For each element of our tensor (shape `ours`, row-major index k), the HF flat index, or -1 for
// vocabulary padding rows that HF does not have.
int64_t hf_index(const Mapping& m, const Shape& ours, int64_t k, const GPTConfig& c) {
  const int64_t H = c.hidden_size, HD = c.head_dim();
  switch (m.kind) {
    case Mapping::Copy: return k < shape_numel(m.hf_shape) ? k : -1;
    case Mapping::Transpose: {  // ours [out, in] <- HF [in, out]
      const int64_t o = k / ours[1], i = k % ours[1];
      return i * ours[0] + o;
    }
    case Mapping::QkvWeight:
    case Mapping::QkvBias: {
      const int64_t row = m.kind == Mapping::QkvBias ? k : k / H;
      const int64_t head = row / (3 * HD), j = (row / HD) % 3, d = row % HD;
      const int64_t col = j * H + head * HD + d;  // HF column: [q | k | v], heads inside
      return m.kind == Mapping::QkvBias ? col : (k % H) * 3 * H + col;
    }
  }
  return -1;
}

}  // namespace

GPTConfig hf_gpt2_config(const std::string& path, int64_t divisible_by) {
  const std::string what = "HF config '" + path + "'";
  const json j = ckpt::JsonFields::parse_object(ckpt::read_text_file(path), what);
  const ckpt::JsonFields f(j, what);
  for (const char* k : {"n_layer", "n_embd", "n_head", "n_positions", "vocab_size"})
    MG_USER_CHECK(f.has(k), what, " lacks ", k, " (is it a GPT-2 config.json?)");
  GPTConfig c;
  c.num_layers = f.integer("n_layer", 1, 1 << 16);
  c.hidden_size = f.integer("n_embd", 1, INT_MAX);
  c.num_attention_heads = f.integer("n_head", 1, c.hidden_size);
  c.max_position_embeddings = f.integer("n_positions", 1, INT_MAX);
  c.seq_length = c.max_position_embeddings;
  c.vocab_size = f.integer("vocab_size", 1, INT_MAX);
  // null (or absent) n_inner means HF's default 4 x n_embd, which is also ours (0).
  c.ffn_hidden_size =
      f.has("n_inner") && !f.raw("n_inner").is_null() ? f.integer("n_inner", 1, INT_MAX) : 0;
  if (f.has("layer_norm_epsilon")) c.norm_epsilon = float(f.number("layer_norm_epsilon", 1e-30, 1));
  if (f.has("initializer_range"))
    c.init_method_std = float(f.number("initializer_range", 1e-30, 1e3));
  c.make_vocab_size_divisible_by = divisible_by;
  // GPT-2's residual and attention dropouts (0.1 in the published models; our
  // defaults when absent). HF's embd_pdrop has no flag of its own upstream: --hidden-dropout
  // covers the embedding output too.
  if (f.has("resid_pdrop")) c.hidden_dropout = float(f.number("resid_pdrop", 0, 0.999999));
  if (f.has("attn_pdrop")) c.attention_dropout = float(f.number("attn_pdrop", 0, 0.999999));
  if (f.has("activation_function")) f.one_of("activation_function", {"gelu_new"});  // GPT-2's
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(what + " describes no valid model: " + e.what());
  }
  return c;
}

void write_hf_gpt2_config(const std::string& path, const GPTConfig& c) {
  const json j = {{"architectures", {"GPT2LMHeadModel"}},
                  {"model_type", "gpt2"},
                  {"n_layer", c.num_layers},
                  {"n_embd", c.hidden_size},
                  {"n_head", c.num_attention_heads},
                  {"n_positions", c.max_positions()},
                  {"n_ctx", c.max_positions()},
                  {"n_inner", c.ffn() == 4 * c.hidden_size ? json() : json(c.ffn())},
                  {"vocab_size", c.vocab_size},
                  {"activation_function", "gelu_new"},
                  {"layer_norm_epsilon", c.norm_epsilon},
                  {"initializer_range", c.init_method_std},
                  {"tie_word_embeddings", true},
                  {"torch_dtype", "float32"}};
  ckpt::write_file_atomic(path, j.dump(2) + "\n");
}

std::vector<float> params_from_hf(const SafetensorsReader& hf, const GPTConfig& cfg,
                                  bool allow_unused) {
  const ParamLayout layout = gpt_param_layout(cfg);
  std::vector<float> out(size_t(layout.total_numel()), 0.f);
  std::set<std::string> used;
  // Files saved from GPT2Model have no "transformer." prefix.
  auto name_in_file = [&](const std::string& hf_name) {
    const std::string bare = hf_name.substr(std::string("transformer.").size());
    return hf.has(hf_name) || !hf.has(bare) ? hf_name : bare;
  };
  for (const Mapping& m : mappings(cfg)) {
    const std::string name = name_in_file(m.hf);
    const SafeTensor& t = hf.get(name);
    used.insert(name);
    MG_USER_CHECK(t.shape == m.hf_shape, "'", hf.path(), "': tensor ", name, " has shape ",
                  shape_str(t.shape), ", the config says ", shape_str(m.hf_shape));
    const std::vector<float> v = t.to_f32();
    const ParamSpec& p = layout.get(m.ours);
    for (int64_t k = 0; k < p.numel(); ++k) {
      const int64_t i = hf_index(m, p.shape, k, cfg);
      out[size_t(p.offset + k)] = i >= 0 ? v[size_t(i)] : 0.f;  // padding rows: zero
    }
  }
  for (int64_t i = 0; i < cfg.num_layers; ++i)  // HF's causal-mask buffers: not weights
    for (const char* buffer : {"attn.bias", "attn.masked_bias"}) {
      const std::string name = name_in_file("transformer.h." + std::to_string(i) + "." + buffer);
      if (hf.has(name)) used.insert(name);
    }
  if (hf.has("lm_head.weight")) {  // tied to wte: a copy is fine, other values would be lost
    const std::string wte = name_in_file("transformer.wte.weight");
    const SafeTensor& head = hf.get("lm_head.weight");
    MG_USER_CHECK(head.shape == hf.get(wte).shape && head.to_f32() == hf.get(wte).to_f32(), "'",
                  hf.path(), "': lm_head.weight differs from ", wte,
                  "; GPT-2 ties the output layer to the embedding, so it cannot be converted");
    used.insert("lm_head.weight");
  }
  std::vector<std::string> unused;
  for (const auto& [name, t] : hf.tensors())
    if (!used.count(name)) unused.push_back(name);
  if (!unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 8) list += str_cat(", ... (", unused.size() - 8, " more)");
    const std::string what =
        str_cat("'", hf.path(), "' holds ", unused.size(), " tensors the config (n_layer ",
                cfg.num_layers, ") does not use: ", list);
    MG_USER_CHECK(allow_unused, what,
                  "; check config.json against the file, or pass --allow-unused-tensors to "
                  "drop them");
    log_line(" > warning: " + what + "; skipped (--allow-unused-tensors)");
  }
  return out;
}

std::vector<NamedF32> params_to_hf(const std::vector<float>& params, const GPTConfig& cfg) {
  const ParamLayout layout = gpt_param_layout(cfg);
  std::vector<NamedF32> out;
  for (const Mapping& m : mappings(cfg)) {
    NamedF32 t{m.hf, m.hf_shape, std::vector<float>(size_t(shape_numel(m.hf_shape)))};
    const ParamSpec& p = layout.get(m.ours);
    // HF's ln weights are gamma: zero-centred ones (--apply-layernorm-1p) are written as w + 1.
    const float offset = p.traits.norm_weight ? cfg.norm_weight_offset() : 0.f;
    for (int64_t k = 0; k < p.numel(); ++k) {
      const int64_t i = hf_index(m, p.shape, k, cfg);
      if (i >= 0) t.values[size_t(i)] = params[size_t(p.offset + k)] + offset;
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace mg
