// End to end: what `megatron train` does where it now follows upstream
// Megatron-LM (behaviour restated from megatron/training/training.py and
// megatron/core/datasets/): sample-based runs with a batch-size ramp, per-interval skip counts,
// the validation and test evaluations after training, the index cache's default place and the
// per-split blend sizes.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "data/dataset_builder.h"
#include "data/indexed_dataset.h"
#include "testing/mpirun.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using testing::log_values;
using testing::TempDir;

const std::string kTiny =
    std::string(MG_BINARY) +
    " train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8"
    " --micro-batch-size 1 --lr 1e-3 --log-interval 1 --seed 5";
const std::string kMock = kTiny + " --mock-data --vocab-size 64";

std::vector<int64_t> ints(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// Two small token datasets, a and b, under dir.
void write_datasets(const TempDir& dir) {
  std::mt19937 gen(11);
  for (const char* name : {"a", "b"}) {
    IndexedDatasetWriter w(dir.str(name), TokenDType::U16);
    for (int doc = 0; doc < 200; ++doc) {
      std::vector<int32_t> ids(size_t(4 + gen() % 30));
      for (int32_t& t : ids) t = int32_t(gen() % 63);
      w.add_document(ids, {int32_t(ids.size())});
    }
    w.finalize();
  }
}

// --train-samples 40 --global-batch-size 8 --rampup-batch-size 2 2 12: (8 - 2) / 2 = 3
// increments, one per 12 / 3 = 4 samples. Batch after c consumed samples: c > 12 ? 8 :
// 2 + 2 * floor(c / 4). Iterations: the ramp's while c <= 12 (c = 0, 2, 4, 8 -> batches 2, 2,
// 4, 6; c = 14), then (40 - 14) // 8 = 3 of 8: 7 in all, 38 samples consumed.
TEST(UpstreamDefaultsRun, SampleBasedRunRampsTheBatchUp) {
  const auto r = testing::run_command(kMock +
                                      " --train-samples 40 --global-batch-size 8 "
                                      "--rampup-batch-size 2 2 12 --lr-warmup-samples 4 "
                                      "--lr-decay-samples 30");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ints(log_values(r.output, "global batch size")),
            (std::vector<int64_t>{2, 2, 4, 6, 8, 8, 8}));
  EXPECT_EQ(ints(log_values(r.output, "consumed samples")),
            (std::vector<int64_t>{2, 4, 8, 14, 22, 30, 38}));
  EXPECT_NE(r.output.find(" iteration        7/       7 |"), std::string::npos) << r.output;
  for (const char* line :
       {"setting initial batch size to 2\n", "ramping up batch size from 2 to 4\n",
        "ramping up batch size from 4 to 6\n", "ramping up batch size from 6 to 8\n"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << r.output;
  // The schedule counts samples: warmup over 4 (lr at 0, 2 samples: 0, 5e-4), then linear
  // decay to 0 at 30: at 4 -> 1e-3, at 8 -> 1e-3 x (1 - 4/26), at 14 -> 1e-3 x (1 - 10/26).
  const std::vector<double> lr = log_values(r.output, "learning rate");
  ASSERT_EQ(lr.size(), 7u);
  EXPECT_NEAR(lr[1], 5e-4, 1e-9);
  EXPECT_NEAR(lr[2], 1e-3, 1e-9);
  EXPECT_NEAR(lr[3], 1e-3 * (1 - 4.0 / 26), 1e-9);
  EXPECT_NEAR(lr[4], 1e-3 * (1 - 10.0 / 26), 1e-9);
  // Iteration-based runs take no ramp, as upstream.
  const auto it = testing::run_command(kMock +
                                       " --train-iters 4 --global-batch-size 8 "
                                       "--rampup-batch-size 2 2 12");
  EXPECT_EQ(it.exit_code, 2) << it.output;
  EXPECT_NE(it.output.find("--rampup-batch-size needs sample-based training"), std::string::npos)
      << it.output;
}

// Upstream resets its skipped- and nan-iteration counts after each log line.
TEST(UpstreamDefaultsRun, SkippedIterationsAreCountedPerLogInterval) {
  const auto r = testing::run_command(kMock +
                                      " --train-iters 6 --global-batch-size 2 "
                                      "--log-interval 2 --fp16 --initial-loss-scale 128 "
                                      "--inject-grad-overflow 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ints(log_values(r.output, "number of skipped iterations")),
            (std::vector<int64_t>{1, 0, 0}));
}

// After training: " validation loss at iteration N on validation set" and "... on test set",
// --eval-iters batches each. With the same dataset as validation and test blend and no
// validation during training (--eval-interval above --train-iters), both read the same
// samples (same range, sample count and seed) with the same model: equal losses.
TEST(UpstreamDefaultsRun, ValidationAndTestRunAfterTraining) {
  TempDir dir;
  write_datasets(dir);
  const std::string run = kTiny +
                          " --tokenizer-type NullTokenizer --vocab-size 64"
                          " --global-batch-size 2 --train-iters 4 --eval-iters 3"
                          " --train-data-path " +
                          dir.str("a") + " --valid-data-path " + dir.str("b") +
                          " --test-data-path " + dir.str("b");
  const auto r = testing::run_command(run + " --eval-interval 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> v = log_values(r.output, "lm loss value");
  ASSERT_EQ(v.size(), 2u) << r.output;
  EXPECT_EQ(v[0], v[1]) << r.output;
  const size_t valid = r.output.find(" validation loss at iteration 4 on validation set | ");
  const size_t test = r.output.find(" validation loss at iteration 4 on test set | ");
  EXPECT_NE(valid, std::string::npos) << r.output;
  EXPECT_NE(test, std::string::npos) << r.output;
  EXPECT_LT(valid, test);
  // With --eval-interval 2: validations at 2 and 4 during training, then the two after it.
  const auto e = testing::run_command(run + " --eval-interval 2");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_EQ(log_values(e.output, "lm loss value").size(), 4u) << e.output;
  // Without --test-data-path there is no test split, and no test line.
  const auto n = testing::run_command(kTiny +
                                      " --tokenizer-type NullTokenizer --vocab-size 64"
                                      " --global-batch-size 2 --train-iters 2 --eval-iters 1"
                                      " --eval-interval 2 --train-data-path " +
                                      dir.str("a") + " --valid-data-path " + dir.str("b"));
  ASSERT_EQ(n.exit_code, 0) << n.output;
  EXPECT_EQ(n.output.find("on test set"), std::string::npos) << n.output;
  EXPECT_NE(n.output.find("on validation set"), std::string::npos) << n.output;
}

// Without --data-cache-path the indices go to <prefix>/cache/GPTDataset_indices, upstream's
// default, for each split built.
TEST(UpstreamDefaultsRun, IndexCacheDefaultsToTheDatasetsPrefixDirectory) {
  TempDir dir;
  write_datasets(dir);
  const auto r = testing::run_command(kTiny +
                                      " --tokenizer-type NullTokenizer --vocab-size 64"
                                      " --global-batch-size 2 --train-iters 2 --eval-iters 1"
                                      " --eval-interval 2 --split 90,5,5 --data-path " +
                                      dir.str("a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path cache = dir / "a" / "cache" / "GPTDataset_indices";
  int found[3] = {0, 0, 0};
  for (const auto& e : fs::directory_iterator(cache)) {
    const std::string name = e.path().filename().string();
    for (int s = 0; s < 3; ++s)
      if (name.find(std::string("-GPTDataset-") +
                    (s == 0   ? "train"
                     : s == 1 ? "valid"
                              : "test") +
                    "-shuffle_index.npy") != std::string::npos)
        ++found[s];
  }
  EXPECT_EQ(found[0], 1);
  EXPECT_EQ(found[1], 1);
  EXPECT_EQ(found[2], 1);
}

// Upstream's weighted blend of N samples per split holds sum_i ceil(N w_i): 48 at 0.3 / 0.7
// holds 15 + 34 = 49 entries (the old sizing gave 48).
TEST(UpstreamDefaultsRun, WeightedBlendsAreSizedPerSplitAsUpstream) {
  TempDir dir;
  write_datasets(dir);
  DataSpec spec;
  spec.data_path = {"0.3", dir.str("a"), "0.7", dir.str("b")};
  spec.split = "90,5,5";
  spec.seq_length = 8;
  spec.vocab_size = 64;
  spec.num_samples = {16, 48, 0};
  spec.cache_dir = dir.str("cache");
  const BuiltData d = build_datasets(spec);
  ASSERT_NE(d.split[1], nullptr);
  EXPECT_EQ(d.split[1]->size(), 49);
  EXPECT_EQ(d.split[0]->size(), 5 + 12);  // ceil(4.8) + ceil(11.2)
  EXPECT_EQ(d.split[2], nullptr);         // not requested
}

}  // namespace
}  // namespace mg
