// GPT model configuration (GPT-2 architecture: learned absolute positions, pre-LayerNorm
// blocks, 4h GELU MLP with biases, final LayerNorm, output layer tied to the word embedding).
#pragma once
#include <cstdint>

namespace mg {

struct GPTConfig {
  int64_t num_layers = 12;               // L: transformer layers
  int64_t hidden_size = 768;             // H
  int64_t num_attention_heads = 12;      // NH; head dim HD = H / NH
  int64_t ffn_hidden_size = 0;           // MLP width; 0 means 4*H
  int64_t seq_length = 1024;             // S: tokens per sample
  int64_t max_position_embeddings = 0;   // rows of the position table; 0 means seq_length
  int64_t vocab_size = 50257;            // V before padding
  int64_t make_vocab_size_divisible_by = 128;  // pad V up to a multiple of this (x TP)
  float init_method_std = 0.02f;         // N(0, std) init; output projections use std/sqrt(2L)
  float norm_epsilon = 1e-5f;            // LayerNorm epsilon
  int64_t vocab_pad_tp = 1;              // TP size the vocab is padded for (Megatron pads to
                                         // a multiple of make_vocab_size_divisible_by x TP)

  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int64_t max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Megatron's padding: the smallest multiple of make_vocab_size_divisible_by (x TP) >= V.
  int64_t padded_vocab_size(int64_t tp_size = 0) const {
    const int64_t m = make_vocab_size_divisible_by * (tp_size > 0 ? tp_size : vocab_pad_tp);
    return (vocab_size + m - 1) / m * m;
  }
  // Parameter count, exactly: embeddings + L * (12 H^2-style blocks) + final norm.
  int64_t num_parameters() const;
  // Model FLOPs per token for training: 6 * params + 12 * L * H * S (full-attention convention).
  double train_flops_per_token() const;

  // Throws UsageError naming the flag when values are inconsistent.
  void validate() const;
};

}  // namespace mg
