// What the CUDA emulator's parts share (tests/cuda_emu/README.md): the limits of the emulated
// GPU, the sticky last error and the way it stops on a broken kernel.
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace mg_emu {

constexpr int kSmemOptin = 232448;  // Hopper's 227 KiB of dynamic shared memory per block
constexpr int kMaxThreads = 1024;   // threads per block

// fatal(what) is declared in cuda_runtime.h (kernels call it too).
// Sets the error cudaGetLastError() returns next; returns e.
cudaError_t set_last_error(cudaError_t e);

}  // namespace mg_emu
