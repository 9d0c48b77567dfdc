// The f32 buffers behind the CPU's 16-bit operands: an op computes in fp32, so a 16-bit output
// (MatOut) is computed into a staging buffer and then rounded into place, and a 16-bit input
// (Mat) is widened first. The results are bit-identical to the op on f32 buffers followed by
// cast_from_f32, and to the op on cast_to_f32'd inputs. Buffers grow only (one per role and
// thread), so the steady state allocates nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace mg::cpu {

// Where an op writes its f32 result for out: out itself when f32, else the staging buffer.
inline float* f32_result(MatOut out, int64_t n) {
  if (out.dtype == DType::F32) return static_cast<float*>(out.data);
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}

// Stores a result that f32_result(out, n) gave into out (rounding it when out is 16-bit).
inline void store_result(MatOut out, const float* y, int64_t n) {
  if (out.dtype != DType::F32) cast_from_f32(out.data, out.dtype, y, n);
}

// x as f32: x itself when f32, else widened into a staging buffer.
inline const float* f32_operand(Mat x, int64_t n) {
  if (x.dtype == DType::F32) return static_cast<const float*>(x.data);
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  cast_to_f32(buf.data(), x.data, x.dtype, n);
  return buf.data();
}

// dst (n) = src rounded to the 16-bit dtype t and widened back: a bias as a 16-bit output's
// epilogue adds it (a 16-bit model's biases are 16-bit values already: unchanged).
inline void round_through(float* dst, const float* src, DType t, int64_t n) {
  thread_local std::vector<uint16_t> b16;
  if (b16.size() < size_t(n)) b16.resize(size_t(n));
  cast_from_f32(b16.data(), t, src, n);
  cast_to_f32(dst, b16.data(), t, n);
}

}  // namespace mg::cpu
