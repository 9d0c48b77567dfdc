// The error check for CUDA runtime calls, for every module that calls the runtime itself (the
// CUDA backend; comm's NCCL communicator): a failure is an invariant broken, fatal with
// file:line and what the runtime said. Included by CUDA sources only (core/ itself stays
// std-only: this header is the one place core names the CUDA runtime).
#pragma once
#include <cuda_runtime.h>

#include "core/error.h"

#define MG_CUDA_CHECK(call)                                                             \
  do {                                                                                  \
    const cudaError_t mg_cuda_err = (call);                                             \
    MG_CHECK(mg_cuda_err == cudaSuccess, #call, ": ", cudaGetErrorString(mg_cuda_err)); \
  } while (0)
