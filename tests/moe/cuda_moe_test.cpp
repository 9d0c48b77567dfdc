// Mixture-of-experts on the GPU (label gpu; cuda-emu in the emulator build): the token movement
// ops (gather_rows, combine_rows, combine_rows_backward) against their CPU twins, and a small
// Mixtral-style model trained with `megatron train --device cuda` against the same run on the
// CPU, the oracle: every iteration's lm loss, load_balancing_loss and z_loss within 1e-4
// relative (f32), bf16 within 2%, dropped-token counts equal; TP 2 with SP and EP 2 (both
// dispatchers) as two ranks on one GPU and over NCCL. Without a GPU every test reports SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "testing/require_gpu.h"
#include "backend/cuda/ops.h"
#include "backend/ops.h"
#include "testing/mpirun.h"

namespace mg {
namespace {

template <typename T>
cuda::Buffer up(const std::vector<T>& h) {
  cuda::Buffer b(std::max<size_t>(1, h.size()) * sizeof(T));
  if (!h.empty()) cuda::copy_to_device(b.get(), h.data(), h.size() * sizeof(T));
  return b;
}
std::vector<float> down(const cuda::Buffer& b, size_t n) {
  std::vector<float> h(n);
  if (n) cuda::copy_to_host(h.data(), b.get(), n * sizeof(float));
  return h;
}
std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}
void expect_near_all(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol,
                     const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    worst = std::max(worst, std::fabs(double(gpu[i]) - double(cpu[i])) /
                                std::max(1.0, std::fabs(double(cpu[i]))));
  std::printf("  %-24s max err %.3e\n", what, worst);
  EXPECT_LE(worst, tol) << what;
}

// T tokens x k slots routed over rows: some slots dropped (-1), the rest a permutation of the
// rows; H = 70 (a tail for every block size).
TEST(CudaParity, MoeTokenMovement) {
  MG_REQUIRE_GPU();
  const int64_t T = 37, k = 2, H = 70;
  std::mt19937 gen(3);
  std::vector<int32_t> slots;
  for (int32_t s = 0; s < int32_t(T * k); ++s)
    if (s % 7 != 3) slots.push_back(s);  // every 7th slot dropped
  std::shuffle(slots.begin(), slots.end(), gen);
  const int64_t n = int64_t(slots.size());
  std::vector<int32_t> row_token(static_cast<size_t>(n)), slot_row(static_cast<size_t>(T * k), -1);
  for (int64_t i = 0; i < n; ++i) {
    row_token[size_t(i)] = slots[size_t(i)] / int32_t(k);
    slot_row[size_t(slots[size_t(i)])] = int32_t(i);
  }
  const auto x = random_vec(size_t(T * H), 1), rows = random_vec(size_t(n * H), 2),
             weights = random_vec(size_t(T * k), 3), dout = random_vec(size_t(T * H), 4),
             base = random_vec(size_t(T * H), 5);
  const auto d_x = up(x), d_rows = up(rows), d_w = up(weights), d_dout = up(dout),
             d_token = up(row_token), d_slot = up(slots), d_slot_row = up(slot_row);
  const auto* tok = static_cast<const int32_t*>(d_token.get());
  const auto* slot = static_cast<const int32_t*>(d_slot.get());
  const auto* srow = static_cast<const int32_t*>(d_slot_row.get());

  std::vector<float> g_cpu(size_t(n * H));
  cpu::gather_rows(g_cpu.data(), x.data(), row_token.data(), n, H, DType::F32);
  cuda::Buffer g(size_t(n * H) * 4);
  cuda::gather_rows(g.get(), d_x.get(), tok, n, H, DType::F32);
  expect_near_all(down(g, size_t(n * H)), g_cpu, 0, "gather_rows");

  for (bool acc : {false, true})
    for (bool weighted : {true, false}) {
      std::vector<float> c_cpu = base;
      cpu::combine_rows(c_cpu.data(), rows.data(), slot_row.data(),
                        weighted ? weights.data() : nullptr, T, k, H, acc);
      const auto c = up(base);
      cuda::combine_rows(static_cast<float*>(c.get()), static_cast<const float*>(d_rows.get()),
                         srow, weighted ? static_cast<const float*>(d_w.get()) : nullptr, T, k, H,
                         acc);
      expect_near_all(down(c, size_t(T * H)), c_cpu, 1e-6, "combine_rows");
    }

  std::vector<float> dr_cpu(size_t(n * H)), dw_cpu(size_t(T * k), 0.f);
  cpu::combine_rows_backward(dr_cpu.data(), dw_cpu.data(), rows.data(), dout.data(),
                             row_token.data(), slots.data(), weights.data(), n, H);
  cuda::Buffer dr(size_t(n * H) * 4);
  const auto dw = up(std::vector<float>(size_t(T * k), 0.f));
  cuda::combine_rows_backward(static_cast<float*>(dr.get()), static_cast<float*>(dw.get()),
                              static_cast<const float*>(d_rows.get()),
                              static_cast<const float*>(d_dout.get()), tok, slot,
                              static_cast<const float*>(d_w.get()), n, H);
  expect_near_all(down(dr, size_t(n * H)), dr_cpu, 0, "combine_rows_backward rows");
  expect_near_all(down(dw, size_t(T * k)), dw_cpu, 1e-5, "combine_rows_backward weights");
  for (int32_t s = 3; s < int32_t(T * k); s += 7)
    EXPECT_EQ(down(dw, size_t(T * k))[size_t(s)], 0.f) << "a dropped slot's gradient stays";
}

std::string megatron_binary() {
  const char* env = std::getenv("MG_BINARY");
  return env && *env ? env : MG_BINARY;
}

// 4 experts, top-2, SwiGLU, a shared expert, aux and z losses; head dim 32 (the CUDA
// attention's sizes).
const std::string kMoeArgs =
    " train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 2"
    " --seq-length 64 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4"
    " --train-iters 12 --lr 1e-3 --log-interval 1 --attention-dropout 0 --hidden-dropout 0"
    " --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear"
    " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64"
    " --moe-shared-expert-intermediate-size 32 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3";

testing::RunResult run_ok(const std::string& command) {
  auto r = testing::run_command(command);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  return r;
}

// Every iteration's losses within tol (relative), and the dropped-token counts (logged with a
// capacity factor) equal.
void expect_same_curves(const std::string& gpu, const std::string& cpu, double tol, bool dropping) {
  for (const char* field : {"lm loss", "load_balancing_loss", "z_loss", "dropped tokens"}) {
    const bool counts = std::string(field) == "dropped tokens";
    const size_t want = !counts || dropping ? 12u : 0u;
    const auto a = testing::log_values(gpu, field), b = testing::log_values(cpu, field);
    ASSERT_EQ(a.size(), want) << field << "\n" << gpu;
    ASSERT_EQ(b.size(), want) << field << "\n" << cpu;
    for (size_t i = 0; i < b.size(); ++i)
      EXPECT_LE(std::fabs(a[i] - b[i]), counts ? 0.0 : tol * std::fabs(b[i]))
          << field << " iteration " << i + 1;
  }
}

// gpu_flags: the GPU run's own (its layout); flags: both runs'.
void expect_gpu_tracks_cpu(const std::string& gpu_prefix, const std::string& gpu_flags,
                           const std::string& flags, double tol) {
  const auto gpu =
      run_ok(gpu_prefix + megatron_binary() + kMoeArgs + flags + " --device cuda " + gpu_flags);
  const auto cpu = run_ok(megatron_binary() + kMoeArgs + flags + " --device cpu");
  EXPECT_NE(gpu.output.find(" > device: cuda: "), std::string::npos) << gpu.output;
  expect_same_curves(gpu.output, cpu.output, tol,
                     flags.find("--moe-expert-capacity-factor") != std::string::npos);
}

TEST(CudaMoe, TrainsLikeTheCpu) {
  MG_REQUIRE_GPU();
  expect_gpu_tracks_cpu("", "", "", 1e-4);
}

TEST(CudaMoe, CapacityDroppingLikeTheCpu) {
  MG_REQUIRE_GPU();
  expect_gpu_tracks_cpu("", "", " --moe-expert-capacity-factor 0.75", 1e-4);
}

// The grouped kernels (one launch per GEMM kind over all experts) against the CPU's
// per-expert calls.
TEST(CudaMoe, GroupedGemmLikeTheCpu) {
  MG_REQUIRE_GPU();
  expect_gpu_tracks_cpu("", "--moe-grouped-gemm", "", 1e-4);
}

TEST(CudaMoe, Bf16TracksTheCpuWithin2Percent) {
  MG_REQUIRE_GPU();
  expect_gpu_tracks_cpu("", "", " --bf16", 2e-2);
}

TEST(CudaMoe, TensorParallelOnOneGpuAndOverNccl) {
  MG_REQUIRE_GPU();
  if (!std::filesystem::exists(MG_MPIEXEC))
    GTEST_SKIP() << "no " << MG_MPIEXEC << " on this machine: the two-rank runs need mpirun";
  const std::string tp = " --tensor-model-parallel-size 2 --sequence-parallel";
  expect_gpu_tracks_cpu(testing::mpirun_prefix(2), "--distributed-backend mpi" + tp, "", 1e-4);
  if (cuda::device_count() >= 2)
    expect_gpu_tracks_cpu(testing::mpirun_prefix(2), "--distributed-backend nccl" + tp, "", 1e-4);
}

// Expert parallelism: the dispatchers' exchanges (counts, rows, and allgather's routing) on
// GPU buffers, over MPI (staged through the host; two ranks on one GPU) and NCCL.
TEST(CudaMoe, ExpertParallelOnOneGpuAndOverNccl) {
  MG_REQUIRE_GPU();
  if (!std::filesystem::exists(MG_MPIEXEC))
    GTEST_SKIP() << "no " << MG_MPIEXEC << " on this machine: the multi-rank runs need mpirun";
  const std::string ep = " --expert-model-parallel-size 2 --moe-token-dispatcher-type ";
  expect_gpu_tracks_cpu(testing::mpirun_prefix(2), "--distributed-backend mpi" + ep + "alltoall",
                        "", 1e-4);
  if (cuda::device_count() < 4) GTEST_SKIP() << "NCCL needs a GPU per rank";
  expect_gpu_tracks_cpu(testing::mpirun_prefix(2), "--distributed-backend nccl" + ep + "allgather",
                        "", 1e-4);
  expect_gpu_tracks_cpu(testing::mpirun_prefix(4),
                        "--distributed-backend nccl --tensor-model-parallel-size 2 "
                        "--sequence-parallel" +
                            ep + "alltoall",
                        "", 1e-4);
}

// Parallel folding (an expert TP other than TP): each TP rank's share of the tokens over the
// experts' ETP x EP group, on GPU buffers: whole experts over EP 2 under TP 2 + SP (alltoall),
// and each expert split over ETP 2 under TP 1 (allgather), over MPI; the first over NCCL too.
TEST(CudaMoe, ParallelFoldingOnOneGpuAndOverNccl) {
  MG_REQUIRE_GPU();
  if (!std::filesystem::exists(MG_MPIEXEC))
    GTEST_SKIP() << "no " << MG_MPIEXEC << " on this machine: the two-rank runs need mpirun";
  const std::string etp1 =
      " --tensor-model-parallel-size 2 --sequence-parallel"
      " --expert-tensor-parallel-size 1 --expert-model-parallel-size 2"
      " --moe-token-dispatcher-type alltoall";
  const std::string etp2 = " --expert-tensor-parallel-size 2 --moe-token-dispatcher-type allgather";
  expect_gpu_tracks_cpu(testing::mpirun_prefix(2), "--distributed-backend mpi" + etp1, "", 1e-4);
  expect_gpu_tracks_cpu(testing::mpirun_prefix(2), "--distributed-backend mpi" + etp2, "", 1e-4);
  if (cuda::device_count() < 2) GTEST_SKIP() << "NCCL needs a GPU per rank";
  expect_gpu_tracks_cpu(testing::mpirun_prefix(2), "--distributed-backend nccl" + etp1, "", 1e-4);
}

}  // namespace
}  // namespace mg
