// Optimizer kernels over the flat fp32 buffers: AdamW (torch.optim.AdamW's formula, as the CPU)
// and SGD with momentum, each reading the gradient times the global-norm clip factor so that
// clipping needs no pass of its own; the sum of squares for the grad norm, reduced in double
// in a fixed order (per-block partials, then one block) so it is bitwise reproducible.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"

namespace mg::cuda {

namespace {

constexpr int kPartials = 1024;  // blocks of the first reduction pass

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n,
                             float beta1, float beta2, float eps, float step, float decay,
                             float bc2_sqrt, float clip) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * clip;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

__global__ void sgd_kernel(float* p, const float* g, float* buf, int64_t n, float lr,
                           float momentum, float wd, bool first, float clip) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * clip + wd * p[i];
    const float b = first ? gi : momentum * buf[i] + gi;
    buf[i] = b;
    p[i] -= lr * b;
  }
}

__device__ double block_sum(double v) {
  __shared__ double part[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  double r = 0;
  for (int i = 0; i < kThreads / 32; ++i) r += part[i];
  __syncthreads();  // part may be reused by a later call
  return r;
}

__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * double(x[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void masked_mean_kernel(double* acc, const float* losses, const float* mask, int64_t n,
                                   double mask_sum) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += double(losses[i]) * mask[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *acc += s / mask_sum;
}

__global__ void sum_partials_kernel(double* out, const double* partial, int n) {
  double s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  float clip) {
  if (n == 0) return;
  // The same host-side scalars as the CPU kernel, so both compute with identical constants.
  const float bc1 = 1.0f - std::pow(beta1, float(t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(beta2, float(t)));
  adamw_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(
      param, grad, m, v, n, beta1, beta2, eps, lr / bc1, 1.0f - lr * weight_decay, bc2_sqrt,
      clip);
  MG_CUDA_CHECK(cudaGetLastError());
}

void sgd_update(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                float weight_decay, int64_t t, float clip) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, compute_stream()>>>(param, grad, buf, n, lr, momentum,
                                                               weight_decay, t == 1, clip);
  MG_CUDA_CHECK(cudaGetLastError());
}

namespace {
// Sum of squares of x[0, n) into *out on the device (two fixed-order passes). The first pass
// has a block per kThreads elements up to kPartials blocks: a bias or LayerNorm weight of 1280
// values takes 5 blocks, not 1024 mostly idle ones (the grad norm runs this once per tensor).
void sum_squares_into(double* out, const float* x, int64_t n) {
  static Buffer partial(kPartials * sizeof(double));
  const int blocks = int(std::min<int64_t>(kPartials, (n + kThreads - 1) / kThreads));
  sum_squares_partial_kernel<<<blocks, kThreads, 0, compute_stream()>>>(
      partial.as<double>(), x, n);
  MG_CUDA_CHECK(cudaGetLastError());
  sum_partials_kernel<<<1, kThreads, 0, compute_stream()>>>(out, partial.as<double>(), blocks);
  MG_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void masked_mean_accumulate(double* acc, const float* losses, const float* mask, int64_t n,
                            double mask_sum) {
  if (mask_sum <= 0) return;
  masked_mean_kernel<<<1, kThreads, 0, compute_stream()>>>(acc, losses, mask, n, mask_sum);
  MG_CUDA_CHECK(cudaGetLastError());
}

double sum_squares(const float* x, int64_t n) {
  if (n == 0) return 0;
  static Buffer total(sizeof(double));
  sum_squares_into(total.as<double>(), x, n);
  double host = 0;
  copy_to_host(&host, total.get(), sizeof(double));
  return host;
}

double sum_squares_ranges(const float* x, const cpu::Range* ranges, int64_t k) {
  if (k == 0) return 0;
  Buffer sums(size_t(k) * sizeof(double));
  MG_CUDA_CHECK(cudaMemsetAsync(sums.get(), 0, size_t(k) * sizeof(double), compute_stream()));
  for (int64_t i = 0; i < k; ++i)
    if (ranges[i].n > 0) sum_squares_into(sums.as<double>() + i, x + ranges[i].offset, ranges[i].n);
  std::vector<double> host(static_cast<size_t>(k));
  copy_to_host(host.data(), sums.get(), size_t(k) * sizeof(double));
  double s = 0;
  for (double v : host) s += v;
  return s;
}

}  // namespace mg::cuda
