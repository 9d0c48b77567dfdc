// Training parity on the GPU (label gpu): a tiny GPT trained 20 steps with every buffer on the
// GPU (--device cuda) tracks the same run on the CPU, the oracle: f32 losses and grad norms
// within 1e-4 relative, bf16 within 2%. Checked through the model and optimizer API, and
// through `megatron train --device cuda` against `--device cpu` (the trainer, data and log
// path): one rank; TP, PP and the distributed optimizer as two ranks on one GPU; fp16 overflow
// skipping; checkpoints saved on one device and resumed on the other. Without a GPU every test
// reports SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/device.h"
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

// A Llama through every new op: RMSNorm, grouped-query attention (4 heads in 2 groups, head
// dim 32 with NH * HD != H), RoPE, --qk-layernorm, SwiGLU, no biases, untied output.
GPTConfig tiny_llama() {
  GPTConfig c = tiny_gpt();
  c.num_attention_heads = 4;
  c.kv_channels = 32;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.normalization = "RMSNorm";
  c.position_embedding_type = "rope";
  c.qk_layernorm = true;
  c.swiglu = true;
  c.ffn_hidden_size = 96;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  c.validate();
  return c;
}

struct Curve {
  std::vector<double> losses, norms;
};

// Trains 20 AdamW steps on `device` in `dtype`, the same batches every time (a fixed RNG).
Curve train(Device device, DType dtype, const GPTConfig& c = tiny_gpt()) {
  ops::set_device(device);
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

TEST(CudaTraining, LlamaF32TracksTheCpuWithin1e4) {
  MG_REQUIRE_GPU();
  expect_tracks(train(Device::CUDA, DType::F32, tiny_llama()),
                train(Device::CPU, DType::F32, tiny_llama()), 1e-4);
}

TEST(CudaTraining, LlamaBf16TracksTheCpuWithin2Percent) {
  MG_REQUIRE_GPU();
  expect_tracks(train(Device::CUDA, DType::BF16, tiny_llama()),
                train(Device::CPU, DType::BF16, tiny_llama()), 2e-2);
}

// The binary under test: $MG_BINARY (scripts/gpu-check.sh runs a packed copy), else the build's.
std::string megatron_binary() {
  const char* env = std::getenv("MG_BINARY");
  return env && *env ? env : MG_BINARY;
}

const std::string kTrainArgs =
    " train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 2"
    " --seq-length 64 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4"
    " --train-iters 20 --lr 1e-3 --log-interval 1 --attention-dropout 0 --hidden-dropout 0";

testing::RunResult run_ok(const std::string& command) {
  auto r = testing::run_command(command);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  return r;
}

// Every iteration's lm loss of `got` within rel_tol (relative) of `want`'s.
void expect_same_losses(const std::string& got, const std::string& want, size_t iterations,
                        double rel_tol = 1e-4) {
  const auto a = testing::log_values(got, "lm loss");
  const auto b = testing::log_values(want, "lm loss");
  ASSERT_EQ(a.size(), iterations) << got;
  ASSERT_EQ(b.size(), iterations) << want;
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_LE(std::fabs(a[i] - b[i]), rel_tol * b[i]) << "iteration " << i + 1;
}

// Runs `gpu_command` and the single-rank CPU run of kTrainArgs + cpu_flags; every iteration's
// lm loss must agree within rel_tol.
void expect_same_losses_as_cpu(const std::string& gpu_command, const std::string& cpu_flags = "",
                               double rel_tol = 1e-4) {
  const auto gpu = run_ok(gpu_command);
  const auto cpu = run_ok(megatron_binary() + kTrainArgs + " --device cpu " + cpu_flags);
  EXPECT_NE(gpu.output.find(" > device: cuda: "), std::string::npos) << gpu.output;
  expect_same_losses(gpu.output, cpu.output, 20, rel_tol);
}

TEST(CudaTraining, TrainCommandOnTheGpuMatchesTheCpu) {
  MG_REQUIRE_GPU();
  expect_same_losses_as_cpu(megatron_binary() + kTrainArgs + " --device cuda");
}

// With dropout on (0.1 / 0.1), the GPU draws the CPU's masks (core/dropout_mask.h):
// the same losses, on one GPU and with TP2 + SP on two ranks sharing it.
TEST(CudaTraining, DropoutOnTheGpuMatchesTheCpu) {
  MG_REQUIRE_GPU();
  const std::string drop = " --attention-dropout 0.1 --hidden-dropout 0.1";
  expect_same_losses_as_cpu(megatron_binary() + kTrainArgs + " --device cuda" + drop, drop);
  if (!std::filesystem::exists(MG_MPIEXEC)) return;  // the two-rank run needs mpirun
  expect_same_losses_as_cpu(testing::mpirun_prefix(2) + megatron_binary() + kTrainArgs +
                                " --device cuda --distributed-backend mpi"
                                " --tensor-model-parallel-size 2 --sequence-parallel" +
                                drop,
                            drop);
}

// --bf16 takes the tensor-core attention kernels, with the CPU's mask: the losses within 1e-3
// of the CPU's bf16 run (2e-5 on the emulator). Attention dropout 0.5 moves them by more than
// that (3e-3 against the same run without it), so a kernel ignoring the mask fails.
TEST(CudaTraining, Bf16AttentionDropoutOnTheGpuMatchesTheCpu) {
  MG_REQUIRE_GPU();
  const std::string bf16 = " --bf16 --hidden-dropout 0.1 --attention-dropout ";
  const auto gpu = run_ok(megatron_binary() + kTrainArgs + " --device cuda" + bf16 + "0.5");
  const auto cpu = run_ok(megatron_binary() + kTrainArgs + " --device cpu" + bf16 + "0.5");
  const auto undropped = run_ok(megatron_binary() + kTrainArgs + " --device cpu" + bf16 + "0");
  expect_same_losses(gpu.output, cpu.output, 20, 1e-3);
  const auto a = testing::log_values(cpu.output, "lm loss");
  const auto b = testing::log_values(undropped.output, "lm loss");
  ASSERT_EQ(a.size(), b.size());
  double moved = 0;
  for (size_t i = 0; i < a.size(); ++i) moved = std::max(moved, std::fabs(a[i] - b[i]) / b[i]);
  EXPECT_GT(moved, 2e-3) << "attention dropout must move the losses by more than the tolerance";
}

// The test name of a two-rank layout's flags: tp2, tp2_sp, pp2 or dp2_distributed_optimizer.
std::string layout_name(const ::testing::TestParamInfo<std::string>& info) {
  const std::string& f = info.param;
  std::string n = f.find("--tensor-model-parallel-size 2") != std::string::npos     ? "tp2"
                  : f.find("--pipeline-model-parallel-size 2") != std::string::npos ? "pp2"
                                                                                    : "dp2";
  if (f.find("--sequence-parallel") != std::string::npos) n += "_sp";
  if (f.find("--use-distributed-optimizer") != std::string::npos) n += "_distributed_optimizer";
  return n;
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
                                           "--pipeline-model-parallel-size 2",
                                           "--use-distributed-optimizer"),
                         layout_name);

// The same layouts over NCCL (the default on GPUs), one GPU per rank: needs two GPUs (the
// emulator has 8; a one-GPU machine skips).
class CudaNcclLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaNcclLayouts, OneGpuPerRankTracksTheSingleRankCpuRun) {
  MG_REQUIRE_GPU();
  if (!std::filesystem::exists(MG_MPIEXEC))
    GTEST_SKIP() << "no " << MG_MPIEXEC << " on this machine: the two-rank GPU runs need mpirun";
  if (cuda::device_count() < 2)
    GTEST_SKIP() << "NCCL needs a GPU per rank; this machine has " << cuda::device_count();
  expect_same_losses_as_cpu(testing::mpirun_prefix(2) + megatron_binary() + kTrainArgs +
                            " --device cuda --distributed-backend nccl " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(, CudaNcclLayouts,
                         ::testing::Values("--tensor-model-parallel-size 2 --sequence-parallel",
                                           "--pipeline-model-parallel-size 2",
                                           "--use-distributed-optimizer"),
                         layout_name);

// --grad-reduce-in-bf16 over NCCL (ncclBfloat16 sums, one GPU per rank) tracks the same DP2 run
// on the CPU (MPI's bf16 sum), with the plain and the distributed optimizer, at the same bytes.
TEST(CudaTraining, GradReduceInBf16OverNcclTracksTheCpu) {
  MG_REQUIRE_GPU();
  if (!std::filesystem::exists(MG_MPIEXEC))
    GTEST_SKIP() << "no " << MG_MPIEXEC << " on this machine: the two-rank GPU runs need mpirun";
  if (cuda::device_count() < 2)
    GTEST_SKIP() << "NCCL needs a GPU per rank; this machine has " << cuda::device_count();
  for (const std::string flags :
       {" --grad-reduce-in-bf16",
        " --grad-reduce-in-bf16 --use-distributed-optimizer --overlap-grad-reduce"}) {
    const std::string run = testing::mpirun_prefix(2) + megatron_binary() + kTrainArgs + flags;
    const auto gpu = run_ok(run + " --device cuda --distributed-backend nccl");
    const auto cpu = run_ok(run + " --device cpu");
    expect_same_losses(gpu.output, cpu.output, 20);
    EXPECT_EQ(testing::log_values(gpu.output, "dp comm bytes"),
              testing::log_values(cpu.output, "dp comm bytes"));
  }
}

// Two ranks on one GPU over NCCL stop at startup with the flag and the way out (NCCL would
// refuse the communicator later, or hang).
TEST(CudaTraining, NcclRefusesTwoRanksOnOneGpu) {
  MG_REQUIRE_GPU();
  if (!std::filesystem::exists(MG_MPIEXEC))
    GTEST_SKIP() << "no " << MG_MPIEXEC << " on this machine: the two-rank GPU runs need mpirun";
  const auto r = testing::run_command("CUDA_VISIBLE_DEVICES=0 " + testing::mpirun_prefix(2) +
                                      megatron_binary() + kTrainArgs +
                                      " --device cuda --distributed-backend nccl"
                                      " --tensor-model-parallel-size 2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--distributed-backend nccl needs a GPU per rank"), std::string::npos)
      << r.output;
}

// fp16 with an inf injected into the grads at iteration 3: the GPU run skips that step and
// halves the loss scale exactly as the CPU run does, and the losses track it (fp16: 2%).
TEST(CudaTraining, Fp16OverflowSkipsTheStepLikeTheCpu) {
  MG_REQUIRE_GPU();
  const std::string fp16 =
      " --fp16 --initial-loss-scale 1024 --hysteresis 1"
      " --loss-scale-window 4 --inject-grad-overflow 3";
  const auto gpu = run_ok(megatron_binary() + kTrainArgs + " --device cuda" + fp16);
  const auto cpu = run_ok(megatron_binary() + kTrainArgs + " --device cpu" + fp16);
  EXPECT_NE(gpu.output.find("iteration 3: inf/NaN in the fp16 grads, step skipped on all ranks"),
            std::string::npos)
      << gpu.output;
  EXPECT_EQ(testing::log_values(gpu.output, "loss scale"),
            testing::log_values(cpu.output, "loss scale"));
  expect_same_losses(gpu.output, cpu.output, 20, 2e-2);
}

// Checkpoints between devices: 10 steps on one device, saved (--exit-interval 10), then loaded
// and trained to 20 on the other (or the same); iterations 11-20 must match the uninterrupted
// CPU run within 1e-4, so what the GPU saved and what it loaded are the CPU's values.
class CudaCheckpoints : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(CudaCheckpoints, ResumeTracksTheUninterruptedCpuRun) {
  MG_REQUIRE_GPU();
  const auto [save_device, load_device] = GetParam();
  char tmpl[] = "/tmp/mg_cuda_ckpt_XXXXXX";
  const std::string dir = std::string(mkdtemp(tmpl)) + "/ck";
  const std::string base = megatron_binary() + kTrainArgs;
  run_ok(base + " --device " + save_device + " --save " + dir + " --exit-interval 10");
  const auto resumed = run_ok(base + " --device " + load_device + " --load " + dir);
  const auto full = run_ok(base + " --device cpu");
  EXPECT_NE(resumed.output.find("loaded checkpoint"), std::string::npos) << resumed.output;
  auto last10 = testing::log_values(full.output, "lm loss");
  ASSERT_EQ(last10.size(), 20u);
  last10.erase(last10.begin(), last10.begin() + 10);
  const auto got = testing::log_values(resumed.output, "lm loss");
  ASSERT_EQ(got.size(), 10u) << resumed.output;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::fabs(got[i] - last10[i]), 1e-4 * last10[i]) << "iteration " << i + 11;
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

INSTANTIATE_TEST_SUITE_P(, CudaCheckpoints,
                         ::testing::Values(std::pair{"cuda", "cpu"}, std::pair{"cpu", "cuda"},
                                           std::pair{"cuda", "cuda"}),
                         [](const auto& info) {
                           return info.param.first + "_to_" + info.param.second;
                         });

}  // namespace
}  // namespace mg
