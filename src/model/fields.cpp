#include "model/fields.h"

#include <sstream>

#include "core/error.h"
#include "core/parse_number.h"

namespace mg {

const std::vector<ModelField>& model_fields() {
  using C = GPTConfig;
  static const std::vector<ModelField> fields = {
      {"--num-layers", "num_layers", "L", "transformer layers", &C::num_layers},
      {"--hidden-size", "hidden_size", "H", "hidden size", &C::hidden_size},
      {"--num-attention-heads", "num_attention_heads", "NH", "query heads",
       &C::num_attention_heads},
      {"--ffn-hidden-size", "ffn_hidden_size", "F",
       "MLP width (SwiGLU: the width of each of gate and up; 0: 4 x hidden size)",
       &C::ffn_hidden_size},
      {"--kv-channels", "kv_channels", "HD", "channels per head (0: hidden size / heads)",
       &C::kv_channels},
      {"--group-query-attention", "group_query_attention", "",
       "grouped-query attention: --num-query-groups K/V heads, each shared by a group of query "
       "heads",
       &C::group_query_attention},
      {"--num-query-groups", "num_query_groups", "NG",
       "query groups (K/V heads) with --group-query-attention", &C::num_query_groups},
      {"--normalization", "normalization", "NAME", "LayerNorm | RMSNorm", &C::normalization},
      {"--norm-epsilon", "norm_epsilon", "X", "LayerNorm / RMSNorm epsilon", &C::norm_epsilon,
       false},
      {"--swiglu", "swiglu", "", "SwiGLU MLP: silu(x W_gate) * (x W_up), fc1 stacks [gate; up]",
       &C::swiglu},
      {"--disable-bias-linear", "add_bias_linear", "", "no biases on the linear layers",
       &C::add_bias_linear, true, true},
      {"--add-qkv-bias", "add_qkv_bias", "", "a QKV bias even with --disable-bias-linear",
       &C::add_qkv_bias},
      {"--untie-embeddings-and-output-weights", "untie_embeddings_and_output_weights", "",
       "an output layer of its own instead of the word embedding",
       &C::untie_embeddings_and_output_weights},
      {"--qk-layernorm", "qk_layernorm", "",
       "normalize each query and key head (--normalization) before RoPE", &C::qk_layernorm},
      {"--apply-layernorm-1p", "apply_layernorm_1p", "",
       "zero-centred norm weights: every LayerNorm / RMSNorm scales by 1 + w, w initialised to 0",
       &C::apply_layernorm_1p},
      {"--position-embedding-type", "position_embedding_type", "NAME",
       "learned_absolute | rope | none", &C::position_embedding_type},
      {"--rotary-base", "rotary_base", "X", "RoPE base (Llama 2: 10000, Llama 3: 500000)",
       &C::rotary_base},
      {"--rotary-percent", "rotary_percent", "X", "fraction of each head's channels RoPE rotates",
       &C::rotary_percent},
      {"--rotary-interleaved", "rotary_interleaved", "",
       "RoPE on channel pairs (2j, 2j+1) instead of (j, j + dim/2)", &C::rotary_interleaved},
      {"--use-rope-scaling", "use_rope_scaling", "", "Llama 3.1's RoPE frequency scaling",
       &C::use_rope_scaling},
      {"--rope-scaling-factor", "rope_scaling_factor", "X", "the factor of --use-rope-scaling",
       &C::rope_scaling_factor},
      {"--seq-length", "seq_length", "S", "tokens per sample", &C::seq_length, false},
      {"--max-position-embeddings", "max_position_embeddings", "P",
       "rows of the learned position table (0: --seq-length)", &C::max_position_embeddings},
      {"--vocab-size", "vocab_size", "V",
       "vocabulary size before padding (NullTokenizer / --mock-data; a tokenizer sets it)",
       &C::vocab_size, false},
      {"--make-vocab-size-divisible-by", "make_vocab_size_divisible_by", "K",
       "pad the vocabulary to a multiple of K x TP", &C::make_vocab_size_divisible_by, false},
      {"--num-experts", "num_experts", "E",
       "experts in each mixture-of-experts layer (0: dense MLPs; docs/moe.md)", &C::num_experts},
      {"--moe-layer-freq", "moe_layer_freq", "K|LIST",
       "which layers are MoE: every K-th, or a 0/1 list per layer (\"([1]*3+[0]*1)*2\")",
       &C::moe_layer_freq},
      {"--moe-ffn-hidden-size", "moe_ffn_hidden_size", "N",
       "each expert's MLP width (0: --ffn-hidden-size)", &C::moe_ffn_hidden_size},
      {"--moe-shared-expert-intermediate-size", "moe_shared_expert_intermediate_size", "N",
       "width of the shared experts every token passes through (0: none)",
       &C::moe_shared_expert_intermediate_size},
      {"--moe-router-topk", "moe_router_topk", "K", "experts each token is routed to",
       &C::moe_router_topk},
      {"--moe-router-score-function", "moe_router_score_function", "NAME",
       "softmax | sigmoid: the router's scores", &C::moe_router_score_function},
      {"--moe-router-pre-softmax", "moe_router_pre_softmax", "",
       "softmax over all experts before the top-k (else over the top-k logits)",
       &C::moe_router_pre_softmax},
      {"--moe-router-num-groups", "moe_router_num_groups", "N",
       "group-limited routing: the experts in N groups, each token choosing among the experts "
       "of its --moe-router-group-topk best groups (0: none)",
       &C::moe_router_num_groups, false},
      {"--moe-router-group-topk", "moe_router_group_topk", "K",
       "group-limited routing: the groups each token chooses its experts from (0: none)",
       &C::moe_router_group_topk, false},
      {"--moe-router-topk-scaling-factor", "moe_router_topk_scaling_factor", "X",
       "multiplies the chosen experts' weights (0: none)", &C::moe_router_topk_scaling_factor},
      {"--moe-router-load-balancing-type", "moe_router_load_balancing_type", "NAME",
       "aux_loss (switch load balancing) | seq_aux_loss (per sequence) | none",
       &C::moe_router_load_balancing_type, false},
      {"--moe-router-dtype", "moe_router_dtype", "NAME",
       "the router's compute type: fp32 (the only one here)", &C::moe_router_dtype, false},
      {"--moe-aux-loss-coeff", "moe_aux_loss_coeff", "X", "load-balancing loss coefficient",
       &C::moe_aux_loss_coeff, false},
      {"--moe-z-loss-coeff", "moe_z_loss_coeff", "X", "router z-loss coefficient",
       &C::moe_z_loss_coeff, false},
      {"--moe-expert-capacity-factor", "moe_expert_capacity_factor", "X",
       "each expert takes at most ceil(tokens x topk / experts x X) tokens, dropping the "
       "lowest-weight ones (0: no dropping)",
       &C::moe_expert_capacity_factor, false},
      {"--moe-token-drop-policy", "moe_token_drop_policy", "NAME",
       "which assignments beyond the capacity are dropped: probs (lowest weights) | position "
       "(the last tokens)",
       &C::moe_token_drop_policy, false},
      {"--moe-pad-expert-input-to-capacity", "moe_pad_expert_input_to_capacity", "",
       "accepted with a capacity factor; no effect: the experts take their rows unpadded, "
       "with the same results",
       &C::moe_pad_expert_input_to_capacity, false},
      {"--moe-grouped-gemm", "moe_grouped_gemm", "",
       "run each GEMM of a rank's experts as one grouped op over all of them (variable rows "
       "per expert, no padding) instead of one call per expert; the same results",
       &C::moe_grouped_gemm, false},
      {"--hidden-dropout", "hidden_dropout", "P",
       "dropout rate of the embedding output and of each attention and MLP block's output "
       "(training only)",
       &C::hidden_dropout, false},
      {"--attention-dropout", "attention_dropout", "P",
       "dropout rate of the attention probabilities (training only)", &C::attention_dropout, false},
      {"--init-method-std", "init_method_std", "X", "std of the N(0, std) weight init",
       &C::init_method_std, false},
  };
  return fields;
}

std::string field_text(const GPTConfig& c, const ModelField& f) {
  return std::visit(
      [&](auto m) -> std::string {
        const auto& v = c.*m;
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else {
          std::ostringstream os;
          os << v;
          return os.str();
        }
      },
      f.member);
}

void set_field(GPTConfig& c, const ModelField& f, const std::string& text) {
  std::visit(
      [&](auto m) {
        auto& v = c.*m;
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          v = text;
        } else if constexpr (std::is_same_v<T, bool>) {
          MG_USER_CHECK(text == "true" || text == "false", f.key, ": expected true or false, got '",
                        text, "'");
          v = text == "true";
        } else {
          v = parse_number<T>(f.flag, text);
        }
      },
      f.member);
}

}  // namespace mg
