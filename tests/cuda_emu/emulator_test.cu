// The CUDA emulator's own rules (tests/cuda_emu/README.md), against closed forms: warp shuffles,
// block barriers and shared memory, __syncthreads_or, WMMA against a double loop, launch limits,
// checked copies, and a divergent barrier reported as a deadlock instead of a hang.
#include <gtest/gtest.h>
#include <mma.h>

#include <cmath>
#include <vector>

namespace {

template <typename T>
T* device_array(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}
template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

__global__ void warp_sum_kernel(int* out) {
  int v = int(threadIdx.x % 32) + 100 * int(threadIdx.x / 32);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

TEST(CudaEmu, ButterflyShuffleSumsEachWarp) {
  int* d = device_array<int>(96);
  warp_sum_kernel<<<1, 96>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto h = to_host(d, 96);
  for (int t = 0; t < 96; ++t) EXPECT_EQ(h[t], 496 + 3200 * (t / 32)) << "thread " << t;
  cudaFree(d);
}

// Each block reverses its slice through shared memory; without the barrier, a thread would read
// a slot its partner has not written yet (the emulator runs threads one after another).
__global__ void reverse_kernel(int* out, const int* in) {
  __shared__ int s[256];
  const int i = blockIdx.x * 256 + threadIdx.x;
  s[threadIdx.x] = in[i];
  __syncthreads();
  out[i] = s[255 - threadIdx.x];
}

TEST(CudaEmu, BarrierOrdersSharedMemoryWithinEachBlock) {
  std::vector<int> h(3 * 256);
  for (size_t i = 0; i < h.size(); ++i) h[i] = int(i * 7 + 1);
  int *in = device_array<int>(h.size()), *out = device_array<int>(h.size());
  ASSERT_EQ(cudaMemcpy(in, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  reverse_kernel<<<3, 256>>>(out, in);
  const auto got = to_host(out, h.size());
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 256; ++t) EXPECT_EQ(got[b * 256 + t], h[b * 256 + 255 - t]);
  cudaFree(in);
  cudaFree(out);
}

__global__ void any_kernel(int* out, int who) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = __syncthreads_or(int(threadIdx.x) == who);
}

TEST(CudaEmu, SyncthreadsOrSeesEveryThreadOfTheBlock) {
  int* d = device_array<int>(2 * 128);
  for (int who : {77, -1}) {
    any_kernel<<<2, 128>>>(d, who);
    for (int v : to_host(d, 256)) EXPECT_EQ(v, who >= 0 ? 1 : 0) << "who " << who;
  }
  cudaFree(d);
}

__global__ void wmma_kernel(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

TEST(CudaEmu, WmmaProductMatchesADoubleLoop) {
  std::vector<__nv_bfloat16> a(256), b(256);
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2bfloat16_rn(std::sin(0.37f * float(i)));
    b[i] = __float2bfloat16_rn(std::cos(0.11f * float(i)));
  }
  auto* da = device_array<__nv_bfloat16>(256);
  auto* db = device_array<__nv_bfloat16>(256);
  float* dc = device_array<float>(256);
  cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), 512, cudaMemcpyHostToDevice);
  wmma_kernel<<<1, 32>>>(dc, da, db);
  const auto c = to_host(dc, 256);
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      double ref = 1.0;  // b col_major: element (k, col) at b[col * 16 + k]
      for (int k = 0; k < 16; ++k) ref += double(float(a[r * 16 + k])) * float(b[col * 16 + k]);
      EXPECT_NEAR(c[r * 16 + col], ref, 1e-5) << r << "," << col;
    }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

__global__ void nothing_kernel() {}

TEST(CudaEmu, LaunchesAndCopiesOutsideTheLimitsFail) {
  nothing_kernel<<<1, 2048>>>();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  nothing_kernel<<<1, 32, 300 << 10>>>();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the error was taken
  float* d = device_array<float>(4);
  float h[8] = {};
  EXPECT_EQ(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h, h + 4, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h[0])) << "fresh device memory reads as NaN";
  cudaFree(d);
}

// Half a warp waits at __syncwarp, the other half at __syncthreads: on a GPU this hangs.
__global__ void divergent_kernel() {
  if (threadIdx.x < 16) __syncwarp();
  else __syncthreads();
}

TEST(CudaEmuDeathTest, DivergentBarrierIsReportedNotHung) {
  EXPECT_DEATH(divergent_kernel<<<1, 32>>>(), "deadlock in block \\(0,0,0\\): warp 0 \\[at "
                                              "__syncwarp/shuffle .*at __syncthreads");
}

}  // namespace
