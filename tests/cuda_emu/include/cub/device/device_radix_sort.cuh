// CUDA emulation: cub::DeviceRadixSort::SortPairs for int32 keys and values
// (tests/cuda_emu/README.md): a stable sort by key, as CUB's LSD radix sort.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cub {
struct DeviceRadixSort {
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const int32_t* keys_in,
                               int32_t* keys_out, const int32_t* values_in, int32_t* values_out,
                               int n, int begin_bit = 0, int end_bit = 32,
                               cudaStream_t s = nullptr);
};
}  // namespace cub
