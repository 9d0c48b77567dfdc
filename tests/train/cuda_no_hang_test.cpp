// No hang over NCCL (label gpu; cuda-emu under the emulator): a rank of a two-rank GPU run
// stopped with SIGSTOP (MG_FAULT_STOP) makes the other's NCCL wait (a CUDA event polled within
// --distributed-timeout-minutes), or the NCCL watchdog thread for work nobody waits on yet,
// abort its NCCL communicator and end the job, exit code 3, naming the stopped rank. Needs a
// GPU per rank (the emulator has 8); skipped otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

#include "backend/cuda/device.h"
#include "backend/dispatch.h"
#include "testing/bounded_run.h"
#include "testing/mpirun.h"

namespace mg {
namespace {

struct NcclCase {
  const char* name;
  const char* flags;
  int rank;
  const char* site;
};

void PrintTo(const NcclCase& c, std::ostream* os) { *os << c.name; }

class CudaNoHang : public ::testing::TestWithParam<NcclCase> {};

TEST_P(CudaNoHang, StoppedRankEndsTheNcclJobNamingIt) {
  std::string why;
  if (!ops::cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  if (!std::filesystem::exists(MG_MPIEXEC)) GTEST_SKIP() << "no " << MG_MPIEXEC;
  if (cuda::device_count() < 2)
    GTEST_SKIP() << "NCCL needs a GPU per rank; this machine has " << cuda::device_count();
  const NcclCase c = GetParam();
  const std::string stop = std::to_string(c.rank) + ":" + c.site + ":3";
  const testing::BoundedRun r = testing::run_bounded(
      "MG_FAULT_STOP=" + stop + " " + testing::mpirun_prefix(2) + MG_BINARY +
          " train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 2"
          " --seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 8"
          " --train-iters 6 --lr 1e-3 --log-interval 1 --device cuda --distributed-backend nccl"
          " --distributed-timeout-minutes 0.05 " +
          c.flags,
      180, "MG_FAULT_STOP: rank");
  ASSERT_FALSE(r.hit_limit) << "the job hung\n" << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.leftovers, 0);
  // The watchdog thread looks every tenth of the timeout: 3.0 to 3.3 s on an idle machine; the
  // report gives the time actually waited, which a loaded one stretches (never below 3 s).
  std::smatch waited;
  ASSERT_TRUE(std::regex_search(r.output, waited,
                                std::regex("timed out after ([0-9.]+) s "
                                           "\\(--distributed-timeout-minutes 0.05\\)")))
      << r.output;
  EXPECT_GE(std::stod(waited[1]), 3.0) << r.output;
  EXPECT_LT(std::stod(waited[1]), 6.0) << r.output;
  // The stopped rank among those that do not answer the census (see no_hang_test.cpp).
  const std::string k = std::to_string(c.rank);
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("not responding: (rank " + k +
                                             " \\(|ranks \\[([0-9]+,)*" + k + "(,[0-9]+)*\\])")))
      << r.output;
  // 3 s timeout + 1 s census grace + teardown.
  EXPECT_GT(r.after_marker, 2.5) << r.output;
  EXPECT_LT(r.after_marker, 10.0) << r.output;
  std::printf("%s: job ended %.2f s after the stop\n", c.name, r.after_marker);
}

INSTANTIATE_TEST_SUITE_P(
    , CudaNoHang,
    ::testing::Values(NcclCase{"tp2_sp_rank1_forward",
                               "--tensor-model-parallel-size 2 "
                               "--sequence-parallel",
                               1, "forward"},
                      NcclCase{"pp2_rank0_backward", "--pipeline-model-parallel-size 2", 0,
                               "backward"},
                      NcclCase{"dp2_distributed_optimizer_rank1_optimizer",
                               "--use-distributed-optimizer", 1, "optimizer"},
                      // DP buckets reduced during the backward: the stopped rank never joins
                      // them, the loss read behind them blocks, the watchdog thread aborts.
                      NcclCase{"dp2_overlap_grad_reduce_rank1_backward",
                               "--overlap-grad-reduce --ddp-bucket-size 10000", 1, "backward"}),
    [](const ::testing::TestParamInfo<NcclCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mg
