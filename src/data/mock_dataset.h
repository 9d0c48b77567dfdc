// Megatron's MockGPTLowLevelDataset: 100,000 sequences whose lengths are
// default_rng(0).integers(1, 4096, dtype=int32); sequence i is (1, 2, ..., len-1) mod vocab
// followed by the EOD token. Deterministic, needs no files: the smoke-test corpus.
#pragma once
#include <vector>

#include "data/token_source.h"

namespace mg {

class MockTokenSource : public TokenSource {
 public:
  MockTokenSource(int64_t vocab_size, int32_t eod);
  int64_t num_sequences() const override { return int64_t(lengths_.size()); }
  int64_t sequence_length(int64_t i) const override { return lengths_[i]; }
  void get(int64_t i, int64_t offset, int64_t n, int32_t* out) const override;

  static constexpr int64_t kSize = 100000;
  static constexpr int64_t kMaxSequenceLength = 4096;

 private:
  std::vector<int32_t> lengths_;
  int64_t vocab_size_;
  int32_t eod_;
};

}  // namespace mg
