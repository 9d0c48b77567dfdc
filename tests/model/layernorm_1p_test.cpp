// --apply-layernorm-1p (Megatron-Core's zero-centred gamma): every norm weight is stored as
// w = gamma - 1 and the norms scale by 1 + w. The model with w = gamma - 1 must compute the
// plain model's loss and gradients (d/dw = d/dgamma), for RMSNorm and LayerNorm, the head norms
// of --qk-layernorm and the final norm included; and a fresh 1p model holds w = 0 (gamma = 1).
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.h"
#include "testing/fd_check.h"

namespace mg {
namespace {

GPTConfig tiny(bool rms) {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.seq_length = 6;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;
  c.qk_layernorm = true;
  c.hidden_dropout = c.attention_dropout = 0.f;
  if (rms) {  // a tiny Llama
    c.normalization = "RMSNorm";
    c.swiglu = true;
    c.ffn_hidden_size = 24;
    c.position_embedding_type = "rope";
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
    c.group_query_attention = true;
    c.num_query_groups = 2;
  }
  c.init_method_std = 0.3f;  // large weights: the norms' scales matter to the loss
  return c;
}

// Norm weight elements of a model: (2 H + 2 HD) per layer (input, pre-MLP, Q and K head norms),
// plus H for the final norm.
int64_t norm_weight_elements(const GPTConfig& c) {
  return c.num_layers * (2 * c.hidden_size + 2 * c.head_dim()) + c.hidden_size;
}

struct Step {
  double loss;
  std::vector<float> grads;
};

Step forward_backward(GPTModel& m, const GPTConfig& c, int64_t B) {
  const int64_t S = c.seq_length, N = B * S;
  std::vector<int32_t> tok(static_cast<size_t>(N)), pos(tok), lab(tok);
  std::vector<float> mask(size_t(N), 1.f);
  for (int64_t i = 0; i < N; ++i) {
    tok[size_t(i)] = int32_t((i * 5 + 1) % c.vocab_size);
    lab[size_t(i)] = int32_t((i * 3 + 2) % c.vocab_size);
    pos[size_t(i)] = int32_t(i % S);
  }
  const MicroBatch mb{tok.data(), pos.data(), lab.data(), mask.data()};
  m.zero_grads();
  const double loss = m.forward(0, mb);
  m.backward(0, nullptr, 1.0f);
  return {loss, std::vector<float>(m.grads(), m.grads() + m.num_params())};
}

void expect_same_maths(bool rms) {
  const GPTConfig c = tiny(rms);
  GPTConfig c1 = c;
  c1.apply_layernorm_1p = true;
  const int64_t B = 2;
  GPTModel plain(c, B), zc(c1, B);
  plain.init(7);
  ASSERT_EQ(zc.num_params(), plain.num_params());
  // gamma in [0.8, 1.2] (and biases off zero): gamma - 1 is exact in fp32 there (Sterbenz).
  const std::vector<float> noise = testing::random_vec(size_t(plain.num_params()), 99, -0.2f, 0.2f);
  int64_t norm_elements = 0;
  for (const ParamSpec& p : plain.layout().params()) {
    ASSERT_EQ(zc.layout().get(p.name).offset, p.offset);
    const bool norm = p.traits.norm_weight;
    norm_elements += norm ? p.numel() : 0;
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
      if (p.init != InitKind::Normal) plain.params()[i] += noise[size_t(i)];
      zc.params()[i] = norm ? plain.params()[i] - 1.f : plain.params()[i];
    }
  }
  EXPECT_EQ(norm_elements, norm_weight_elements(c));
  const Step a = forward_backward(plain, c, B), b = forward_backward(zc, c1, B);
  EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss);
  for (const ParamSpec& p : plain.layout().params()) {
    const std::vector<double> ga(a.grads.begin() + p.offset,
                                 a.grads.begin() + p.offset + p.numel()),
        gb(b.grads.begin() + p.offset, b.grads.begin() + p.offset + p.numel());
    EXPECT_LT(testing::rel_l2(gb, ga), 1e-6) << p.name;
  }
  // Not vacuous: the same stored values without the offset are another model.
  for (const ParamSpec& p : plain.layout().params())
    if (p.traits.norm_weight)
      for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) zc.params()[i] = plain.params()[i];
  EXPECT_GT(std::fabs(forward_backward(zc, c1, B).loss - a.loss), 1e-3 * a.loss);
}

TEST(LayerNorm1p, RMSNormModelWithShiftedWeightsIsThePlainModel) { expect_same_maths(true); }
TEST(LayerNorm1p, LayerNormModelWithShiftedWeightsIsThePlainModel) { expect_same_maths(false); }

// Fresh weights: every norm weight exactly 0 with the flag (1 without); everything else drawn
// identically from the seed.
TEST(LayerNorm1p, InitialisesNormWeightsToZero) {
  for (bool rms : {true, false}) {
    const GPTConfig c = tiny(rms);
    GPTConfig c1 = c;
    c1.apply_layernorm_1p = true;
    GPTModel plain(c, 1), zc(c1, 1);
    plain.init(1234);
    zc.init(1234);
    int64_t norm_elements = 0;
    for (const ParamSpec& p : plain.layout().params()) {
      const bool norm = p.traits.norm_weight;
      norm_elements += norm ? p.numel() : 0;
      for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
        if (norm) {
          ASSERT_EQ(plain.params()[i], 1.f) << p.name;
          ASSERT_EQ(zc.params()[i], 0.f) << p.name;
        } else {
          ASSERT_EQ(zc.params()[i], plain.params()[i]) << p.name;
        }
      }
    }
    EXPECT_EQ(norm_elements, norm_weight_elements(c));
  }
}

}  // namespace
}  // namespace mg
