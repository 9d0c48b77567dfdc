// The model description: one config from which every block's parameters, saved activations,
// the CLI flags, the checkpoint metadata, the parameter count and the FLOPs per token are
// derived (model/fields.cpp lists the fields once). GPT-2 and Llama are presets of it:
//   GPT-2: LayerNorm, learned absolute positions, 4H GELU MLP, biases, tied output layer.
//   Llama: RMSNorm, RoPE, SwiGLU, grouped-query attention, no biases, untied output layer.
// Notation: H hidden, NH query heads, NG query groups, HD = kv channels, F MLP width.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "layers/layer_spec.h"

namespace mg {

struct ModelDims;

struct GPTConfig {
  int64_t num_layers = 12;              // L: transformer layers
  int64_t hidden_size = 768;            // H
  int64_t num_attention_heads = 12;     // NH
  int64_t ffn_hidden_size = 0;          // F; 0: Megatron's default, 4H, or with SwiGLU
                                        // int(8H/3 / 64) * 64 (the same parameters as 4H GELU)
  int64_t seq_length = 1024;            // S: tokens per sample
  int64_t max_position_embeddings = 0;  // rows of the position table; 0 means seq_length
  int64_t vocab_size = 50257;           // V before padding
  int64_t make_vocab_size_divisible_by = 128;  // pad V up to a multiple of this (x TP)
  float init_method_std = 0.02f;            // N(0, std) init; output projections use std/sqrt(2L)
  float norm_epsilon = 1e-5f;               // LayerNorm / RMSNorm epsilon
  int64_t vocab_pad_tp = 1;                 // TP size the vocab is padded for (Megatron pads to
                                            // a multiple of make_vocab_size_divisible_by x TP)
  std::string normalization = "LayerNorm";  // LayerNorm | RMSNorm
  std::string position_embedding_type = "learned_absolute";  // learned_absolute | rope | none
  bool no_position_embedding = false;  // Megatron's --no-position-embedding: no learned table
                                       // (RoPE, when chosen, stays on)
  float rotary_base = 10000.f;         // RoPE: inv_freq[j] = base^(-2j/dim)
  float rotary_percent = 1.f;          // RoPE: fraction of each head's channels rotated
  bool rotary_interleaved = false;     // RoPE: pair channels (2j, 2j+1), not (j, j + dim/2)
  bool use_rope_scaling = false;       // Llama 3.1's frequency scaling of RoPE
  float rope_scaling_factor = 8.f;     // its factor; the low/high-frequency factors and the
                                       // original context are Llama 3.1's (1, 4, 8192)
  bool group_query_attention = false;  // GQA: num_query_groups K/V heads shared by the heads
  int64_t num_query_groups = 1;        // NG with group_query_attention (else NG = NH)
  int64_t kv_channels = 0;             // HD; 0 means H / NH
  bool swiglu = false;                 // SwiGLU MLP (fc1 stacks [gate; up]) instead of GELU
  bool add_bias_linear = true;         // biases on every linear layer (--disable-bias-linear)
  bool add_qkv_bias = false;           // a QKV bias even without the others (Qwen2)
  bool untie_embeddings_and_output_weights = false;  // an output layer of its own
  bool qk_layernorm = false;                         // normalize each Q and K head before RoPE
  bool apply_layernorm_1p = false;  // norm weights stored zero-centred: each norm scales by
                                    // 1 + w, w initialised to 0 (Megatron-Core's
                                    // layernorm_zero_centered_gamma)
  // Mixture of experts (Megatron-Core's MoE; docs/moe.md). 0 experts: every MLP is dense.
  int64_t num_experts = 0;                          // E experts in each MoE layer
  std::string moe_layer_freq = "1";                 // which layers are MoE: every k-th ("k", layer
                                                    // i when i % k == 0) or a 0/1 list per layer,
                                                    // "[1,0,1,0]" or Python's "([1]*3+[0]*1)*2"
  int64_t moe_ffn_hidden_size = 0;                  // each expert's width; 0: --ffn-hidden-size
  int64_t moe_shared_expert_intermediate_size = 0;  // shared experts' width; 0: none
  int64_t moe_router_topk = 2;                      // experts per token
  std::string moe_router_score_function = "softmax";  // softmax | sigmoid
  bool moe_router_pre_softmax = false;                // softmax over all E before the top-k
  int64_t moe_router_num_groups = 0;           // group-limited routing: expert groups (0: none)
  int64_t moe_router_group_topk = 0;           // group-limited routing: groups per token
  float moe_router_topk_scaling_factor = 0.f;  // scales the chosen weights; 0: none (1)
  std::string moe_router_load_balancing_type = "aux_loss";  // aux_loss | seq_aux_loss | none
  std::string moe_router_dtype = "fp32";          // the router's logits, softmax and losses: fp32
  float moe_aux_loss_coeff = 0.f;                 // switch load-balancing loss coefficient
  float moe_z_loss_coeff = 0.f;                   // router z-loss coefficient
  float moe_expert_capacity_factor = 0.f;         // > 0: token dropping above the capacity; 0: none
  std::string moe_token_drop_policy = "probs";    // probs | position: which tokens are dropped
  bool moe_pad_expert_input_to_capacity = false;  // Megatron pads each expert's rows to the
                                                  // capacity; the experts here take their rows
                                                  // unpadded (the same results): checked, no effect
  bool moe_grouped_gemm = false;  // each GEMM of the local experts as one grouped op over all
                                  // of them (grouped_linear_*), not one call per expert
  // Dropout while training (Megatron's defaults; no dropout in evaluation or generation):
  float hidden_dropout = 0.1f;     // embedding output and after the attention and MLP blocks
  float attention_dropout = 0.1f;  // attention probabilities

  int64_t ffn() const {
    if (ffn_hidden_size > 0) return ffn_hidden_size;
    const int64_t f4 =
        checked_mul(4, hidden_size, "the default --ffn-hidden-size (4 x --hidden-size)");
    return swiglu ? int64_t(double(f4) * 2.0 / 3.0 / 64.0) * 64 : f4;
  }
  int64_t max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  int64_t head_dim() const {
    return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads;
  }
  int64_t query_groups() const {
    return group_query_attention ? num_query_groups : num_attention_heads;
  }
  bool learned_positions() const {
    return position_embedding_type == "learned_absolute" && !no_position_embedding;
  }
  bool rope() const { return position_embedding_type == "rope"; }
  bool tied_output() const { return !untie_embeddings_and_output_weights; }
  NormKind norm() const {
    return normalization == "RMSNorm" ? NormKind::RMSNorm : NormKind::LayerNorm;
  }
  bool norm_bias() const { return norm() == NormKind::LayerNorm; }
  // What the norms add to their stored weights to get the gamma they scale by.
  float norm_weight_offset() const { return apply_layernorm_1p ? 1.f : 0.f; }
  // Channels of each head that RoPE rotates (even).
  int64_t rotary_dim() const;
  // RoPE's inverse frequencies (rotary_dim()/2 of them), scaled for Llama 3.1 when asked.
  std::vector<float> rope_inv_freq() const;
  LayerSpec layer_spec(int64_t layer) const;
  // Whether layer (0-based) is a MoE layer (--num-experts > 0 and --moe-layer-freq).
  bool is_moe_layer(int64_t layer) const;
  // The layers [begin, end) by kind, without visiting each (a --num-layers of 10^12 is checked
  // before it is refused): how many are MoE, and the first MoE and first dense one (-1: none).
  struct LayerKinds {
    int64_t moe = 0, first_moe = -1, first_dense = -1;
  };
  LayerKinds layer_kinds(int64_t begin, int64_t end) const;
  int64_t moe_ffn() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn(); }
  // What sets this model apart from GPT-2's architecture (LayerNorm, learned positions, GELU,
  // biases, MHA with H / NH channels per head, tied output), e.g. {"RMSNorm", "SwiGLU"}; empty
  // for a GPT-2 (what the Hugging Face GPT-2 conversion can write).
  std::vector<std::string> non_gpt2_features() const;
  // The same model with every derived or inactive field in one canonical form (F, HD, query
  // groups and the position table resolved; RoPE settings reset when RoPE is off; the QKV bias
  // flag as used): two configs describe the same model exactly when their resolved forms agree.
  GPTConfig resolved() const;
  // Megatron's padding: the smallest multiple of make_vocab_size_divisible_by (x TP) >= V.
  int64_t padded_vocab_size(int64_t tp_size = 0) const {
    const char* what =
        "the padded vocabulary (--vocab-size rounded up to a multiple of "
        "--make-vocab-size-divisible-by x --tensor-model-parallel-size)";
    const int64_t m =
        checked_mul(make_vocab_size_divisible_by, tp_size > 0 ? tp_size : vocab_pad_tp, what);
    return checked_mul(ceil_div(vocab_size, m), m, what);
  }
  // The sizes a parallel layout of tp_size TP ranks is checked against
  // (ParallelConfig::validate; parallel/parallel_config.h).
  ModelDims layout_dims(int64_t tp_size) const;
  // Parameter count, exactly: the sum over the single-rank parameter layout (counted in checked
  // arithmetic without building it: model/param_layout.h's shard_param_count).
  int64_t num_parameters() const;
  // Model FLOPs per token for training: 6 * (params - the input embedding of an untied model,
  // which is a lookup, not a GEMM, - the E - topk experts a token skips in each MoE layer)
  // + 12 * L * NH * HD * S (full-attention convention).
  double train_flops_per_token() const;

  // Throws UsageError naming the flag when values are inconsistent.
  void validate() const;
  void validate_moe() const;
};

using ModelConfig = GPTConfig;

}  // namespace mg
