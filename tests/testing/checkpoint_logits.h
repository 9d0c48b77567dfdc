// Our logits from a checkpoint against a reference's (the Hugging Face conversion tests): the
// model of a checkpoint directory loaded at one rank in f32, run on the reference's tokens.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"
#include "model/gpt.h"
#include "checkpoint/convert.h"
#include "testing/temp_dir.h"

namespace mg::testing {

template <typename T>
std::vector<T> read_array(const std::filesystem::path& p) {
  const std::string b = slurp(p);
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// The largest |ours - reference| over the unpadded vocabulary: `dir` holds tokens.bin (int32
// [B, S]) and logits.bin (float64 [B, S, vocab]); positions are 0..S-1.
inline double checkpoint_logits_error(const std::string& ck, const std::filesystem::path& dir,
                                      int64_t B, int64_t S) {
  GPTConfig m = checkpoint_model_config(ck);
  const int64_t V = m.vocab_size, Vp = m.padded_vocab_size();
  m.seq_length = S;
  GPTModel model(m, B);
  load_checkpoint_weights(ck, model);
  const auto tokens = read_array<int32_t>(dir / "tokens.bin");
  const auto want = read_array<double>(dir / "logits.bin");
  EXPECT_EQ(tokens.size(), size_t(B * S));
  EXPECT_EQ(want.size(), size_t(B * S * V));
  if (tokens.size() != size_t(B * S) || want.size() != size_t(B * S * V)) return INFINITY;
  std::vector<int32_t> pos(size_t(B * S)), labels(size_t(B * S), 0);
  std::vector<float> mask(size_t(B * S), 1.f);
  for (int64_t i = 0; i < B * S; ++i) pos[size_t(i)] = int32_t(i % S);
  model.forward(0, {tokens.data(), pos.data(), labels.data(), mask.data()});
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t v = 0; v < V; ++v)  // ours are [S, B, Vp] rows
        worst = std::max(worst, std::fabs(model.logits(0)[(s * B + b) * Vp + v] -
                                          want[size_t((b * S + s) * V + v)]));
  return worst;
}

}  // namespace mg::testing
