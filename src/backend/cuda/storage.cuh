// Device-side storage types of the op set: f32, bf16 and f16 values, widened to f32 for
// compute and rounded (to nearest even, as the CPU's casts) where they are stored, and the host
// switch from a DType to its storage type for templated kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/error.h"
#include "tensor/dtype.h"

namespace mg::cuda {

__device__ inline float to_f32(float x) { return x; }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_f32(__half x) { return __half2float(x); }

template <typename T>
__device__ inline T from_f32(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else return x;
}

// Calls f.template operator()<T>() with T the storage type of t (float, __nv_bfloat16, __half).
template <typename F>
void with_storage(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<float>();
    case DType::BF16: return f.template operator()<__nv_bfloat16>();
    case DType::F16: return f.template operator()<__half>();
    default: MG_CHECK(false, "no CUDA storage for dtype ", dtype_name(t));
  }
}

}  // namespace mg::cuda
