// Heads between a strided view (e.g. the Q or K heads inside fused QKV rows) and a contiguous
// (N, n_heads, HD) buffer: a gather that widens to f32 and a scatter that rounds to the view's
// dtype (round to nearest even, as everywhere).
#include "backend/cpu/half.h"
#include "backend/ops.h"
#include "core/error.h"

namespace mg::cpu {

void heads_gather(float* dst, const Heads& src, int64_t N, int64_t n_heads, int64_t HD) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t off = src.offset(n, h, HD);
      float* d = dst + (n * n_heads + h) * HD;
      for (int64_t e = 0; e < HD; ++e) d[e] = load_f32(src.data, src.dtype, off + e);
    }
}

void heads_scatter(const Heads& dst, Mat src, int64_t N, int64_t n_heads, int64_t HD) {
  MG_CHECK(src.dtype == DType::F32 || src.dtype == dst.dtype, "heads_scatter: source ",
           dtype_name(src.dtype), " into a ", dtype_name(dst.dtype), " view");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t off = dst.offset(n, h, HD), from = (n * n_heads + h) * HD;
      if (dst.dtype == DType::F32) {
        float* d = static_cast<float*>(dst.data) + off;
        for (int64_t e = 0; e < HD; ++e) d[e] = load_f32(src.data, src.dtype, from + e);
      } else if (src.dtype == dst.dtype) {  // 16-bit to 16-bit: the bits as they are
        const uint16_t* s = static_cast<const uint16_t*>(src.data) + from;
        uint16_t* d = static_cast<uint16_t*>(dst.data) + off;
        for (int64_t e = 0; e < HD; ++e) d[e] = s[e];
      } else {
        cast_from_f32(static_cast<uint16_t*>(dst.data) + off, dst.dtype,
                      static_cast<const float*>(src.data) + from, HD);
      }
    }
}

}  // namespace mg::cpu
