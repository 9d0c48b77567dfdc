// --calculate-per-token-loss: the loss and its gradient are the global batch's token sum over its
// token count. With --eod-mask-loss the micro-batches hold different token counts, so the mean of
// per-micro-batch means (the default) depends on the micro-batch size while the per-token loss
// does not: per-token runs with 4 micro-batches of 1 sample, on 1 rank and on DP2 and TP2 x PP2,
// must follow the default run with one micro-batch of all 4 samples (where both definitions
// agree), within 5e-6 (measured: 2e-7, the log's precision), and the default run with 4
// micro-batches must not (measured: up to 1.7e-4 apart).
#include <gtest/gtest.h>

#include <cmath>

#include <fstream>

#include "testing/mpirun.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

// Documents of 1 to 40 tokens (NullTokenizer: the text is the ids), so a sample of 64 tokens
// holds several EODs, a different number in each.
std::string dataset(const testing::TempDir& dir) {
  std::ofstream jsonl(dir.str("docs.jsonl"));
  uint64_t x = 99;
  auto next = [&] { return (x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  for (int d = 0; d < 2000; ++d) {
    std::string text;
    // Half the documents repeat one token (soon predicted well), half are random (not): the
    // micro-batches' losses differ, so their weighting shows.
    const uint64_t repeated = d % 2 ? next() % 500 : 500;
    for (uint64_t n = 1 + next() % 40, i = 0; i < n; ++i)
      text += std::to_string(repeated < 500 ? repeated : next() % 500) + " ";
    jsonl << "{\"text\": \"" << text << "\"}\n";
  }
  jsonl.close();
  const auto r =
      testing::run_command(std::string(MG_BINARY) + " preprocess --input " + dir.str("docs.jsonl") +
                           " --output-prefix " + dir.str("null") +
                           " --tokenizer-type NullTokenizer"
                           " --vocab-size 511 --append-eod --workers 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir.str("null_text_document");
}

std::vector<double> run_losses(const std::string& data, int ranks, const std::string& flags) {
  const std::string cmd =
      (ranks > 1 ? testing::mpirun_prefix(ranks) : std::string()) + MG_BINARY +
      " train --data-path " + data +
      " --tokenizer-type NullTokenizer --vocab-size 511"
      " --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 64"
      " --global-batch-size 4 --train-iters 8 --lr 1e-2 --log-interval 1 --eod-mask-loss"
      " --split 100,0,0 --seed 7 " +
      flags;
  const auto r = testing::run_command("timeout 300 " + cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return testing::log_values(r.output, "lm loss");
}

TEST(PerTokenLoss, IndependentOfMicroBatchingAndLayout) {
  testing::TempDir dir("mg_per_token");
  const std::string data = dataset(dir);
  const auto whole = run_losses(data, 1, "--micro-batch-size 4");
  ASSERT_EQ(whole.size(), 8u);
  const auto means = run_losses(data, 1, "--micro-batch-size 1");
  ASSERT_EQ(means.size(), 8u);
  double max_gap = 0;
  for (size_t i = 0; i < whole.size(); ++i)
    max_gap = std::max(max_gap, std::abs(means[i] - whole[i]) / whole[i]);
  EXPECT_GT(max_gap, 5e-5) << "the masks must differ between micro-batches for this test to "
                              "tell the two losses apart";
  for (const auto& [ranks, flags] : std::vector<std::pair<int, std::string>>{
           {1, "--micro-batch-size 1"},
           {2, "--micro-batch-size 1"},
           {4,
            "--micro-batch-size 1 --tensor-model-parallel-size 2 "
            "--pipeline-model-parallel-size 2"},
           {2, "--micro-batch-size 1 --use-distributed-optimizer"}}) {
    const auto l = run_losses(data, ranks, flags + " --calculate-per-token-loss");
    ASSERT_EQ(l.size(), whole.size()) << flags;
    for (size_t i = 0; i < l.size(); ++i)
      EXPECT_NEAR(l[i], whole[i], 5e-6 * whole[i])
          << ranks << " ranks, " << flags << ", step " << i;
  }
}

}  // namespace
}  // namespace mg
