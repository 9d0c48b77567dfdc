// Data pipeline against independent references: NumPy itself for the generators (bit-exact),
// the concatenated-document stream for the sample index (sample k = stream[k*S, k*S + S + 1)),
// and Megatron's split rounding.
#include <gtest/gtest.h>

#include <numeric>
#include <sstream>

#include "core/error.h"
#include "data/batch.h"
#include "data/gpt_dataset.h"
#include "data/mock_dataset.h"
#include "data/numpy_random.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

std::vector<int64_t> numpy(const std::string& args) {
  auto r = testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                                "/tests/data/numpy_oracle.py " + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<int64_t> v;
  std::istringstream is(r.output);
  for (int64_t x; is >> x;) v.push_back(x);
  return v;
}

TEST(NumpyRandom, Pcg64IntegersMatchNumpy) {
  for (uint64_t seed : {0ull, 1ull, 12345678901ull}) {
    Pcg64Generator g(seed);
    auto ours = g.integers(1, 4096, 5000);
    auto ref = numpy("integers " + std::to_string(seed) + " 1 4096 5000");
    ASSERT_EQ(ours, ref) << "seed " << seed;
  }
  Pcg64Generator g(3);
  EXPECT_EQ(g.integers(-5, 7, 1000), numpy("integers 3 -5 7 1000"));
}

TEST(NumpyRandom, LegacyShuffleMatchesNumpy) {
  LegacyRandomState rs(1234);
  std::vector<int64_t> out;
  for (int64_t n : {1, 2, 17, 1000, 70000}) {
    std::vector<int64_t> a(n);
    std::iota(a.begin(), a.end(), 0);
    rs.shuffle(a);
    out.insert(out.end(), a.begin(), a.end());
  }
  EXPECT_EQ(out, numpy("shuffle 1234 1 2 17 1000 70000"));
}

TEST(MockDataset, LengthsAndTokensAreMegatrons) {
  MockTokenSource src(50257, 50256);
  ASSERT_EQ(src.num_sequences(), 100000);
  auto ref = numpy("integers 0 1 4096 100000");
  for (int64_t i = 0; i < 100000; ++i) ASSERT_EQ(src.sequence_length(i), ref[i]) << i;
  // Sequence i: 1, 2, ..., len-1 (mod vocab), then EOD.
  std::vector<int32_t> t(src.sequence_length(0));
  src.get(0, 0, int64_t(t.size()), t.data());
  EXPECT_EQ(t[0], 1);
  EXPECT_EQ(t[10], 11);
  EXPECT_EQ(t.back(), 50256);
  MockTokenSource small(100, 99);
  std::vector<int32_t> u(3);
  small.get(0, 98, 3, u.data());  // positions 98..100 -> 99, 100 % 100, 101 % 100
  EXPECT_EQ(u, (std::vector<int32_t>{99, 0, 1}));
}

TEST(Split, MatchesMegatronRounding) {
  auto r = split_ranges("969,30,1", 100000);
  using Range = std::pair<int64_t, int64_t>;
  EXPECT_EQ(r[0], Range(0, 96900));
  EXPECT_EQ(r[1], Range(96900, 99900));
  EXPECT_EQ(r[2], Range(99900, 100000));
  EXPECT_THROW(split_ranges("90,-5,5", 10), UsageError);
  EXPECT_THROW(split_ranges(".", 10), UsageError);
  // The forms bash hands over from launch scripts read as Megatron reads them: quotes kept
  // by an unquoted expansion, spaces after the commas.
  for (const char* form : {"'969,30,1'", "969, 30, 1", "\"969,30,1\"", " 969 ,30,1 "})
    EXPECT_EQ(split_ranges(form, 100000), r) << form;
  EXPECT_EQ(split_weights("'99,1,0'"), split_weights("99,1,0"));
  EXPECT_DOUBLE_EQ(split_weights("99, 1")[0], 0.99);
  auto two = split_ranges("99,1", 7);  // padded with a zero test weight
  EXPECT_EQ(two[0].second, 7);
  EXPECT_EQ(two[2].first, two[2].second);
}

// A small corpus with random lengths, so multiple epochs and the thin final epoch happen.
class SmallSource : public TokenSource {
 public:
  SmallSource() {
    Pcg64Generator g(11);
    for (int64_t l : g.integers(1, 40, 60)) len_.push_back(int32_t(l));
  }
  int64_t num_sequences() const override { return int64_t(len_.size()); }
  int64_t sequence_length(int64_t i) const override { return len_[i]; }
  void get(int64_t i, int64_t off, int64_t n, int32_t* out) const override {
    for (int64_t k = 0; k < n; ++k) out[k] = int32_t(i * 1000 + off + k);
  }

 private:
  std::vector<int32_t> len_;
};

GPTDatasetConfig dataset_config(int64_t seq_length, int64_t num_samples, uint32_t seed) {
  GPTDatasetConfig c;
  c.seq_length = seq_length;
  c.num_samples = num_samples;
  c.seed = seed;
  return c;
}

void check_dataset(int64_t num_samples, bool expect_separate) {
  SmallSource src;
  const int64_t S = 16, begin = 5, end = 55;
  GPTDataset ds(src, begin, end, dataset_config(S, num_samples, 4321));
  int64_t T = 0;
  for (int64_t d = begin; d < end; ++d) T += src.sequence_length(d);
  const int64_t epochs = ds.num_epochs();
  EXPECT_GE(epochs * T, num_samples * S + 1);
  EXPECT_LT((epochs - 1) * T, num_samples * S + 1);
  const int64_t M = (epochs * T - 1) / S;
  ASSERT_EQ(ds.size(), M);
  const int64_t first = expect_separate ? ((epochs - 1) * T - 1) / S : M;

  auto ref = numpy("docshuffle 4321 " + std::to_string(begin) + " " + std::to_string(end) + " " +
                   std::to_string(epochs) + " " + std::to_string(M) + " " + std::to_string(first) +
                   " " + (expect_separate ? "1" : "0"));
  const size_t D = ds.document_index().size();
  ASSERT_EQ(ref.size(), D + size_t(M));
  for (size_t i = 0; i < D; ++i) ASSERT_EQ(ds.document_index()[i], ref[i]) << "doc " << i;
  for (int64_t i = 0; i < M; ++i) ASSERT_EQ(ds.shuffle_index()[i], ref[D + i]) << "shuffle " << i;

  // Sample k is tokens [k*S, k*S + S + 1) of the documents concatenated in document-index order.
  std::vector<int32_t> stream;
  for (int32_t d : ds.document_index()) {
    std::vector<int32_t> t(src.sequence_length(d));
    src.get(d, 0, int64_t(t.size()), t.data());
    stream.insert(stream.end(), t.begin(), t.end());
  }
  std::vector<int32_t> out(S + 1);
  for (int64_t i = 0; i < M; ++i) {
    const int64_t k = ds.shuffle_index()[i];
    const int64_t real = ds.sample(i, out.data());
    ASSERT_EQ(real, S + 1);
    for (int64_t j = 0; j <= S; ++j) ASSERT_EQ(out[j], stream[k * S + j]) << "sample " << k;
  }
}

TEST(GPTDataset, OneEpochOrderEqualsNumpyAndStream) { check_dataset(20, false); }
// T = 1125 tokens in the split: 150 samples need 3 epochs with only 10 samples in the last one
// (< 80% of 70 per epoch), so the last epoch is shuffled separately.
TEST(GPTDataset, ManyEpochsWithSeparateThinFinalEpoch) { check_dataset(150, true); }
TEST(GPTDataset, ManyEpochsWithoutSeparation) {
  SmallSource src;
  int64_t T = 0;
  for (int64_t d = 5; d < 55; ++d) T += src.sequence_length(d);
  // Three full epochs' worth: the last epoch is full, so it is not separated.
  check_dataset((3 * T - 1) / 16, false);
}

TEST(Batch, TokensLabelsMasksPositions) {
  SmallSource src;
  GPTDataset ds(src, 0, 60, dataset_config(8, 10, 1));
  BatchOptions opt;
  opt.eod = -7;  // never present: the mask stays all ones
  Batch b = make_batch(ds, 2, 3, 8, opt);
  std::vector<int32_t> s(9);
  ds.sample(3, s.data());
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(b.tokens[8 + t], s[t]);
    EXPECT_EQ(b.labels[8 + t], s[t + 1]);
    EXPECT_EQ(b.position_ids[8 + t], t);
    EXPECT_EQ(b.loss_mask[8 + t], 1.f);
  }
  opt.eod = s[2];
  opt.eod_mask_loss = true;
  opt.reset_position_ids = true;
  Batch e = make_batch(ds, 3, 1, 8, opt);
  EXPECT_EQ(e.loss_mask[2], 0.f);  // input token is "EOD"
  EXPECT_EQ(e.loss_mask[1], 1.f);
  EXPECT_EQ(e.position_ids[2], 2);
  EXPECT_EQ(e.position_ids[3], 0);  // restarts after it
}

}  // namespace
}  // namespace mg
