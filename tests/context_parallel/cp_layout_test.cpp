// The load-balanced CP layout (Megatron's get_batch_on_this_cp_rank) in closed form, and the
// --cp-comm-type names.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "context_parallel/cp_attention.h"
#include "core/error.h"

namespace mg::cp {
namespace {

TEST(CpLayout, RankHoldsChunksRAndTwoNMinusOneMinusR) {
  // S = 16, N = 4: chunks of 2; rank 1 holds chunks 1 and 6.
  const CpLayout l{4, 1, 16};  // CP 4, rank 1, S 16
  EXPECT_EQ(l.chunk(), 2);
  EXPECT_EQ(l.chunk_index(0), 1);
  EXPECT_EQ(l.chunk_index(1), 6);
  std::vector<int64_t> pos;
  for (int64_t t = 0; t < 4; ++t) pos.push_back(l.position(t));
  EXPECT_EQ(pos, (std::vector<int64_t>{2, 3, 12, 13}));
}

TEST(CpLayout, RanksCoverTheSequenceOnceWithEvenCausalWork) {
  for (int N : {1, 2, 3, 4, 8}) {
    const int64_t S_local = 6, S = S_local * N;
    std::vector<int64_t> all;
    for (int r = 0; r < N; ++r) {
      const CpLayout l{N, r, S};
      int64_t work = 0;  // keys a causal query sees: position + 1, summed over the rank's rows
      for (int64_t t = 0; t < S_local; ++t) {
        const int64_t p = l.position(t);
        all.push_back(p);
        work += p + 1;
        const int64_t c = S_local / 2;  // closed form: chunk r, then chunk 2N-1-r
        EXPECT_EQ(p, t < c ? r * c + t : (2 * N - 1 - r) * c + t - c);
      }
      EXPECT_EQ(work, S_local * (S + 1) / 2) << "N " << N << " rank " << r;
    }
    std::sort(all.begin(), all.end());
    for (int64_t p = 0; p < S; ++p) EXPECT_EQ(all[size_t(p)], p);
  }
}

TEST(CpLayout, CommTypeNames) {
  EXPECT_EQ(parse_cp_comm_type("p2p"), CpCommType::P2P);
  EXPECT_EQ(parse_cp_comm_type("a2a"), CpCommType::A2A);
  EXPECT_STREQ(cp_comm_type_name(CpCommType::A2A), "a2a");
  try {
    parse_cp_comm_type("allgather");
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--cp-comm-type allgather"), std::string::npos);
  }
}

}  // namespace
}  // namespace mg::cp
