// Fused softmax + cross-entropy over the (vocab-parallel) logits, one block per row: the row
// maximum, the sum of exp(logit - shift) and the target logit are the pieces a vocab-parallel
// loss combines across TP ranks; the full-row loss keeps only lse[N]. The gradient overwrites
// the logits in place, so probabilities are never stored beside them.
#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"

namespace mg::cuda {

namespace {

constexpr int kRowThreads = 512;

// Block-wide reduction of one value per thread (op: max or sum), result to every thread.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float part[kRowThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = kMax ? -INFINITY : 0.f;
  for (int i = 0; i < kRowThreads / 32; ++i) r = kMax ? fmaxf(r, part[i]) : r + part[i];
  __syncthreads();  // part is reused by the next reduction
  return r;
}

__global__ void row_max_kernel(float* row_max, const float* logits, int64_t V) {
  const float* row = logits + blockIdx.x * V;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += kRowThreads) m = fmaxf(m, row[j]);
  m = block_reduce<true>(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void sum_exp_kernel(float* sum_exp, const float* logits, const float* shift,
                               int64_t V) {
  const float* row = logits + blockIdx.x * V;
  const float sh = shift[blockIdx.x];
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += kRowThreads) s += expf(row[j] - sh);
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) sum_exp[blockIdx.x] = s;
}

__global__ void target_logit_kernel(float* target_logit, const float* logits,
                                    const int32_t* targets, int64_t v_begin, int64_t N,
                                    int64_t V) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  const int64_t t = int64_t(targets[n]) - v_begin;
  target_logit[n] = targets[n] >= 0 && t >= 0 && t < V ? logits[n * V + t] : 0.f;
}

__global__ void combine_kernel(float* losses, float* lse, const float* row_max,
                               const float* sum_exp, const int32_t* targets, int64_t N) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  lse[n] = row_max[n] + logf(sum_exp[n]);
  losses[n] = targets[n] < 0 ? 0.f : lse[n] - losses[n];
}

__global__ void loss_kernel(float* losses, float* lse, const float* logits,
                            const int32_t* targets, int64_t V) {
  const int64_t n = blockIdx.x;
  const float* row = logits + n * V;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += kRowThreads) m = fmaxf(m, row[j]);
  m = block_reduce<true>(m);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += kRowThreads) s += expf(row[j] - m);
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) {
    const float l = m + logf(s);
    lse[n] = l;
    // As the CPU: a target outside [0, V) contributes a target logit of 0.
    const int64_t t = targets[n];
    losses[n] = t < 0 ? 0.f : l - (t < V ? row[t] : 0.f);
  }
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits,
                                              const float* lse, const int32_t* targets,
                                              const float* dlosses, int64_t v_begin, int64_t V) {
  const int64_t n = blockIdx.x;
  const float d = targets[n] < 0 ? 0.f : dlosses[n];
  const float l = lse[n];
  const int64_t t = int64_t(targets[n]) - v_begin;
  const float* row = logits + n * V;
  float* drow = dlogits + n * V;
  for (int64_t j = threadIdx.x; j < V; j += kRowThreads) {
    float g = expf(row[j] - l) * d;
    if (targets[n] >= 0 && j == t) g -= d;
    drow[j] = g;
  }
}

}  // namespace

void cross_entropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V) {
  if (N == 0) return;
  row_max_kernel<<<unsigned(N), kRowThreads, 0, compute_stream()>>>(row_max, logits, V);
  MG_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_sum_exp(float* sum_exp, const float* logits, const float* shift, int64_t N,
                           int64_t V) {
  if (N == 0) return;
  sum_exp_kernel<<<unsigned(N), kRowThreads, 0, compute_stream()>>>(sum_exp, logits, shift, V);
  MG_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_target_logit(float* target_logit, const float* logits,
                                const int32_t* targets, int64_t v_begin, int64_t N, int64_t V) {
  if (N == 0) return;
  target_logit_kernel<<<unsigned((N + 255) / 256), 256, 0, compute_stream()>>>(
      target_logit, logits, targets, v_begin, N, V);
  MG_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_combine(float* losses, float* lse, const float* row_max,
                           const float* sum_exp, const int32_t* targets, int64_t N) {
  if (N == 0) return;
  combine_kernel<<<unsigned((N + 255) / 256), 256, 0, compute_stream()>>>(losses, lse, row_max,
                                                                         sum_exp, targets, N);
  MG_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_forward(float* losses, float* lse, const float* logits,
                           const int32_t* targets, int64_t N, int64_t V) {
  if (N == 0) return;
  loss_kernel<<<unsigned(N), kRowThreads, 0, compute_stream()>>>(losses, lse, logits, targets,
                                                                V);
  MG_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* dlosses, int64_t v_begin,
                            int64_t N, int64_t V) {
  if (N == 0) return;
  cross_entropy_backward_kernel<<<unsigned(N), kRowThreads, 0, compute_stream()>>>(
      dlogits, logits, lse, targets, dlosses, v_begin, V);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mg::cuda
