// Context parallelism's load balancing against its closed form (Megatron's
// get_batch_on_this_cp_rank): the sequence in 2 CP chunks of c = S / (2 CP) tokens, rank r keeps
// chunk r (positions [r c, (r + 1) c)) then chunk 2 CP - 1 - r; the dropout masks of a CP rank's
// rows are those of the same tokens on one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/cp_layout.h"
#include "core/dropout_mask.h"
#include "data/batch.h"

namespace mg {
namespace {

TEST(ContextParallelSlice, PositionsOfEachRankWrittenOut) {
  // S = 8, CP = 2: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  const std::vector<std::vector<int64_t>> cp2 = {{0, 1, 6, 7}, {2, 3, 4, 5}};
  // S = 16, CP = 4: chunks of 2; rank r holds chunks r and 7 - r.
  const std::vector<std::vector<int64_t>> cp4 = {
      {0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
  for (const auto& [S, cp, expected] :
       {std::tuple{int64_t(8), int64_t(2), cp2}, std::tuple{int64_t(16), int64_t(4), cp4}})
    for (int64_t r = 0; r < cp; ++r) {
      const CpLayout l{cp, r, S};
      ASSERT_EQ(l.local_length(), 4);
      for (int64_t t = 0; t < 4; ++t) EXPECT_EQ(l.position(t), expected[r][t]) << cp << " " << r;
    }
  const CpLayout one{1, 0, 8};
  EXPECT_EQ(one.local_length(), 8);
  EXPECT_EQ(one.position(5), 5);
}

TEST(ContextParallelSlice, EveryArrayKeepsItsGlobalValues) {
  const int64_t B = 2, S = 12, CP = 3, c = S / (2 * CP);
  Batch b;
  b.B = B;
  b.S = S;
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < S; ++t) {
      b.tokens.push_back(int32_t(100 * r + t));
      b.labels.push_back(int32_t(1000 + 100 * r + t));
      b.position_ids.push_back(int32_t(t % 5));  // e.g. reset after an EOD
      b.loss_mask.push_back(float((r + t) % 3 != 0));
      b.attention_start.push_back(int32_t(t / 4 * 4));
    }
  std::vector<int> seen(size_t(B * S), 0);
  for (int64_t rank = 0; rank < CP; ++rank) {
    const Batch s = slice_for_context_parallel(b, CpLayout{CP, rank, S});
    ASSERT_EQ(s.B, B);
    ASSERT_EQ(s.S, 2 * c);
    ASSERT_EQ(s.tokens.size(), size_t(B * 2 * c));
    for (int64_t r = 0; r < B; ++r)
      for (int64_t t = 0; t < 2 * c; ++t) {
        // The closed form: the first c local tokens are chunk `rank`, the next c chunk
        // 2 CP - 1 - rank.
        const int64_t g = t < c ? rank * c + t : (2 * CP - 1 - rank) * c + (t - c);
        const size_t i = size_t(r * 2 * c + t);
        EXPECT_EQ(s.tokens[i], 100 * r + g);
        EXPECT_EQ(s.labels[i], 1000 + 100 * r + g);
        EXPECT_EQ(s.position_ids[i], g % 5);
        EXPECT_EQ(s.loss_mask[i], float((r + g) % 3 != 0));
        EXPECT_EQ(s.attention_start[i], g / 4 * 4);
        ++seen[size_t(r * S + g)];
      }
  }
  // The ranks' tokens partition every sequence.
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  // Without --reset-attention-mask there are no attention starts to slice.
  b.attention_start.clear();
  EXPECT_TRUE(slice_for_context_parallel(b, CpLayout{CP, 1, S}).attention_start.empty());
}

TEST(ContextParallelSlice, DropoutRowsKeyByGlobalPosition) {
  const int64_t B = 2, S = 8, C = 6;
  DropoutRows one{dropout_key(0.5f, 7, 3, 1, DropoutSite::MlpOut), 40, B, 0, 0};
  for (int64_t rank = 0; rank < 2; ++rank) {
    const CpLayout cp{2, rank, S};
    DropoutRows mine = one;
    mine.cp = cp;
    for (int64_t t = 0; t < cp.local_length(); ++t)
      for (int64_t b = 0; b < B; ++b) {
        std::vector<float> row(C), expected(C);
        mine.row(row.data(), t * B + b, C);
        one.row(expected.data(), cp.position(t) * B + b, C);
        EXPECT_EQ(row, expected);
        for (int64_t col = 0; col < C; ++col)
          EXPECT_EQ(mine.factor(t * B + b, col), expected[size_t(col)]);
      }
  }
  // Sequence parallelism inside a CP rank: TP rank 1 of 2 holds local tokens 2..3 (global
  // 6, 7 on CP rank 0).
  DropoutRows sp = one;
  sp.cp = CpLayout{2, 0, S};
  sp.t0 = 2;
  std::vector<float> row(C), expected(C);
  sp.row(row.data(), 1 * B + 1, C);
  one.row(expected.data(), 7 * B + 1, C);
  EXPECT_EQ(row, expected);
}

}  // namespace
}  // namespace mg
