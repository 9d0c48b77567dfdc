// Element types a tensor can hold. Compute is f32 today; bf16/f16 storage arrives with mixed precision.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mg {

enum class DType : uint8_t { F32, BF16, F16, I32, I64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64;
};

}  // namespace mg
