// CUDA emulation: WMMA 16x16x16 fragments (tests/cuda_emu/README.md). A fragment's contents
// are opaque to kernels, so the emulator picks a layout: every lane holds whole A/B tiles, and
// an accumulator lane owns 8 of the 256 elements (lane l: elements [8 l, 8 l + 8) row-major).
// mma_sync computes a lane's own elements, store_matrix_sync writes only them: a kernel that
// reads a stored tile without the __syncwarp a GPU needs sees the other lanes' part missing.
// Products accumulate in f32 in k order from the operands widened to f32.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline float widen(float x) { return x; }
inline float widen(__nv_bfloat16 x) { return float(x); }
inline float widen(__half x) { return float(x); }
constexpr int kOwned = 8;  // accumulator elements per lane
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 fragments only");
  static constexpr int num_elements = 256;
  float x[256];  // element (r, c) at x[16 r + c], widened to f32
};

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {
  for (float& e : f.x) e = v;
}

// A or B from memory: row_major reads element (r, c) at p[r ldm + c], col_major at p[c ldm + r].
template <typename Use, typename T, typename Layout, typename U>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const U* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "accumulator loads are not emulated");
  static_assert(std::is_same_v<T, U>, "fragment and memory element types differ");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[16 * r + c] =
          detail::widen(std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}

template <typename T>
void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm,
                       layout_t layout) {
  const int lane = ::mg_emu::lane_id();
  for (int i = lane * detail::kOwned; i < (lane + 1) * detail::kOwned; ++i) {
    const int r = i / 16, c = i % 16;
    p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.x[i];
  }
}

template <typename TA, typename LA, typename TB, typename LB, typename TC>
void mma_sync(fragment<accumulator, 16, 16, 16, TC>& d,
              const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TB, LB>& b,
              const fragment<accumulator, 16, 16, 16, TC>& c) {
  const int lane = ::mg_emu::lane_id();
  for (int i = lane * detail::kOwned; i < (lane + 1) * detail::kOwned; ++i) {
    const int r = i / 16, col = i % 16;
    float acc = c.x[i];
    for (int k = 0; k < 16; ++k) acc += a.x[16 * r + k] * b.x[16 * k + col];
    d.x[i] = acc;
  }
}

}  // namespace nvcuda::wmma
