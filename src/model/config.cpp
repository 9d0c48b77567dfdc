#include "model/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "model/param_layout.h"
#include "parallel/parallel_config.h"

namespace mg {

namespace {
// --moe-layer-freq as a list of 0/1 per layer: an integer k (every k-th layer, from layer 0) or
// a Python list expression of Megatron's scripts: "[1,0,1]", "([1]*3+[0]*1)*2", "[0]+[1]*23".
class LayerFreqParser {
 public:
  explicit LayerFreqParser(const std::string& text) : t_(text) {}
  // The integer form's k (> 0), or 0 for a list.
  int64_t every() const {
    if (t_.empty() || !std::all_of(t_.begin(), t_.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        }))
      return 0;
    expect(t_.size() < 10, "the integer is too large");
    const int64_t k = std::stoll(t_);
    MG_USER_CHECK(k >= 1, "--moe-layer-freq ", t_, " must be >= 1");
    return k;
  }
  // The list form, one 0/1 per layer (every() == 0).
  std::vector<int64_t> parse(int64_t layers) {
    std::vector<int64_t> v = sum();
    skip();
    expect(i_ == t_.size(), "unexpected '" + t_.substr(i_) + "'");
    expect(int64_t(v.size()) == layers, "it lists " + std::to_string(v.size()) +
                                            " layers; --num-layers is " + std::to_string(layers));
    return v;
  }

 private:
  void expect(bool ok, const std::string& why) const {
    MG_USER_CHECK(ok, "--moe-layer-freq '", t_, "': ", why,
                  " (give an integer k, every k-th layer, or a 0/1 list per layer such as "
                  "\"([1]*3+[0]*1)*2\")");
  }
  void skip() {
    while (i_ < t_.size() && t_[i_] == ' ') ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < t_.size() && t_[i_] == c) return ++i_, true;
    return false;
  }
  int64_t number() {
    skip();
    const size_t b = i_;
    while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
    expect(i_ > b && i_ - b < 10, "expected a number at '" + t_.substr(b) + "'");
    return std::stoll(t_.substr(b, i_ - b));
  }
  std::vector<int64_t> atom() {
    std::vector<int64_t> v;
    if (eat('(')) {
      v = sum();
      expect(eat(')'), "missing ')'");
    } else {
      expect(eat('['), "expected '[' or '('");
      if (!eat(']')) {
        do {
          const int64_t x = number();
          expect(x == 0 || x == 1, "list entries must be 0 or 1");
          v.push_back(x);
        } while (eat(','));
        expect(eat(']'), "missing ']'");
      }
    }
    while (eat('*')) {
      const int64_t n = number();
      expect(int64_t(v.size()) * n <= (int64_t(1) << 24), "the list is too long");
      std::vector<int64_t> r;
      for (int64_t k = 0; k < n; ++k) r.insert(r.end(), v.begin(), v.end());
      v = std::move(r);
    }
    return v;
  }
  std::vector<int64_t> sum() {
    std::vector<int64_t> v = atom();
    while (eat('+')) {
      const std::vector<int64_t> more = atom();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }
  const std::string& t_;
  size_t i_ = 0;
};
}  // namespace

bool GPTConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0) return false;
  LayerFreqParser p(moe_layer_freq);
  if (const int64_t k = p.every()) return layer % k == 0;
  return p.parse(num_layers)[size_t(layer)] != 0;
}

GPTConfig::LayerKinds GPTConfig::layer_kinds(int64_t begin, int64_t end) const {
  LayerKinds k;
  if (begin >= end) return k;
  if (num_experts <= 0) {
    k.first_dense = begin;
    return k;
  }
  LayerFreqParser p(moe_layer_freq);
  if (const int64_t every = p.every()) {  // MoE: i % every == 0
    auto multiples_below = [&](int64_t x) { return (x + every - 1) / every; };
    k.moe = multiples_below(end) - multiples_below(begin);
    const int64_t m = multiples_below(begin) * every;
    if (m < end) k.first_moe = m;
    if (every > 1) k.first_dense = begin % every != 0 ? begin : (begin + 1 < end ? begin + 1 : -1);
    return k;
  }
  const std::vector<int64_t> list = p.parse(num_layers);  // as long as typed
  for (int64_t l = begin; l < end; ++l) {
    const bool moe = list[size_t(l)] != 0;
    k.moe += moe ? 1 : 0;
    int64_t& first = moe ? k.first_moe : k.first_dense;
    if (first < 0) first = l;
  }
  return k;
}

int64_t GPTConfig::rotary_dim() const {
  return int64_t(double(head_dim()) * double(rotary_percent));
}

// Megatron's RotaryEmbedding: inv_freq[j] = 1 / base^(2j/dim); with --use-rope-scaling, Llama
// 3.1's rule (docs/reference/llama-moe-cp.md section 2): low frequencies (long wavelengths)
// divided by the factor, high ones kept, a smooth blend between.
std::vector<float> GPTConfig::rope_inv_freq() const {
  const int64_t dim = rotary_dim();
  std::vector<float> f(size_t(dim / 2));
  for (int64_t j = 0; j < dim / 2; ++j) {
    const float exponent = float(2 * j) / float(dim);
    f[size_t(j)] = 1.0f / std::pow(rotary_base, exponent);
  }
  if (!use_rope_scaling) return f;
  const double low = 1.0, high = 4.0, original = 8192.0, factor = rope_scaling_factor;
  const double low_wavelen = original / low, high_wavelen = original / high;
  for (float& x : f) {
    const double wavelen = 2 * M_PI / x;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      x = float(x / factor);
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      x = float((1 - smooth) * x / factor + smooth * x);
    }
  }
  return f;
}

std::vector<std::string> GPTConfig::non_gpt2_features() const {
  std::vector<std::string> f;
  if (norm() != NormKind::LayerNorm) f.push_back(normalization);
  if (!learned_positions())
    f.push_back("position embedding " + (rope() ? std::string("rope") : "none"));
  if (swiglu) f.push_back("SwiGLU");
  if (!add_bias_linear) f.push_back("no linear biases");
  if (!tied_output()) f.push_back("untied output layer");
  if (query_groups() != num_attention_heads) f.push_back("grouped-query attention");
  if (head_dim() * num_attention_heads != hidden_size) f.push_back("--kv-channels");
  if (qk_layernorm) f.push_back("--qk-layernorm");
  if (num_experts > 0) f.push_back("mixture of experts");
  return f;
}

GPTConfig GPTConfig::resolved() const {
  GPTConfig c = *this;
  const GPTConfig defaults;
  c.ffn_hidden_size = ffn();
  c.kv_channels = head_dim();
  c.num_query_groups = query_groups();
  c.group_query_attention = query_groups() != num_attention_heads;
  c.add_qkv_bias = add_bias_linear || add_qkv_bias;
  if (!learned_positions() && position_embedding_type == "learned_absolute")
    c.position_embedding_type = "none";
  c.no_position_embedding = false;
  c.max_position_embeddings = learned_positions() ? max_positions() : 0;
  if (!rope()) {
    c.rotary_base = defaults.rotary_base;
    c.rotary_percent = defaults.rotary_percent;
    c.rotary_interleaved = defaults.rotary_interleaved;
    c.use_rope_scaling = defaults.use_rope_scaling;
  }
  if (!c.use_rope_scaling) c.rope_scaling_factor = defaults.rope_scaling_factor;
  if (num_experts > 0) {
    c.moe_ffn_hidden_size = moe_ffn();
  } else {  // a dense model: the MoE settings do not matter
    c.num_experts = 0;
    c.moe_layer_freq = defaults.moe_layer_freq;
    c.moe_ffn_hidden_size = defaults.moe_ffn_hidden_size;
    c.moe_shared_expert_intermediate_size = defaults.moe_shared_expert_intermediate_size;
    c.moe_router_topk = defaults.moe_router_topk;
    c.moe_router_score_function = defaults.moe_router_score_function;
    c.moe_router_pre_softmax = defaults.moe_router_pre_softmax;
    c.moe_router_topk_scaling_factor = defaults.moe_router_topk_scaling_factor;
  }
  return c;
}

LayerSpec GPTConfig::layer_spec(int64_t layer) const {
  LayerSpec s;
  s.norm = norm();
  s.heads = num_attention_heads;
  s.query_groups = query_groups();
  s.kv_channels = head_dim();
  s.rope = rope();
  s.qkv_bias = add_bias_linear || add_qkv_bias;
  s.qk_layernorm = qk_layernorm;
  s.norm_weight_offset = norm_weight_offset();
  s.mlp = swiglu ? MlpKind::SwiGLU : MlpKind::Gelu;
  s.ffn = ffn();
  s.linear_bias = add_bias_linear;
  if (is_moe_layer(layer)) {
    s.ffn = moe_shared_expert_intermediate_size;
    s.moe.num_experts = num_experts;
    s.moe.ffn = moe_ffn();
    s.moe.capacity_factor = moe_expert_capacity_factor;
    s.moe.drop_by_position = moe_token_drop_policy == "position";
    s.moe.grouped_gemm = moe_grouped_gemm;
    MoeRouterConfig& r = s.moe.router;
    r.num_experts = num_experts;
    r.topk = moe_router_topk;
    r.score = moe_router_score_function == "sigmoid" ? RouterScore::Sigmoid : RouterScore::Softmax;
    r.pre_softmax = moe_router_pre_softmax;
    r.num_groups = moe_router_num_groups;
    r.group_topk = moe_router_group_topk;
    r.topk_scaling_factor =
        moe_router_topk_scaling_factor > 0.f ? moe_router_topk_scaling_factor : 1.0;
    r.per_sequence = moe_router_load_balancing_type == "seq_aux_loss";
    r.aux_loss_coeff = moe_router_load_balancing_type == "none" ? 0.0 : moe_aux_loss_coeff;
    r.z_loss_coeff = moe_z_loss_coeff;
  }
  return s;
}

ModelDims GPTConfig::layout_dims(int64_t tp_size) const {
  ModelDims d;
  d.num_layers = num_layers;
  d.num_attention_heads = num_attention_heads;
  d.num_query_groups = query_groups();
  d.ffn_hidden_size = ffn();
  d.padded_vocab_size = padded_vocab_size(tp_size);
  d.seq_length = seq_length;
  return d;
}

int64_t GPTConfig::num_parameters() const { return shard_param_count(*this).elements; }

// The convention the benchmarks report (full attention, as in issue 7 / docs/reference/formulas.md):
// 6 FLOPs per parameter per token (2 forward, 4 backward) plus 12 * L * NH * HD * S for the
// attention core (Q K^T and P V, forward and backward, without halving for the causal mask).
double GPTConfig::train_flops_per_token() const {
  double lookup = tied_output() ? 0.0 : double(padded_vocab_size() * hidden_size);
  // A MoE layer runs top-k of its experts per token: the other E - k experts' parameters do
  // no work for it (the router's E x H GEMM does).
  const LayerKinds kinds = layer_kinds(0, num_layers);
  if (kinds.moe > 0) {
    const LayerSpec s = layer_spec(kinds.first_moe);
    const double bias = add_bias_linear ? double(s.expert_fc1_rows() + hidden_size) : 0.0;
    const double expert =
        double(s.expert_fc1_rows() * hidden_size + hidden_size * s.moe.ffn) + bias;
    lookup += double(kinds.moe) * double(num_experts - moe_router_topk) * expert;
  }
  return 6.0 * (double(num_parameters()) - lookup) +
         12.0 * double(num_layers) * double(num_attention_heads * head_dim()) * double(seq_length);
}

void GPTConfig::validate_moe() const {
  // Checked even for a dense model: a typo should not wait for the day MoE is on.
  MG_USER_CHECK(num_experts >= 0 && num_experts <= (int64_t(1) << 20),
                "--num-experts must be in [0, 1048576] (got ", num_experts, ")");
  MG_USER_CHECK(moe_ffn_hidden_size >= 0 && moe_shared_expert_intermediate_size >= 0,
                "--moe-ffn-hidden-size and --moe-shared-expert-intermediate-size must be >= 0");
  MG_USER_CHECK(moe_router_score_function == "softmax" || moe_router_score_function == "sigmoid",
                "--moe-router-score-function '", moe_router_score_function,
                "' is not known; use softmax or sigmoid");
  MG_USER_CHECK(moe_router_load_balancing_type == "aux_loss" ||
                    moe_router_load_balancing_type == "seq_aux_loss" ||
                    moe_router_load_balancing_type == "none",
                "--moe-router-load-balancing-type '", moe_router_load_balancing_type,
                "' is not supported; use aux_loss, seq_aux_loss or none (global_aux_loss and "
                "sinkhorn are not implemented yet)");
  MG_USER_CHECK(moe_router_dtype == "fp32", "--moe-router-dtype '", moe_router_dtype,
                "' is not supported: the router computes in fp32 (use fp32)");
  MG_USER_CHECK(moe_router_topk_scaling_factor >= 0.f,
                "--moe-router-topk-scaling-factor must be >= 0 (0: none; got ",
                moe_router_topk_scaling_factor, ")");
  MG_USER_CHECK(moe_expert_capacity_factor >= 0.f,
                "--moe-expert-capacity-factor must be >= 0 (0: no dropping; got ",
                moe_expert_capacity_factor, ")");
  MG_USER_CHECK(moe_token_drop_policy == "probs" || moe_token_drop_policy == "position",
                "--moe-token-drop-policy '", moe_token_drop_policy,
                "' is not known; use probs or position");
  MG_USER_CHECK(!moe_pad_expert_input_to_capacity || moe_expert_capacity_factor > 0,
                "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (as "
                "Megatron-LM requires)");
  LayerFreqParser freq(moe_layer_freq);
  if (freq.every() == 0) freq.parse(num_layers);
  if (num_experts == 0) return;
  // Every MoE layer has the same router.
  const LayerKinds k = layer_kinds(0, num_layers);
  if (k.moe > 0) layer_spec(k.first_moe).moe.router.validate();
}

void GPTConfig::validate() const {
  MG_USER_CHECK(num_layers > 0, "--num-layers must be positive (got ", num_layers, ")");
  MG_USER_CHECK(hidden_size > 0, "--hidden-size must be positive (got ", hidden_size, ")");
  MG_USER_CHECK(num_attention_heads > 0, "--num-attention-heads must be positive (got ",
                num_attention_heads, ")");
  MG_USER_CHECK(kv_channels >= 0, "--kv-channels must be positive (got ", kv_channels, ")");
  MG_USER_CHECK(kv_channels > 0 || hidden_size % num_attention_heads == 0, "--num-attention-heads ",
                num_attention_heads, " must divide --hidden-size ", hidden_size,
                " (or give the head size with --kv-channels)");
  MG_USER_CHECK(num_query_groups > 0, "--num-query-groups must be positive (got ", num_query_groups,
                ")");
  if (group_query_attention)
    MG_USER_CHECK(num_attention_heads % num_query_groups == 0, "--num-query-groups ",
                  num_query_groups, " must divide --num-attention-heads ", num_attention_heads);
  MG_USER_CHECK(normalization == "LayerNorm" || normalization == "RMSNorm", "--normalization '",
                normalization, "' is not known; use LayerNorm or RMSNorm");
  MG_USER_CHECK(position_embedding_type == "learned_absolute" ||
                    position_embedding_type == "rope" || position_embedding_type == "none",
                "--position-embedding-type '", position_embedding_type,
                "' is not known; use learned_absolute, rope or none");
  MG_USER_CHECK(hidden_dropout >= 0.f && hidden_dropout < 1.f,
                "--hidden-dropout must be in [0, 1) (got ", hidden_dropout, ")");
  MG_USER_CHECK(attention_dropout >= 0.f && attention_dropout < 1.f,
                "--attention-dropout must be in [0, 1) (got ", attention_dropout, ")");
  // RoPE's values are checked even when RoPE is off: a typo should not wait for the day it is on.
  MG_USER_CHECK(rotary_percent > 0.f && rotary_percent <= 1.f,
                "--rotary-percent must be in (0, 1] (got ", rotary_percent, ")");
  MG_USER_CHECK(rotary_base > 0.f, "--rotary-base must be positive (got ", rotary_base, ")");
  MG_USER_CHECK(rope_scaling_factor > 0.f, "--rope-scaling-factor must be positive (got ",
                rope_scaling_factor, ")");
  if (rope())
    MG_USER_CHECK(rotary_dim() >= 2 && rotary_dim() % 2 == 0, "--rotary-percent ", rotary_percent,
                  " of ", head_dim(), " head channels gives ", rotary_dim(),
                  " rotated channels; it must be a positive even number");
  MG_USER_CHECK(ffn_hidden_size >= 0, "--ffn-hidden-size must be positive (got ", ffn_hidden_size,
                ")");
  bool dense_mlp = num_experts == 0;  // a layer with the dense MLP (MoE layers size their own)
  if (!dense_mlp && num_layers > 0 && num_layers <= 4096)
    for (int64_t l = 0; l < num_layers && !dense_mlp; ++l) dense_mlp = !is_moe_layer(l);
  MG_USER_CHECK(!dense_mlp || ffn() > 0,
                "--swiglu's default --ffn-hidden-size, int(8 x "
                "--hidden-size / 3 / 64) x 64 (Megatron's), is 0 for --hidden-size ",
                hidden_size, ": pass --ffn-hidden-size");
  MG_USER_CHECK(seq_length > 0, "--seq-length must be positive (got ", seq_length, ")");
  MG_USER_CHECK(max_position_embeddings >= 0, "--max-position-embeddings must be positive (got ",
                max_position_embeddings, ")");
  MG_USER_CHECK(!learned_positions() || max_positions() >= seq_length, "--max-position-embeddings ",
                max_positions(), " must be >= --seq-length ", seq_length);
  // Token ids are int32 in batches and datasets (Megatron's .bin files too).
  MG_USER_CHECK(vocab_size > 0 && vocab_size <= INT32_MAX,
                "--vocab-size must be in [1, 2147483647] (token ids are int32; got ", vocab_size,
                ")");
  MG_USER_CHECK(make_vocab_size_divisible_by > 0,
                "--make-vocab-size-divisible-by must be positive (got ",
                make_vocab_size_divisible_by, ")");
  MG_USER_CHECK(init_method_std > 0.f, "--init-method-std must be positive (got ", init_method_std,
                ")");
  MG_USER_CHECK(norm_epsilon > 0.f, "--norm-epsilon must be positive (got ", norm_epsilon, ")");
  validate_moe();
  // Every derived size and the parameter count in checked arithmetic: an overflow is refused
  // here, naming the flags, before anything is sized from them.
  num_parameters();
}

}  // namespace mg
