// Rotary position embedding (Su et al. 2021) in place on a head view: channel pairs (c, c + R/2)
// (rotate-half) or (2c, 2c + 1) (interleaved), c < R/2 with R = rot_dim, turn by angle
// positions[n] * inv_freq[c], formed in fp32 as the CPU forms it; channels past R are left alone.
// Backward rotates the f32 gradient by the opposite angle (the transpose). One thread per
// (row, head, pair), grid-stride; 16-bit views are widened, rotated in fp32 and rounded once.
#include "backend/cuda/check.cuh"
#include "backend/cuda/heads.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

// sign +1 rotates by the angle, -1 by its opposite.
template <typename T>
__global__ void rope_kernel(T* x, HeadView view, const int32_t* positions, const float* inv_freq,
                            int64_t N, int64_t n_heads, int64_t HD, int64_t half,
                            bool interleaved, float sign) {
  MG_GRID_STRIDE(i, N * n_heads * half) {
    const int64_t c = i % half, nh = i / half, h = nh % n_heads, n = nh / n_heads;
    T* row = x + view.at(n, h, HD);
    const int64_t i0 = interleaved ? 2 * c : c, i1 = interleaved ? 2 * c + 1 : c + half;
    const float angle = float(positions[n]) * inv_freq[c];
    const float cs = cosf(angle), sn = sign * sinf(angle);
    const float x0 = to_f32(row[i0]), x1 = to_f32(row[i1]);
    row[i0] = from_f32<T>(x0 * cs - x1 * sn);
    row[i1] = from_f32<T>(x0 * sn + x1 * cs);
  }
}

void rope(const Heads& x, const int32_t* positions, const float* inv_freq, int64_t N,
          int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved, float sign) {
  MG_CHECK(rot_dim % 2 == 0 && rot_dim <= HD, "RoPE: rot_dim ", rot_dim,
           " must be even and at most the head dim ", HD);
  const int64_t half = rot_dim / 2;
  if (N * n_heads * half == 0) return;
  with_storage(x.dtype, [&]<typename T>() {
    rope_kernel<T><<<blocks_for(N * n_heads * half), kThreads, 0, compute_stream()>>>(
        static_cast<T*>(x.data), head_view(x), positions, inv_freq, N, n_heads, HD, half,
        interleaved, sign);
  });
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rope_forward(Heads x, const int32_t* positions, const float* inv_freq, int64_t N,
                  int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved) {
  rope(x, positions, inv_freq, N, n_heads, HD, rot_dim, interleaved, 1.0f);
}

void rope_backward(Heads dx, const int32_t* positions, const float* inv_freq, int64_t N,
                   int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved) {
  MG_CHECK(dx.dtype == DType::F32, "RoPE backward: the gradient is f32, not ",
           dtype_name(dx.dtype));
  rope(dx, positions, inv_freq, N, n_heads, HD, rot_dim, interleaved, -1.0f);
}

}  // namespace mg::cuda
