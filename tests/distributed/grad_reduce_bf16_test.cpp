// --grad-reduce-in-bf16 through the real binary on DP2 (label `parallel`): with the plain
// optimizer (all-reduce), the distributed optimizer (reduce-scatter) and --overlap-grad-reduce,
// the run tracks the fp32-reduced run (losses within 1e-3 relative over 5 steps) but is not
// that run (the final parameters differ), and the logged DP bytes show the halving: the
// all-reduce moves half the bytes; under the distributed optimizer the reduce-scatter halves and
// the fp32 parameter all-gather (as many bytes as the fp32 reduce-scatter) does not, 3/4 in all.
#include <gtest/gtest.h>

#include <cstring>

#include "testing/mpirun.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

// Tiny GPT, 2 micro-batches per DP rank (fp32 accumulation), several DP buckets.
const std::string kRun =
    " train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16"
    " --vocab-size 300 --micro-batch-size 2 --global-batch-size 8 --train-iters 5 --lr 1e-2"
    " --weight-decay 0.1 --log-interval 1 --seed 5 --ddp-bucket-size 4000"
    " --attention-dropout 0 --hidden-dropout 0";

struct TrainRun {
  std::vector<double> losses, dp_bytes;
  std::string params;  // the final parameters' bytes
};

TrainRun train_dp2(const std::string& flags) {
  testing::TempDir dir("mg_bf16reduce");
  const std::string dump = dir.str("p.bin");
  const std::string cmd =
      testing::mpirun_prefix(2) + MG_BINARY + kRun + " " + flags + " --dump-final-params " + dump;
  const auto r = testing::run_command("timeout 300 " + cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  return {testing::log_values(r.output, "lm loss"), testing::log_values(r.output, "dp comm bytes"),
          testing::slurp(dump)};
}

TEST(GradReduceInBf16, TracksTheFp32ReductionWithHalfTheBytes) {
  for (const std::string layout :
       {"", "--overlap-grad-reduce", "--use-distributed-optimizer",
        "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"}) {
    SCOPED_TRACE(layout);
    const TrainRun fp32 = train_dp2(layout);
    const TrainRun bf16 = train_dp2(layout + " --grad-reduce-in-bf16");
    ASSERT_EQ(fp32.losses.size(), 5u);
    ASSERT_EQ(bf16.losses.size(), 5u);
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(bf16.losses[i], fp32.losses[i], 1e-3 * fp32.losses[i]) << "step " << i + 1;
    ASSERT_FALSE(fp32.params.empty());
    ASSERT_EQ(bf16.params.size(), fp32.params.size());
    EXPECT_NE(bf16.params, fp32.params) << "the flag changed nothing";
    const bool dist = std::strstr(layout.c_str(), "distributed") != nullptr;
    ASSERT_EQ(bf16.dp_bytes.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_GT(fp32.dp_bytes[i], 0);
      EXPECT_EQ(bf16.dp_bytes[i] * (dist ? 4 : 2), fp32.dp_bytes[i] * (dist ? 3 : 1));
    }
  }
}

}  // namespace
}  // namespace mg
