#include "model/config.h"

#include "core/error.h"

namespace mg {

int64_t GPTConfig::num_parameters() const {
  const int64_t H = hidden_size, F = ffn();
  const int64_t per_layer = 4 * H            // two LayerNorms
                            + 3 * H * H + 3 * H  // QKV
                            + H * H + H          // projection
                            + H * F + F          // fc1
                            + F * H + H;         // fc2
  return padded_vocab_size() * H + max_positions() * H + num_layers * per_layer + 2 * H;
}

// The convention the benchmarks report (full attention, as in issue 7 / formulas.md):
// 6 FLOPs per parameter per token (2 forward, 4 backward) plus 12 * L * H * S for the attention
// core (Q K^T and P V, forward and backward, without halving for the causal mask).
double GPTConfig::train_flops_per_token() const {
  return 6.0 * double(num_parameters()) +
         12.0 * double(num_layers) * double(hidden_size) * double(seq_length);
}

void GPTConfig::validate() const {
  MG_USER_CHECK(num_layers > 0, "--num-layers must be positive (got ", num_layers, ")");
  MG_USER_CHECK(hidden_size > 0, "--hidden-size must be positive (got ", hidden_size, ")");
  MG_USER_CHECK(num_attention_heads > 0,
                "--num-attention-heads must be positive (got ", num_attention_heads, ")");
  MG_USER_CHECK(hidden_size % num_attention_heads == 0, "--num-attention-heads ",
                num_attention_heads, " must divide --hidden-size ", hidden_size);
  MG_USER_CHECK(ffn_hidden_size >= 0, "--ffn-hidden-size must be positive (got ", ffn_hidden_size,
                ")");
  MG_USER_CHECK(seq_length > 0, "--seq-length must be positive (got ", seq_length, ")");
  MG_USER_CHECK(max_positions() >= seq_length, "--max-position-embeddings ", max_positions(),
                " must be >= --seq-length ", seq_length);
  MG_USER_CHECK(vocab_size > 0, "--vocab-size must be positive (got ", vocab_size, ")");
  MG_USER_CHECK(make_vocab_size_divisible_by > 0,
                "--make-vocab-size-divisible-by must be positive (got ",
                make_vocab_size_divisible_by, ")");
  MG_USER_CHECK(init_method_std > 0.f, "--init-method-std must be positive (got ",
                init_method_std, ")");
  MG_USER_CHECK(norm_epsilon > 0.f, "--norm-epsilon must be positive (got ", norm_epsilon, ")");
}

}  // namespace mg
