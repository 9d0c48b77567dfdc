#include "data/mock_dataset.h"

#include "core/error.h"
#include "data/numpy_random.h"

namespace mg {

MockTokenSource::MockTokenSource(int64_t vocab_size, int32_t eod)
    : vocab_size_(vocab_size), eod_(eod) {
  Pcg64Generator rng(0);
  for (int64_t len : rng.integers(1, kMaxSequenceLength, kSize)) lengths_.push_back(int32_t(len));
}

void MockTokenSource::get(int64_t i, int64_t offset, int64_t n, int32_t* out) const {
  const int64_t len = lengths_[i];
  MG_CHECK(offset >= 0 && offset + n <= len, "mock sequence ", i, " has ", len,
           " tokens; asked for [", offset, ", ", offset + n, ")");
  for (int64_t k = 0; k < n; ++k) {
    const int64_t pos = offset + k;
    out[k] = pos == len - 1 ? eod_ : int32_t((pos + 1) % vocab_size_);
  }
}

}  // namespace mg
