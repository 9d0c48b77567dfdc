// Training parity on the GPU (label gpu): a tiny GPT trained 20 steps with every buffer on the
// GPU (--device cuda) tracks the same run on the CPU, the oracle: f32 losses and grad norms
// within 1e-4 relative, bf16 within 2%. Checked twice: through the model and optimizer API,
// and through `megatron train --device cuda` against `--device cpu` (the trainer, data and
// log path). Without a GPU every test reports SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/dispatch.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "testing/mpirun.h"

namespace mg {
namespace {

#define MG_REQUIRE_GPU()                                                       \
  do {                                                                         \
    std::string why;                                                           \
    if (!ops::cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

// Head dim 32: a size the CUDA flash-attention kernels take.
GPTConfig tiny_gpt() {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 2;
  c.seq_length = 32;
  c.vocab_size = 100;
  c.make_vocab_size_divisible_by = 128;
  return c;
}

struct Curve {
  std::vector<double> losses, norms;
};

// Trains 20 AdamW steps on `device` in `dtype`, the same batches every time (a fixed RNG).
Curve train(Device device, DType dtype) {
  ops::set_device(device);
  const GPTConfig c = tiny_gpt();
  const int64_t B = 2, S = c.seq_length, N = B * S;
  StageSpec spec;
  spec.dtype = dtype;
  Curve out;
  {
    GPTModel m(c, B, spec);
    m.init(1234);
    OptimizerConfig oc;
    Optimizer opt(m.layout(), oc, m.dtype(), m.param_data());
    std::mt19937 gen(7);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(c.vocab_size) - 1);
    std::vector<int32_t> tokens(N), pos(N), labels(N);
    std::vector<float> mask(N, 1.f);
    for (int step = 0; step < 20; ++step) {
      for (int64_t i = 0; i < N; ++i) {
        tokens[size_t(i)] = tok(gen);
        labels[size_t(i)] = tok(gen);
        pos[size_t(i)] = int32_t(i % S);
      }
      mask[size_t(step % N)] = 0.f;  // some masked tokens, different each step
      m.zero_grads();
      const double loss = m.forward(0, {tokens.data(), pos.data(), labels.data(), mask.data()});
      m.backward(0, nullptr, 1.f);
      const double norm = std::sqrt(ops::sum_squares(m.grads(), m.num_params()));
      opt.step(m.param_data(), m.grads(), 1e-3f, oc.weight_decay, norm);
      out.losses.push_back(loss);
      out.norms.push_back(norm);
    }
  }
  ops::set_device(Device::CPU);
  return out;
}

void expect_tracks(const Curve& gpu, const Curve& cpu, double tol) {
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  double worst_loss = 0, worst_norm = 0;
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    worst_loss = std::max(worst_loss, std::fabs(gpu.losses[i] - cpu.losses[i]) / cpu.losses[i]);
    worst_norm = std::max(worst_norm, std::fabs(gpu.norms[i] - cpu.norms[i]) / cpu.norms[i]);
    EXPECT_LE(std::fabs(gpu.losses[i] - cpu.losses[i]), tol * cpu.losses[i]) << "step " << i;
    EXPECT_LE(std::fabs(gpu.norms[i] - cpu.norms[i]), tol * cpu.norms[i]) << "step " << i;
  }
  std::printf("20 steps: loss %.6f -> %.6f (cpu), worst relative diff loss %.2e, grad norm %.2e\n",
              cpu.losses.front(), cpu.losses.back(), worst_loss, worst_norm);
  EXPECT_LT(cpu.losses.back(), cpu.losses.front()) << "the run must learn something";
}

TEST(CudaTraining, F32TracksTheCpuWithin1e4) {
  MG_REQUIRE_GPU();
  expect_tracks(train(Device::CUDA, DType::F32), train(Device::CPU, DType::F32), 1e-4);
}

TEST(CudaTraining, Bf16TracksTheCpuWithin2Percent) {
  MG_REQUIRE_GPU();
  expect_tracks(train(Device::CUDA, DType::BF16), train(Device::CPU, DType::BF16), 2e-2);
}

// The binary under test: $MG_BINARY (scripts/gpu-check.sh runs a packed copy), else the build's.
std::string megatron_binary() {
  const char* env = std::getenv("MG_BINARY");
  return env && *env ? env : MG_BINARY;
}

const std::string kTrainArgs =
    " train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 2"
    " --seq-length 64 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4"
    " --train-iters 20 --lr 1e-3 --log-interval 1";

// Runs `gpu_command` and the single-rank CPU run of kTrainArgs; every iteration's lm loss must
// agree within 1e-4 relative.
void expect_same_losses_as_cpu(const std::string& gpu_command) {
  const auto gpu = testing::run_command(gpu_command);
  const auto cpu = testing::run_command(megatron_binary() + kTrainArgs + " --device cpu");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(gpu.output.find(" > device: cuda: "), std::string::npos) << gpu.output;
  const auto a = testing::log_values(gpu.output, "lm loss");
  const auto b = testing::log_values(cpu.output, "lm loss");
  ASSERT_EQ(a.size(), 20u) << gpu.output;
  ASSERT_EQ(b.size(), 20u) << cpu.output;
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_LE(std::fabs(a[i] - b[i]), 1e-4 * b[i]) << "iteration " << i + 1;
}

TEST(CudaTraining, TrainCommandOnTheGpuMatchesTheCpu) {
  MG_REQUIRE_GPU();
  expect_same_losses_as_cpu(megatron_binary() + kTrainArgs + " --device cuda");
}

// TP = 2 and PP = 2 on one GPU: two ranks share it through --distributed-backend mpi (GPU
// buffers staged through host memory), against the single-rank CPU run.
class CudaLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaLayouts, TwoRanksOnOneGpuTrackTheSingleRankCpuRun) {
  MG_REQUIRE_GPU();
  if (!std::filesystem::exists(MG_MPIEXEC))
    GTEST_SKIP() << "no " << MG_MPIEXEC << " on this machine: the two-rank GPU runs need mpirun";
  expect_same_losses_as_cpu(testing::mpirun_prefix(2) + megatron_binary() + kTrainArgs +
                            " --device cuda --distributed-backend mpi " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(, CudaLayouts,
                         ::testing::Values("--tensor-model-parallel-size 2",
                                           "--pipeline-model-parallel-size 2"),
                         [](const auto& info) { return info.index == 0 ? "tp2" : "pp2"; });

}  // namespace
}  // namespace mg
