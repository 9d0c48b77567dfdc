// Rotary position embedding (Su et al. 2021, RoFormer): each channel pair (x1, x2) of the first
// rot_dim channels of a head turns by the angle a = position * inv_freq[c]:
// (x1, x2) <- (x1 cos a - x2 sin a, x2 cos a + x1 sin a). Pairs are (c, c + rot_dim/2)
// (rotate-half, Megatron's and Hugging Face's default) or (2c, 2c + 1) (interleaved, the
// RoFormer/Meta form). A rotation is orthogonal, so the backward is the rotation by -a.
#include <cmath>
#include <vector>

#include "backend/cpu/half.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {

// Turns the pairs of one head's first rot_dim = 2 * half channels (f32, in place) by the
// angles whose cosines and sines are cs[c], sn[c].
void rotate_pairs(float* x, const float* cs, const float* sn, int64_t half, bool interleaved) {
  const int64_t step = interleaved ? 2 : 1, other = interleaved ? 1 : half;
  for (int64_t c = 0; c < half; ++c) {
    float* x1 = x + c * step;
    float* x2 = x1 + other;
    const float a = *x1, b = *x2;
    *x1 = a * cs[c] - b * sn[c];
    *x2 = b * cs[c] + a * sn[c];
  }
}

// x (f32 or 16-bit, widened to fp32 and rounded back) rotated by +angle (sign 1) or -angle.
void rope_apply(const Heads& x, const int32_t* positions, const float* inv_freq, int64_t N,
                int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved, float sign) {
  MG_CHECK(rot_dim % 2 == 0 && rot_dim > 0 && rot_dim <= HD, "rot_dim ", rot_dim,
           " must be even and in (0, HD = ", HD, "]");
  const int64_t half = rot_dim / 2;
#pragma omp parallel
  {
    // The angles of one row, shared by its heads; a 16-bit head is rotated in f32.
    std::vector<float> cs(static_cast<size_t>(half)), sn(cs.size()),
        tmp(static_cast<size_t>(rot_dim));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < half; ++c) {
        const float angle = float(positions[n]) * inv_freq[c];  // fp32, as Megatron forms it
        cs[size_t(c)] = std::cos(angle);
        sn[size_t(c)] = sign * std::sin(angle);
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t off = x.offset(n, h, HD);
        if (x.dtype == DType::F32) {
          rotate_pairs(static_cast<float*>(x.data) + off, cs.data(), sn.data(), half, interleaved);
          continue;
        }
        uint16_t* p = static_cast<uint16_t*>(x.data) + off;
        const bool bf16 = x.dtype == DType::BF16;
        for (int64_t e = 0; e < rot_dim; ++e) tmp[size_t(e)] = load_f32(p, x.dtype, e);
        rotate_pairs(tmp.data(), cs.data(), sn.data(), half, interleaved);
        for (int64_t e = 0; e < rot_dim; ++e)
          p[e] = bf16 ? bf16_from_f32(tmp[size_t(e)]) : f16_from_f32(tmp[size_t(e)]);
      }
    }
  }
}

}  // namespace

void rope_forward(Heads x, const int32_t* positions, const float* inv_freq, int64_t N,
                  int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved) {
  timers::Scope timer(timers::kAttention);
  rope_apply(x, positions, inv_freq, N, n_heads, HD, rot_dim, interleaved, 1.0f);
}

void rope_backward(Heads dx, const int32_t* positions, const float* inv_freq, int64_t N,
                   int64_t n_heads, int64_t HD, int64_t rot_dim, bool interleaved) {
  timers::Scope timer(timers::kAttention);
  MG_CHECK(dx.dtype == DType::F32, "rope gradient in ", dtype_name(dx.dtype), ", not f32");
  rope_apply(dx, positions, inv_freq, N, n_heads, HD, rot_dim, interleaved, -1.0f);
}

}  // namespace mg::cpu
