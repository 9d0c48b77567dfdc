// The heap-based BPE merge loop (data/bpe): the same result as the textbook rescan (merge the
// leftmost lowest-rank pair, repeat) on random words, and O(n log n) on one long word.
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

namespace mg {
namespace {

// The textbook loop: O(n^2), rescans every pair after each merge.
std::vector<int32_t> rescan_bpe(const BpeMerges& merges, std::vector<int32_t> w) {
  while (w.size() > 1) {
    const BpeMerges::Merge* best = nullptr;
    size_t at = 0;
    for (size_t i = 0; i + 1 < w.size(); ++i)
      if (const BpeMerges::Merge* m = merges.find(w[i], w[i + 1]);
          m && (!best || m->rank < best->rank)) {
        best = m;
        at = i;
      }
    if (!best) break;
    w[at] = best->result;
    w.erase(w.begin() + long(at) + 1);
  }
  return w;
}

TEST(BpeMerges, MatchesTheRescanOnRandomWords) {
  std::mt19937 rng(7);
  BpeMerges merges;
  // Symbols 0-3; 60 random merges whose results are new symbols (ids from 4), random ranks.
  int32_t next_id = 4;
  for (int32_t r = 0; r < 60; ++r) {
    const int32_t a = int32_t(rng() % uint32_t(next_id)), b = int32_t(rng() % uint32_t(next_id));
    if (merges.find(a, b)) continue;
    merges.add(a, b, int32_t(rng() % 1000), next_id++);
  }
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> w(1 + rng() % 40);
    for (int32_t& s : w) s = int32_t(rng() % 4);
    std::vector<int32_t> heap = w;
    merges.apply(heap);
    ASSERT_EQ(heap, rescan_bpe(merges, w)) << "trial " << trial;
  }
}

TEST(BpeMerges, LongWordIsNotQuadratic) {
  // a=0, then token k (id k) = two of token k-1: 2^17 a's merge into the single token 17.
  BpeMerges merges;
  for (int32_t k = 1; k <= 17; ++k) merges.add(k - 1, k - 1, k, k);
  std::vector<int32_t> w(size_t(1) << 17, 0);
  const auto t0 = std::chrono::steady_clock::now();
  merges.apply(w);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(w, (std::vector<int32_t>{17}));
  EXPECT_LT(seconds, 2.0) << "the rescan would take ~2^33 pair lookups";
}

}  // namespace
}  // namespace mg
