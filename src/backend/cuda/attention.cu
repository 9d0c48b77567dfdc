// Causal flash attention (Dao et al. 2022) on the GPU, correctness-first: one thread per query
// (forward, dQ) or key (dK, dV) row holds its head-dim vectors in registers, while the block
// streams tiles of kTile keys (or queries) through shared memory. Forward keeps the running row
// maximum m and sum l (online softmax) and stores O and lse = m + log l; backward recomputes
// P = exp(q k^T / sqrt(HD) - lse) tile by tile: dV += P^T dO, dS = P (dO V^T - D) with
// D = rowsum(dO O), dQ += dS K / sqrt(HD), dK += dS^T Q / sqrt(HD). Nothing of size S x S is
// stored. Layout as the CPU: qkv[S,B,NH,3,HD] (q, k, v per head), out[S,B,NH*HD], lse[B,NH,S];
// seg_start (B, S) limits row t to keys [seg_start, t] (--reset-attention-mask).
// This is the f32 path and the GPU's reference; 16-bit models take the tensor-core kernels of
// attention_tc.cu (the same D = rowsum(dO O) from here).
#include "backend/cuda/attention.cuh"
#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

using attn::Geometry;
using attn::geometry;
using attn::qkv_row;
using attn::visible;

constexpr int kTile = 32;  // rows per block and rows per shared-memory tile

// Keys and values of rows [k0, k0 + kTile) into shared memory (zeros past S); all kTile threads
// of the block take part.
template <int HD>
__device__ void load_kv_tile(float (*ks)[HD], float (*vs)[HD], const float* qkv,
                             const Geometry& g, int64_t b, int64_t h, int64_t k0) {
  for (int i = threadIdx.x; i < kTile * HD; i += kTile) {
    const int r = i / HD, e = i % HD;
    const bool in = k0 + r < g.S;
    ks[r][e] = in ? qkv_row(qkv, g, b, h, k0 + r, 1, HD)[e] : 0.f;
    vs[r][e] = in ? qkv_row(qkv, g, b, h, k0 + r, 2, HD)[e] : 0.f;
  }
}

template <int HD>
__global__ void forward_kernel(float* out, float* lse, const float* qkv, Geometry g, float scale,
                               const int32_t* seg_start) {
  __shared__ float ks[kTile][HD], vs[kTile][HD];
  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int64_t q0 = int64_t(blockIdx.x) * kTile, t = q0 + threadIdx.x;
  const int32_t* seg = seg_start ? seg_start + b * g.S : nullptr;
  float q[HD], acc[HD];
  const bool active = t < g.S;
  if (active) {
    const float* qr = qkv_row(qkv, g, b, h, t, 0, HD);
    for (int e = 0; e < HD; ++e) q[e] = qr[e] * scale;
  }
  for (int e = 0; e < HD; ++e) acc[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t last = min(q0 + kTile, g.S);  // keys beyond the block's last query are masked
  for (int64_t k0 = 0; k0 < last; k0 += kTile) {
    __syncthreads();
    load_kv_tile<HD>(ks, vs, qkv, g, b, h, k0);
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kTile; ++r) {
      const int64_t k = k0 + r;
      if (k >= g.S || !visible(t, k, seg)) continue;
      float s = 0.f;
      for (int e = 0; e < HD; ++e) s += q[e] * ks[r][e];
      const float mx = fmaxf(m, s);
      const float corr = expf(m - mx), p = expf(s - mx);  // expf(-inf) = 0 on the first key
      l = l * corr + p;
      for (int e = 0; e < HD; ++e) acc[e] = acc[e] * corr + p * vs[r][e];
      m = mx;
    }
  }
  if (!active) return;
  float* o = out + t * g.ld_out + b * g.NH * HD + h * HD;
  for (int e = 0; e < HD; ++e) o[e] = acc[e] / l;
  lse[bh * g.S + t] = m + logf(l);
}

// D[bh, t] = rowsum(dO * O) for every query row.
template <int HD, typename T>
__global__ void dot_kernel(float* D, const float* dout, const T* out, Geometry g) {
  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= g.S) return;
  const int64_t off = t * g.ld_out + b * g.NH * HD + h * HD;
  float d = 0.f;
  for (int e = 0; e < HD; ++e) d += dout[off + e] * to_f32(out[off + e]);
  D[bh * g.S + t] = d;
}

// dQ: one thread per query row, key/value tiles in shared memory.
template <int HD>
__global__ void dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                          const float* D, Geometry g, float scale, const int32_t* seg_start,
                          bool set) {
  __shared__ float ks[kTile][HD], vs[kTile][HD];
  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int64_t q0 = int64_t(blockIdx.x) * kTile, t = q0 + threadIdx.x;
  const int32_t* seg = seg_start ? seg_start + b * g.S : nullptr;
  const bool active = t < g.S;
  float q[HD], dO[HD], dq[HD];
  float L = 0.f, Dt = 0.f;
  if (active) {
    const float* qr = qkv_row(qkv, g, b, h, t, 0, HD);
    const float* dr = dout + t * g.ld_out + b * g.NH * HD + h * HD;
    for (int e = 0; e < HD; ++e) {
      q[e] = qr[e];
      dO[e] = dr[e];
    }
    L = lse[bh * g.S + t];
    Dt = D[bh * g.S + t];
  }
  for (int e = 0; e < HD; ++e) dq[e] = 0.f;
  const int64_t last = min(q0 + kTile, g.S);
  for (int64_t k0 = 0; k0 < last; k0 += kTile) {
    __syncthreads();
    load_kv_tile<HD>(ks, vs, qkv, g, b, h, k0);
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kTile; ++r) {
      const int64_t k = k0 + r;
      if (k >= g.S || !visible(t, k, seg)) continue;
      float s = 0.f, dp = 0.f;
      for (int e = 0; e < HD; ++e) {
        s += q[e] * ks[r][e];
        dp += dO[e] * vs[r][e];
      }
      const float ds = expf(s * scale - L) * (dp - Dt) * scale;
      for (int e = 0; e < HD; ++e) dq[e] += ds * ks[r][e];
    }
  }
  if (!active) return;
  float* dst = dqkv + t * g.ld_qkv + b * 3 * g.NH * HD + h * 3 * HD;
  for (int e = 0; e < HD; ++e) dst[e] = set ? dq[e] : dst[e] + dq[e];
}

// dK, dV: one thread per key row, query tiles (q, dO, lse, D) in shared memory.
template <int HD>
__global__ void dkv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                           const float* D, Geometry g, float scale, const int32_t* seg_start,
                           bool set) {
  __shared__ float qs[kTile][HD], dos[kTile][HD], ls[kTile], ds_[kTile];
  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int64_t k0 = int64_t(blockIdx.x) * kTile, j = k0 + threadIdx.x;
  const int32_t* seg = seg_start ? seg_start + b * g.S : nullptr;
  const bool active = j < g.S;
  float k[HD], v[HD], dk[HD], dv[HD];
  if (active) {
    const float* kr = qkv_row(qkv, g, b, h, j, 1, HD);
    const float* vr = qkv_row(qkv, g, b, h, j, 2, HD);
    for (int e = 0; e < HD; ++e) {
      k[e] = kr[e];
      v[e] = vr[e];
    }
  }
  for (int e = 0; e < HD; ++e) dk[e] = dv[e] = 0.f;
  for (int64_t t0 = k0; t0 < g.S; t0 += kTile) {  // queries before k0 cannot see these keys
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * HD; i += kTile) {
      const int r = i / HD, e = i % HD;
      const bool in = t0 + r < g.S;
      qs[r][e] = in ? qkv_row(qkv, g, b, h, t0 + r, 0, HD)[e] : 0.f;
      dos[r][e] = in ? dout[(t0 + r) * g.ld_out + b * g.NH * HD + h * HD + e] : 0.f;
    }
    if (threadIdx.x < kTile) {
      const bool in = t0 + threadIdx.x < g.S;
      ls[threadIdx.x] = in ? lse[bh * g.S + t0 + threadIdx.x] : 0.f;
      ds_[threadIdx.x] = in ? D[bh * g.S + t0 + threadIdx.x] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kTile; ++r) {
      const int64_t t = t0 + r;
      if (t >= g.S || !visible(t, j, seg)) continue;
      float s = 0.f, dp = 0.f;
      for (int e = 0; e < HD; ++e) {
        s += qs[r][e] * k[e];
        dp += dos[r][e] * v[e];
      }
      const float p = expf(s * scale - ls[r]);
      const float ds = p * (dp - ds_[r]) * scale;
      for (int e = 0; e < HD; ++e) {
        dv[e] += p * dos[r][e];
        dk[e] += ds * qs[r][e];
      }
    }
  }
  if (!active) return;
  float* base = dqkv + j * g.ld_qkv + b * 3 * g.NH * HD + h * 3 * HD;
  for (int e = 0; e < HD; ++e) {
    base[HD + e] = set ? dk[e] : base[HD + e] + dk[e];
    base[2 * HD + e] = set ? dv[e] : base[2 * HD + e] + dv[e];
  }
}

template <int HD>
void forward(float* out, float* lse, const float* qkv, int64_t B, int64_t S, int64_t NH,
             const int32_t* seg) {
  const dim3 grid(unsigned((S + kTile - 1) / kTile), unsigned(B * NH));
  forward_kernel<HD><<<grid, kTile, 0, compute_stream()>>>(out, lse, qkv, geometry(B, S, NH, HD),
                                                           1.0f / sqrtf(float(HD)), seg);
  MG_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void backward(float* dqkv, const float* dout, Mat out, Mat qkv, const float* lse, int64_t B,
              int64_t S, int64_t NH, const int32_t* seg, bool set) {
  const Geometry g = geometry(B, S, NH, HD);
  const float scale = 1.0f / sqrtf(float(HD));
  Buffer D(size_t(B * NH * S) * sizeof(float));
  const dim3 grid(unsigned((S + kTile - 1) / kTile), unsigned(B * NH));
  with_storage(out.dtype, [&]<typename T>() {
    dot_kernel<HD, T><<<grid, kTile, 0, compute_stream()>>>(D.as<float>(), dout,
                                                            static_cast<const T*>(out.data), g);
  });
  MG_CUDA_CHECK(cudaGetLastError());
  if (qkv.dtype != DType::F32)
    return attn::tc_backward(dqkv, dout, qkv.data, lse, D.as<float>(), g, HD, qkv.dtype, seg,
                             set);
  const float* q = static_cast<const float*>(qkv.data);
  dq_kernel<HD><<<grid, kTile, 0, compute_stream()>>>(dqkv, dout, q, lse, D.as<float>(), g,
                                                      scale, seg, set);
  MG_CUDA_CHECK(cudaGetLastError());
  dkv_kernel<HD><<<grid, kTile, 0, compute_stream()>>>(dqkv, dout, q, lse, D.as<float>(), g,
                                                       scale, seg, set);
  MG_CUDA_CHECK(cudaGetLastError());
}

// f32 qkv and out run the kernels here; 16-bit ones (both of one dtype) the tensor-core kernels.
void check_operands(DType out, DType qkv, int64_t B, int64_t NH, int64_t HD) {
  MG_CHECK(out == qkv, "CUDA attention: out in ", dtype_name(out), " but qkv in ",
           dtype_name(qkv));
  MG_CHECK(qkv == DType::F32 || attn::tc_supported(HD, qkv), "CUDA attention on ",
           dtype_name(qkv), " operands with head dim ", HD, ": the tensor-core kernels take ",
           "bf16/f16 with head dims 32, 64 and 128");
  MG_CHECK(B * NH <= 65535, "CUDA attention launches one grid row per (batch, head): B * NH = ",
           B * NH, " exceeds 65535");
}

}  // namespace

void attention_forward(MatOut out, float* lse, Mat qkv, int64_t B, int64_t S, int64_t NH,
                       int64_t HD, const int32_t* seg_start) {
  if (B * S * NH == 0) return;
  check_operands(out.dtype, qkv.dtype, B, NH, HD);
  if (qkv.dtype != DType::F32)
    return attn::tc_forward(out.data, lse, qkv.data, geometry(B, S, NH, HD), HD, qkv.dtype,
                            seg_start);
  float* o = static_cast<float*>(out.data);
  const float* q = static_cast<const float*>(qkv.data);
  if (HD == 64) return forward<64>(o, lse, q, B, S, NH, seg_start);
  if (HD == 128) return forward<128>(o, lse, q, B, S, NH, seg_start);
  if (HD == 32) return forward<32>(o, lse, q, B, S, NH, seg_start);
  MG_CHECK(false, "CUDA attention supports head dims 32, 64 and 128, not ", HD);
}

void attention_backward(float* dqkv, const float* dout, Mat out, Mat qkv, const float* lse,
                        int64_t B, int64_t S, int64_t NH, int64_t HD, const int32_t* seg_start,
                        GradWrite write) {
  if (B * S * NH == 0) return;
  check_operands(out.dtype, qkv.dtype, B, NH, HD);
  const bool set = write == GradWrite::Set;  // every row < S is written by its one owner
  if (HD == 64) return backward<64>(dqkv, dout, out, qkv, lse, B, S, NH, seg_start, set);
  if (HD == 128) return backward<128>(dqkv, dout, out, qkv, lse, B, S, NH, seg_start, set);
  if (HD == 32) return backward<32>(dqkv, dout, out, qkv, lse, B, S, NH, seg_start, set);
  MG_CHECK(false, "CUDA attention supports head dims 32, 64 and 128, not ", HD);
}

}  // namespace mg::cuda
