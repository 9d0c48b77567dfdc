// Error checks for CUDA runtime (core/cuda_check.h) and cuBLAS(Lt) calls: a failure is an
// invariant broken, fatal with file:line and what the library said.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"

#define MG_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    const cublasStatus_t mg_cublas_st = (call);                                        \
    MG_CHECK(mg_cublas_st == CUBLAS_STATUS_SUCCESS, #call, ": cuBLAS status ",         \
             int(mg_cublas_st), " (cublas_api.h lists the codes)");                     \
  } while (0)

namespace mg::cuda {
inline cudaStream_t compute_stream();
// A grid-stride loop over [0, n) with a 64-bit index i.
#define MG_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// Threads per block and a grid that covers n elements with grid-stride loops.
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}
}  // namespace mg::cuda

#include "backend/cuda/device.h"

namespace mg::cuda {
inline cudaStream_t compute_stream() { return static_cast<cudaStream_t>(stream()); }
}  // namespace mg::cuda
