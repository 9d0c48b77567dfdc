// What the CUDA emulator's parts share (tests/cuda_emu/README.md): the limits of the emulated
// GPU, the sticky last error and the way it stops on a broken kernel.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace mg_emu {

constexpr int kSmemOptin = 232448;  // Hopper's 227 KiB of dynamic shared memory per block
constexpr int kMaxThreads = 1024;   // threads per block

// fatal(what) is declared in cuda_runtime.h (kernels call it too).
// Sets the error cudaGetLastError() returns next; returns e.
cudaError_t set_last_error(cudaError_t e);

// The queue of NCCL calls (nccl.cpp), in stream order: how many were ever queued; progress
// without blocking until the first `upto` are complete (true once they are); and the blocking
// form, which every other piece of stream work (kernel, copy, synchronization) runs first.
uint64_t nccl_enqueued();
bool nccl_progress(uint64_t upto);
void nccl_drain(uint64_t upto = UINT64_MAX);

}  // namespace mg_emu
