#include "checkpoint/hf_llama_config.h"

#include <algorithm>
#include <climits>

#include "checkpoint/json_fields.h"
#include "core/error.h"

namespace mg {

namespace {

using json = nlohmann::json;

struct Family {
  const char* architecture;
  const char* model_type;
};
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama"},     {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},     {"Qwen3ForCausalLM", "qwen3"},
    {"MixtralForCausalLM", "mixtral"}, {"Qwen3MoeForCausalLM", "qwen3_moe"}};

bool is_qwen3(const std::string& arch) {
  return arch == "Qwen3ForCausalLM" || arch == "Qwen3MoeForCausalLM";
}

// config.json's head_dim when absent: Qwen3ForCausalLM's 128, else hidden / heads (Qwen3-MoE's
// too).
int64_t default_head_dim(const std::string& arch, const GPTConfig& c) {
  return arch == "Qwen3ForCausalLM" ? 128 : c.hidden_size / c.num_attention_heads;
}

// Llama 3.1's fixed RoPE-scaling constants (Megatron's --use-rope-scaling takes only the factor).
constexpr double kLowFreqFactor = 1, kHighFreqFactor = 4, kOriginalContext = 8192;

bool absent_or_null(const ckpt::JsonFields& f, const std::string& key) {
  return !f.has(key) || f.raw(key).is_null();
}

// rope_scaling: null, {"rope_type": "default"}, or Llama 3.1's {"rope_type": "llama3", "factor",
// "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}.
void read_rope_scaling(const ckpt::JsonFields& f, GPTConfig& c) {
  if (absent_or_null(f, "rope_scaling")) return;
  const ckpt::JsonFields r = f.object("rope_scaling");
  const std::string type_key = r.has("rope_type") ? "rope_type" : "type";  // older files: "type"
  const std::string type = r.one_of(type_key, {"default", "llama3"});
  if (type == "default") return;
  c.use_rope_scaling = true;
  c.rope_scaling_factor = float(r.number("factor", 1e-6, 1e6));
  auto fixed = [&](const char* key, double want) {
    MG_USER_CHECK(r.number(key, -1e9, 1e9) == want, r.name(key), " must be ", want,
                  " (Megatron's --use-rope-scaling fixes it; only the factor is free), got ",
                  r.raw(key).dump());
  };
  fixed("low_freq_factor", kLowFreqFactor);
  fixed("high_freq_factor", kHighFreqFactor);
  fixed("original_max_position_embeddings", kOriginalContext);
}

// Mixtral's mixture of experts: every layer's MLP is num_local_experts SwiGLU experts of width
// intermediate_size, num_experts_per_tok per token. Its router (softmax over all experts, top-k,
// weights renormalised over the k) is Megatron's default: softmax over the top-k logits, the
// same numbers. The training-only router fields (output_router_logits, router_aux_loss_coef,
// router_jitter_noise) are not carried: the kept config.json gives them back on export.
void read_mixtral(const ckpt::JsonFields& f, GPTConfig& c) {
  c.num_experts = f.integer("num_local_experts", 1, 1 << 20);
  c.moe_router_topk = f.integer("num_experts_per_tok", 1, c.num_experts);
  c.moe_ffn_hidden_size = c.ffn_hidden_size;
  for (const char* bias : {"attention_bias", "mlp_bias"})
    MG_USER_CHECK(!(f.has(bias) && f.boolean(bias)), f.name(bias),
                  " is true: MixtralForCausalLM has no biases");
}

// Qwen3 (dense and MoE): each query and key head RMS-normalised over its HD channels before
// RoPE (q_norm, k_norm: Megatron's --qk-layernorm). attention_bias puts biases on q/k/v/o and
// none on the MLP, which Megatron cannot express (every linear layer, or q/k/v alone).
void read_qwen3(const ckpt::JsonFields& f, GPTConfig& c) {
  c.qk_layernorm = true;
  MG_USER_CHECK(!(f.has("attention_bias") && f.boolean("attention_bias")), f.name("attention_bias"),
                " is true: q/k/v/o biases without MLP biases cannot be "
                "represented (Megatron has biases on every linear layer or on q/k/v alone); only "
                "false converts");
}

// Qwen3-MoE's sparse layers (transformers' Qwen3MoeDecoderLayer): layer i unless listed in
// mlp_only_layers (default []), when (i + 1) % decoder_sparse_step (default 1) == 0.
std::vector<bool> qwen3_moe_layers(const ckpt::JsonFields& f, int64_t layers) {
  const int64_t step =
      absent_or_null(f, "decoder_sparse_step") ? 1 : f.integer("decoder_sparse_step", 1, INT_MAX);
  const std::vector<int64_t> dense = absent_or_null(f, "mlp_only_layers")
                                         ? std::vector<int64_t>{}
                                         : f.integers("mlp_only_layers", 0, layers - 1);
  std::vector<bool> moe(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i)
    moe[size_t(i)] = (i + 1) % step == 0 && std::find(dense.begin(), dense.end(), i) == dense.end();
  return moe;
}

// Qwen3-MoE's mixture of experts: the layers of qwen3_moe_layers (--moe-layer-freq as a 0/1
// list, or "1" when all) hold num_experts SwiGLU experts of width moe_intermediate_size, the
// others a SwiGLU MLP of width intermediate_size. The router takes the softmax over all experts
// and the top k; norm_topk_prob renormalises the k weights (Megatron's default, the softmax over
// the top-k logits: the same numbers), else they stay (--moe-router-pre-softmax; transformers'
// default). The training-only fields (router_aux_loss_coef, output_router_logits) are not
// carried, as Mixtral's are not: the kept config.json gives them back on export.
void read_qwen3_moe(const ckpt::JsonFields& f, GPTConfig& c) {
  c.num_experts = f.integer("num_experts", 1, 1 << 20);
  c.moe_router_topk = f.integer("num_experts_per_tok", 1, c.num_experts);
  c.moe_ffn_hidden_size = f.integer("moe_intermediate_size", 1, INT_MAX);
  c.moe_router_pre_softmax = !(f.has("norm_topk_prob") && f.boolean("norm_topk_prob"));
  const std::vector<bool> moe = qwen3_moe_layers(f, c.num_layers);
  if (std::find(moe.begin(), moe.end(), false) == moe.end()) return;  // "1": every layer
  c.moe_layer_freq = "[";
  for (size_t i = 0; i < moe.size(); ++i)
    c.moe_layer_freq += std::string(i ? "," : "") + (moe[i] ? "1" : "0");
  c.moe_layer_freq += "]";
}

// decoder_sparse_step and mlp_only_layers for c's MoE layers: the source's (in j) when they give
// the same layers, else step 1 with the dense layers listed.
void put_qwen3_moe_layers(json& j, const GPTConfig& c) {
  std::vector<bool> want(static_cast<size_t>(c.num_layers));
  std::vector<int64_t> dense;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    want[size_t(l)] = c.is_moe_layer(l);
    if (!want[size_t(l)]) dense.push_back(l);
  }
  try {
    if (qwen3_moe_layers(ckpt::JsonFields(j, "config.json"), c.num_layers) == want) return;
  } catch (const UsageError&) {  // the source's fields are not valid: written anew
  }
  if (j.contains("decoder_sparse_step")) j["decoder_sparse_step"] = 1;
  if (j.contains("mlp_only_layers") || !dense.empty()) j["mlp_only_layers"] = dense;
}

std::string joined(const std::vector<std::string>& items) {
  std::string list;
  for (const std::string& b : items) list += (list.empty() ? "" : ", ") + b;
  return list;
}

constexpr const char* kBiases = "biases (--add-bias-linear / --add-qkv-bias)";

// What sets a mixture-of-experts model apart from both Mixtral and Qwen3-MoE.
std::vector<std::string> moe_differences(const GPTConfig& m) {
  std::vector<std::string> bad;
  if (m.moe_shared_expert_intermediate_size > 0)
    bad.push_back("--moe-shared-expert-intermediate-size (shared experts)");
  if (m.moe_router_score_function != "softmax")
    bad.push_back("--moe-router-score-function " + m.moe_router_score_function);
  if (m.moe_router_topk_scaling_factor > 0.f && m.moe_router_topk_scaling_factor != 1.f)
    bad.push_back(str_cat("--moe-router-topk-scaling-factor ", m.moe_router_topk_scaling_factor));
  if (m.moe_router_group_topk > 0)
    bad.push_back(
        str_cat("--moe-router-num-groups ", m.moe_router_num_groups, " (group-limited routing)"));
  if (m.add_bias_linear || m.add_qkv_bias) bad.push_back(kBiases);
  return bad;
}

// MixtralForCausalLM for a mixture-of-experts model; a UsageError naming every flag that sets
// the model apart from what Mixtral expresses.
std::string mixtral_architecture_for(const GPTConfig& m, const std::string& what) {
  std::vector<std::string> bad = moe_differences(m);
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (!m.is_moe_layer(l)) {
      bad.push_back(str_cat("--moe-layer-freq ", m.moe_layer_freq, " (layer ", l,
                            " is dense; every Mixtral layer is MoE)"));
      break;
    }
  if (m.moe_router_pre_softmax) bad.push_back("--moe-router-pre-softmax");
  MG_USER_CHECK(bad.empty(), what, ": the mixture-of-experts model has ", joined(bad),
                "; MixtralForCausalLM cannot represent it (softmax router over the top-k, "
                "every layer MoE, no shared experts, no biases)");
  return "MixtralForCausalLM";
}

// A model with --qk-layernorm: Qwen3ForCausalLM, or Qwen3MoeForCausalLM with experts (dense
// layers and either router normalisation expressed); a UsageError naming every flag that sets
// it apart from Qwen3.
std::string qwen3_architecture_for(const GPTConfig& m, const std::string& what) {
  const bool moe = m.num_experts > 0;
  std::vector<std::string> bad;
  if (moe) bad = moe_differences(m);
  else if (m.add_bias_linear || m.add_qkv_bias) bad.push_back(kBiases);
  const char* arch = moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM";
  MG_USER_CHECK(bad.empty(), what, ": the model with --qk-layernorm has ", joined(bad), "; ", arch,
                " cannot represent it (no biases",
                moe ? ", a softmax router, no shared experts)" : ")");
  return arch;
}

}  // namespace

const char* const kHfArchitecturesRead =
    "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
    "MixtralForCausalLM and Qwen3MoeForCausalLM";

bool is_hf_llama_family(const std::string& architecture) {
  return std::any_of(std::begin(kFamilies), std::end(kFamilies),
                     [&](const Family& f) { return architecture == f.architecture; });
}

std::string hf_architecture(const json& config, const std::string& path) {
  const ckpt::JsonFields f(config, "HF config '" + path + "'");
  const std::vector<std::string> a = f.strings("architectures");
  MG_USER_CHECK(a.size() == 1, f.name("architectures"), " must name one architecture, got ",
                config["architectures"].dump());
  return a[0];
}

GPTConfig hf_llama_config(const json& config, const std::string& path, int64_t divisible_by) {
  const std::string what = "HF config '" + path + "'";
  const ckpt::JsonFields f(config, what);
  const std::string arch = hf_architecture(config, path);
  MG_USER_CHECK(is_hf_llama_family(arch), f.name("architectures"), " is \"", arch,
                "\"; megatron convert reads ", kHfArchitecturesRead);
  if (f.has("hidden_act")) f.one_of("hidden_act", {"silu"});
  GPTConfig c;
  c.num_layers = f.integer("num_hidden_layers", 1, 1 << 16);
  c.hidden_size = f.integer("hidden_size", 1, INT_MAX);
  c.num_attention_heads = f.integer("num_attention_heads", 1, INT_MAX);
  c.ffn_hidden_size = f.integer("intermediate_size", 1, INT_MAX);
  const int64_t groups = absent_or_null(f, "num_key_value_heads")
                             ? c.num_attention_heads
                             : f.integer("num_key_value_heads", 1, c.num_attention_heads);
  c.group_query_attention = groups != c.num_attention_heads;
  c.num_query_groups = c.group_query_attention ? groups : 1;
  c.kv_channels =
      absent_or_null(f, "head_dim") ? default_head_dim(arch, c) : f.integer("head_dim", 1, INT_MAX);
  c.normalization = "RMSNorm";
  c.norm_epsilon = float(f.number("rms_norm_eps", 1e-30, 1));
  c.swiglu = true;
  c.position_embedding_type = "rope";
  c.rotary_base =
      absent_or_null(f, "rope_theta") ? 10000.f : float(f.number("rope_theta", 1, 1e12));
  read_rope_scaling(f, c);
  // Every model of the family defaults to an untied output layer.
  c.untie_embeddings_and_output_weights =
      !(f.has("tie_word_embeddings") && f.boolean("tie_word_embeddings"));
  c.max_position_embeddings = f.integer("max_position_embeddings", 1, INT_MAX);
  c.seq_length = std::min<int64_t>(c.max_position_embeddings, 4096);
  c.vocab_size = f.integer("vocab_size", 1, INT_MAX);
  c.make_vocab_size_divisible_by = divisible_by;
  if (f.has("initializer_range"))
    c.init_method_std = float(f.number("initializer_range", 1e-30, 1e3));
  if (is_qwen3(arch)) read_qwen3(f, c);
  // Biases: Qwen2 has q/k/v biases only (Megatron's --add-qkv-bias); Llama's attention_bias
  // (q/k/v/o) together with mlp_bias is Megatron's biases on every linear layer.
  const bool attention_bias = f.has("attention_bias") && f.boolean("attention_bias");
  const bool mlp_bias = f.has("mlp_bias") && f.boolean("mlp_bias");
  MG_USER_CHECK(attention_bias == mlp_bias, what, ": attention_bias ", attention_bias,
                " with mlp_bias ", mlp_bias,
                " cannot be represented (Megatron has biases on "
                "every linear layer or on none, apart from Qwen2's QKV bias)");
  c.add_bias_linear = attention_bias;
  c.add_qkv_bias = arch == "Qwen2ForCausalLM";
  // The family has attention_dropout (0.0 in the published models) and no hidden
  // dropout, as the upstream Llama recipes pass --attention-dropout 0.0 --hidden-dropout 0.0.
  c.hidden_dropout = 0.f;
  c.attention_dropout = absent_or_null(f, "attention_dropout")
                            ? 0.f
                            : float(f.number("attention_dropout", 0, 0.999999));
  if (arch == "MistralForCausalLM" || arch == "MixtralForCausalLM")
    MG_USER_CHECK(absent_or_null(f, "sliding_window"), f.name("sliding_window"), " is ",
                  config["sliding_window"].dump(),
                  ": sliding-window attention is not supported "
                  "(megatron-cpp attends to the whole context); only null converts");
  if (arch == "Qwen2ForCausalLM" || is_qwen3(arch))
    MG_USER_CHECK(!(f.has("use_sliding_window") && f.boolean("use_sliding_window")),
                  f.name("use_sliding_window"),
                  " is true: sliding-window attention is not "
                  "supported; only false converts");
  if (arch == "MixtralForCausalLM") read_mixtral(f, c);
  if (arch == "Qwen3MoeForCausalLM") read_qwen3_moe(f, c);
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(what + " describes no valid model: " + e.what());
  }
  return c;
}

std::string hf_llama_architecture_for(const GPTConfig& m, const std::string& preferred,
                                      const std::string& what) {
  std::vector<std::string> bad;
  if (m.norm() != NormKind::RMSNorm) bad.push_back("LayerNorm (Llama uses RMSNorm)");
  if (!m.rope() || m.learned_positions()) bad.push_back("no RoPE, or a learned position table");
  if (m.rope() && (m.rotary_percent != 1.f || m.rotary_interleaved))
    bad.push_back("--rotary-percent < 1 or --rotary-interleaved");
  if (!m.swiglu) bad.push_back("a GELU MLP (Llama uses SwiGLU)");
  MG_USER_CHECK(bad.empty(), what, ": the model has ", joined(bad),
                "; no Hugging Face Llama-family architecture represents it");
  if (m.qk_layernorm) return qwen3_architecture_for(m, what);
  if (m.num_experts > 0) return mixtral_architecture_for(m, what);
  // Qwen2 is the one with a QKV bias alone; Mistral has no biases; Llama may have all of them.
  const bool qwen2 = m.add_qkv_bias && !m.add_bias_linear;
  if (preferred == "Qwen2ForCausalLM" && qwen2) return preferred;
  if (preferred == "MistralForCausalLM" && !qwen2 && !m.add_bias_linear) return preferred;
  return qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}

json hf_llama_config_json(const GPTConfig& m, const std::string& arch,
                          const std::string& torch_dtype, const json& original) {
  const GPTConfig c = m.resolved();
  json j = original.is_object() ? original : json::object();
  // A field at transformers' default that the source did not spell out stays out (the round
  // trip gives back the same config.json); every other modelled field is written.
  auto put = [&](const char* key, const json& v, const json& hf_default) {
    if (j.contains(key) || v != hf_default) j[key] = v;
  };
  // A float we hold in single precision keeps the file's spelling when it rounds to ours.
  auto put_float = [&](const char* key, float v, const json& hf_default) {
    if (!(j.contains(key) && j[key].is_number() && float(j[key].get<double>()) == v))
      put(key, v, hf_default);
  };
  const auto fam = std::find_if(std::begin(kFamilies), std::end(kFamilies),
                                [&](const Family& f) { return arch == f.architecture; });
  MG_CHECK(fam != std::end(kFamilies), "not a Llama-family architecture: ", arch);
  j["architectures"] = {arch};
  j["model_type"] = fam->model_type;
  j["hidden_act"] = "silu";
  j["num_hidden_layers"] = c.num_layers;
  j["hidden_size"] = c.hidden_size;
  const bool mixtral = arch == "MixtralForCausalLM", qwen3_moe = arch == "Qwen3MoeForCausalLM";
  // Qwen3-MoE's intermediate_size is its dense layers' width (SwiGLU's default F may be 0 for a
  // tiny model without dense layers: then the experts' width).
  j["intermediate_size"] = mixtral || (qwen3_moe && c.ffn() == 0) ? c.moe_ffn() : c.ffn();
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.query_groups();
  put("head_dim", c.head_dim(), default_head_dim(arch, c));
  put_float("rms_norm_eps", c.norm_epsilon, json());
  put_float("rope_theta", c.rotary_base, json());
  if (c.use_rope_scaling) {
    json r = {{"rope_type", "llama3"},
              {"factor", c.rope_scaling_factor},
              {"low_freq_factor", kLowFreqFactor},
              {"high_freq_factor", kHighFreqFactor},
              {"original_max_position_embeddings", int64_t(kOriginalContext)}};
    const json& was = original.contains("rope_scaling") ? original["rope_scaling"] : json();
    if (was.is_object() && was.contains("factor") && was["factor"].is_number() &&
        float(was["factor"].get<double>()) == c.rope_scaling_factor)
      r["factor"] = was["factor"];
    j["rope_scaling"] = r;
  } else {
    put("rope_scaling", nullptr, nullptr);
  }
  j["tie_word_embeddings"] = c.tied_output();
  j["max_position_embeddings"] = c.max_positions();
  j["vocab_size"] = c.vocab_size;
  put_float("initializer_range", c.init_method_std, 0.02f);
  j["torch_dtype"] = torch_dtype;
  if (arch == "LlamaForCausalLM") {
    put("attention_bias", c.add_bias_linear, false);
    put("mlp_bias", c.add_bias_linear, false);
  }
  // Mistral defaults to a 4096-token window: null, attention over the whole context, is said.
  if (arch == "MistralForCausalLM" || mixtral) j["sliding_window"] = nullptr;
  if (mixtral) {
    j["num_local_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.moe_router_topk;
  }
  if (arch == "Qwen2ForCausalLM" || is_qwen3(arch)) put("use_sliding_window", false, false);
  if (is_qwen3(arch)) put("attention_bias", false, false);
  if (qwen3_moe) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.moe_router_topk;
    j["moe_intermediate_size"] = c.moe_ffn();
    j["norm_topk_prob"] = !c.moe_router_pre_softmax;  // written: transformers' default is false
    put_qwen3_moe_layers(j, c);
  }
  return j;
}

}  // namespace mg
