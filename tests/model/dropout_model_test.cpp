// Dropout at the model level: a model whose config has Megatron's default rates (0.1 / 0.1)
// computes exactly the no-dropout loss until dropout_on (evaluation and generation never drop),
// a different one while it is on, the same one again for the same (seed, iteration, sample),
// and the no-dropout loss after dropout_off; a micro-batch's global sample index keys its masks.
#include <gtest/gtest.h>

#include <vector>

#include "model/gpt.h"

namespace mg {
namespace {

TEST(ModelDropout, OnlyWhileTrainingAndKeyedByIterationAndSample) {
  GPTConfig c;
  c.num_layers = 2, c.hidden_size = 16, c.num_attention_heads = 2, c.seq_length = 8;
  c.vocab_size = 20, c.make_vocab_size_divisible_by = 4;
  GPTConfig plain = c;
  plain.hidden_dropout = plain.attention_dropout = 0.f;
  ASSERT_EQ(c.hidden_dropout, 0.1f);  // Megatron's defaults
  ASSERT_EQ(c.attention_dropout, 0.1f);
  const int64_t B = 2, N = B * c.seq_length;
  GPTModel m(c, B), ref(plain, B);
  m.init(5);
  ref.init(5);
  std::vector<int32_t> tok(N), pos(N), lab(N);
  std::vector<float> mask(N, 1.f);
  for (int64_t i = 0; i < N; ++i) {
    tok[i] = int32_t((3 * i + 1) % 20), lab[i] = int32_t((5 * i + 2) % 20);
    pos[i] = int32_t(i % c.seq_length);
  }
  MicroBatch mb{tok.data(), pos.data(), lab.data(), mask.data()};
  mb.first_sample = 40;
  const double base = ref.forward(0, mb);
  EXPECT_EQ(m.forward(0, mb), base) << "no dropout outside training";
  m.dropout_on(1234, 3);
  const double a = m.forward(0, mb), again = m.forward(0, mb);
  EXPECT_NE(a, base);
  EXPECT_EQ(again, a) << "the same (seed, iteration, samples) draws the same masks";
  m.dropout_on(1234, 4);
  EXPECT_NE(m.forward(0, mb), a) << "another iteration, other masks";
  m.dropout_on(1234, 3);
  mb.first_sample = 42;
  EXPECT_NE(m.forward(0, mb), a) << "other samples, other masks";
  m.dropout_off();
  EXPECT_EQ(m.forward(0, mb), base);
}

}  // namespace
}  // namespace mg
