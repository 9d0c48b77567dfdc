// Flash attention (Dao et al. 2022) on the GPU, correctness-first: one thread per query
// (forward, dQ) or key (dK, dV) row holds its head-dim vectors in registers, while the block
// streams tiles of kTile keys (or queries) through shared memory. Forward keeps the running row
// maximum m and sum l (online softmax) and stores O and lse = m + log l; backward recomputes
// P = exp(q k^T / sqrt(HD) - lse) tile by tile: dV += P^T dO, dS = P (dO V^T - D) with
// D = rowsum(dO O), dQ += dS K / sqrt(HD), dK += dS^T Q / sqrt(HD). Nothing of size S x S is
// stored. Layout and masking as the CPU op (attention.cuh): Q/K/V head views, grouped-query
// heads, Sq queries at q_pos0.. against Sk keys at k_pos0.., causal or not, seg_start.
// Grouped-query backward: a block owns a tile of keys of one KV head and loops over the query
// heads of its group in order, so dK/dV are summed by one thread each, without atomics.
// A query that sees no key gets out 0 and lse -inf (and no gradient).
// This is the f32 path and the GPU's reference; 16-bit models take the tensor-core kernels of
// attention_tc.cu (the same D = rowsum(dO O) from here).
#include "backend/cuda/attention.cuh"
#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

using attn::Geometry;
using attn::Grads;
using attn::QKV;

constexpr int kTile = 32;  // rows per block and rows per shared-memory tile
// With position offsets a block may have no tile to stream (queries before every key, keys
// after every query). Each kernel still has every block meet one __syncthreads ("every block
// meets a barrier"): the CUDA emulator runs a launch on fibers only when its first block meets
// one (tests/cuda_emu/README.md).

// Keys and values of rows [k0, k0 + kTile) of KV head (b, g) into shared memory (zeros past
// Sk); all kTile threads of the block take part.
template <int HD>
__device__ void load_kv_tile(float (*ks)[HD], float (*vs)[HD], QKV<float> x, const Geometry& g,
                             int64_t b, int64_t kvh, int64_t k0) {
  for (int i = threadIdx.x; i < kTile * HD; i += kTile) {
    const int r = i / HD, e = i % HD;
    const bool in = k0 + r < g.Sk;
    ks[r][e] = in ? x.k[g.k_at(b, kvh, k0 + r) + e] : 0.f;
    vs[r][e] = in ? x.v[g.v_at(b, kvh, k0 + r) + e] : 0.f;
  }
}

template <int HD>
__global__ void forward_kernel(float* out, float* lse, QKV<float> x, Geometry g, float scale,
                               const int32_t* seg_start) {
  __shared__ float ks[kTile][HD], vs[kTile][HD];
  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, kvh = h / g.group();
  const int64_t q0 = int64_t(blockIdx.x) * kTile, t = q0 + threadIdx.x;
  const int32_t* seg = seg_start ? seg_start + b * g.Sq : nullptr;
  float q[HD], acc[HD];
  const bool active = t < g.Sq;
  if (active) {
    const float* qr = x.q + g.q_at(b, h, t);
    for (int e = 0; e < HD; ++e) q[e] = qr[e] * scale;
  }
  for (int e = 0; e < HD; ++e) acc[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int64_t last = g.key_end(min(q0 + kTile, g.Sq));  // later keys are masked for all
  __syncthreads();  // every block meets a barrier
  for (int64_t k0 = 0; k0 < last; k0 += kTile) {
    __syncthreads();
    load_kv_tile<HD>(ks, vs, x, g, b, kvh, k0);
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kTile; ++r) {
      const int64_t k = k0 + r;
      if (k >= g.Sk || !g.visible(t, k, seg)) continue;
      float s = 0.f;
      for (int e = 0; e < HD; ++e) s += q[e] * ks[r][e];
      const float mx = fmaxf(m, s);
      const float corr = expf(m - mx), p = expf(s - mx);  // expf(-inf) = 0 on the first key
      l = l * corr + p;  // the normalizer counts every probability, V sees the kept ones
      const float pv = p * g.drop_factor(b, h, t, k);
      for (int e = 0; e < HD; ++e) acc[e] = acc[e] * corr + pv * vs[r][e];
      m = mx;
    }
  }
  if (!active) return;
  float* o = out + g.out_at(b, h, t);
  const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: out 0, lse -inf
  for (int e = 0; e < HD; ++e) o[e] = acc[e] * inv;
  lse[g.stat_at(b, h, t)] = l > 0.f ? m + logf(l) : -INFINITY;
}

// D[b, h, t] = rowsum(dO * O) for every query row.
template <int HD, typename T>
__global__ void dot_kernel(float* D, const float* dout, const T* out, Geometry g) {
  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= g.Sq) return;
  const int64_t off = g.out_at(b, h, t);
  float d = 0.f;
  for (int e = 0; e < HD; ++e) d += dout[off + e] * to_f32(out[off + e]);
  D[g.stat_at(b, h, t)] = d;
}

// dQ: one thread per query row, key/value tiles in shared memory.
template <int HD>
__global__ void dq_kernel(float* dq_out, const float* dout, QKV<float> x, const float* lse,
                          const float* D, Geometry g, float scale, const int32_t* seg_start,
                          bool set) {
  __shared__ float ks[kTile][HD], vs[kTile][HD];
  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, kvh = h / g.group();
  const int64_t q0 = int64_t(blockIdx.x) * kTile, t = q0 + threadIdx.x;
  const int32_t* seg = seg_start ? seg_start + b * g.Sq : nullptr;
  const bool active = t < g.Sq;
  float q[HD], dO[HD], dq[HD];
  float L = 0.f, Dt = 0.f;
  if (active) {
    const float* qr = x.q + g.q_at(b, h, t);
    const float* dr = dout + g.out_at(b, h, t);
    for (int e = 0; e < HD; ++e) {
      q[e] = qr[e];
      dO[e] = dr[e];
    }
    L = lse[g.stat_at(b, h, t)];
    Dt = D[g.stat_at(b, h, t)];
  }
  for (int e = 0; e < HD; ++e) dq[e] = 0.f;
  const int64_t last = g.key_end(min(q0 + kTile, g.Sq));
  __syncthreads();  // every block meets a barrier
  for (int64_t k0 = 0; k0 < last; k0 += kTile) {
    __syncthreads();
    load_kv_tile<HD>(ks, vs, x, g, b, kvh, k0);
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kTile; ++r) {
      const int64_t k = k0 + r;
      if (k >= g.Sk || !g.visible(t, k, seg)) continue;
      float s = 0.f, dp = 0.f;
      for (int e = 0; e < HD; ++e) {
        s += q[e] * ks[r][e];
        dp += dO[e] * vs[r][e];
      }
      // With dropout mask factor f: dS = P (f dP - D).
      const float ds = expf(s * scale - L) * (g.drop_factor(b, h, t, k) * dp - Dt) * scale;
      for (int e = 0; e < HD; ++e) dq[e] += ds * ks[r][e];
    }
  }
  if (!active) return;
  float* dst = dq_out + g.dq.at(t * g.B + b, h, HD);
  for (int e = 0; e < HD; ++e) dst[e] = set ? dq[e] : dst[e] + dq[e];
}

// dK, dV: one thread per key row of one KV head; for each query head of its group in turn,
// the query tiles (q, dO, lse, D) that can see the block's keys pass through shared memory.
template <int HD>
__global__ void dkv_kernel(Grads d, const float* dout, QKV<float> x, const float* lse,
                           const float* D, Geometry g, float scale, const int32_t* seg_start,
                           bool set) {
  __shared__ float qs[kTile][HD], dos[kTile][HD], ls[kTile], ds_[kTile];
  const int64_t bg = blockIdx.y, b = bg / g.NKV, kvh = bg % g.NKV;
  const int64_t k0 = int64_t(blockIdx.x) * kTile, j = k0 + threadIdx.x;
  const int32_t* seg = seg_start ? seg_start + b * g.Sq : nullptr;
  const bool active = j < g.Sk;
  float k[HD], v[HD], dk[HD], dv[HD];
  if (active) {
    const float* kr = x.k + g.k_at(b, kvh, j);
    const float* vr = x.v + g.v_at(b, kvh, j);
    for (int e = 0; e < HD; ++e) {
      k[e] = kr[e];
      v[e] = vr[e];
    }
  }
  for (int e = 0; e < HD; ++e) dk[e] = dv[e] = 0.f;
  const int64_t first = g.query_begin(k0);  // earlier queries cannot see these keys
  __syncthreads();  // every block meets a barrier
  for (int64_t h = kvh * g.group(); h < (kvh + 1) * g.group(); ++h)
    for (int64_t t0 = first; t0 < g.Sq; t0 += kTile) {
      __syncthreads();
      for (int i = threadIdx.x; i < kTile * HD; i += kTile) {
        const int r = i / HD, e = i % HD;
        const bool in = t0 + r < g.Sq;
        qs[r][e] = in ? x.q[g.q_at(b, h, t0 + r) + e] : 0.f;
        dos[r][e] = in ? dout[g.out_at(b, h, t0 + r) + e] : 0.f;
      }
      {
        const bool in = t0 + threadIdx.x < g.Sq;
        ls[threadIdx.x] = in ? lse[g.stat_at(b, h, t0 + threadIdx.x)] : 0.f;
        ds_[threadIdx.x] = in ? D[g.stat_at(b, h, t0 + threadIdx.x)] : 0.f;
      }
      __syncthreads();
      if (!active) continue;
      for (int r = 0; r < kTile; ++r) {
        const int64_t t = t0 + r;
        if (t >= g.Sq || !g.visible(t, j, seg)) continue;
        float s = 0.f, dp = 0.f;
        for (int e = 0; e < HD; ++e) {
          s += qs[r][e] * k[e];
          dp += dos[r][e] * v[e];
        }
        const float p = expf(s * scale - ls[r]), f = g.drop_factor(b, h, t, j);
        const float ds = p * (f * dp - ds_[r]) * scale;
        for (int e = 0; e < HD; ++e) {
          dv[e] += p * f * dos[r][e];
          dk[e] += ds * qs[r][e];
        }
      }
    }
  if (!active) return;
  float* dkr = d.dk + g.dk.at(j * g.B + b, kvh, HD);
  float* dvr = d.dv + g.dv.at(j * g.B + b, kvh, HD);
  for (int e = 0; e < HD; ++e) {
    dkr[e] = set ? dk[e] : dkr[e] + dk[e];
    dvr[e] = set ? dv[e] : dvr[e] + dv[e];
  }
}

unsigned tiles(int64_t n) { return unsigned((n + kTile - 1) / kTile); }

template <int HD>
void forward(float* out, float* lse, QKV<float> x, const Geometry& g, const int32_t* seg) {
  const dim3 grid(tiles(g.Sq), unsigned(g.B * g.NH));
  forward_kernel<HD><<<grid, kTile, 0, compute_stream()>>>(out, lse, x, g,
                                                           1.0f / sqrtf(float(HD)), seg);
  MG_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void backward(Grads d, const float* dout, Mat out, QKV<void> x, const float* lse,
              const Geometry& g, const int32_t* seg, bool set) {
  const float scale = 1.0f / sqrtf(float(HD));
  Buffer D(size_t(g.B * g.NH * g.Sq) * sizeof(float));
  if (g.Sq > 0) {
    with_storage(out.dtype, [&]<typename T>() {
      dot_kernel<HD, T><<<dim3(tiles(g.Sq), unsigned(g.B * g.NH)), kTile, 0,
                          compute_stream()>>>(D.as<float>(), dout,
                                              static_cast<const T*>(out.data), g);
    });
    MG_CUDA_CHECK(cudaGetLastError());
  }
  if (out.dtype != DType::F32)
    return attn::tc_backward(d, dout, x, lse, D.as<float>(), g, out.dtype, seg, set);
  const QKV<float> xf{static_cast<const float*>(x.q), static_cast<const float*>(x.k),
                      static_cast<const float*>(x.v)};
  if (g.Sq > 0) {
    dq_kernel<HD><<<dim3(tiles(g.Sq), unsigned(g.B * g.NH)), kTile, 0, compute_stream()>>>(
        d.dq, dout, xf, lse, D.as<float>(), g, scale, seg, set);
    MG_CUDA_CHECK(cudaGetLastError());
  }
  if (g.Sk == 0) return;
  dkv_kernel<HD><<<dim3(tiles(g.Sk), unsigned(g.B * g.NKV)), kTile, 0, compute_stream()>>>(
      d, dout, xf, lse, D.as<float>(), g, scale, seg, set);
  MG_CUDA_CHECK(cudaGetLastError());
}

// f32 operands run the kernels here; 16-bit ones (all of one dtype) the tensor-core kernels.
void check_operands(DType out, const Heads& q, const Heads& k, const Heads& v,
                    const AttentionShape& a) {
  MG_CHECK(q.dtype == k.dtype && q.dtype == v.dtype && out == q.dtype, "CUDA attention: out ",
           dtype_name(out), ", q ", dtype_name(q.dtype), ", k ", dtype_name(k.dtype), ", v ",
           dtype_name(v.dtype), ": all must share one dtype");
  MG_CHECK(a.HD == 32 || a.HD == 64 || a.HD == 128,
           "CUDA attention supports head dims 32, 64 and 128, not ", a.HD);
  MG_CHECK(q.dtype == DType::F32 || attn::tc_supported(a.HD, q.dtype), "CUDA attention on ",
           dtype_name(q.dtype), " operands: the tensor-core kernels take bf16/f16");
  MG_CHECK(a.NKV > 0 && a.NH % a.NKV == 0, "CUDA attention: ", a.NH,
           " query heads do not split into ", a.NKV, " KV groups");
  MG_CHECK(a.B * a.NH <= 65535, "CUDA attention launches one grid row per (batch, head): B * NH = ",
           a.B * a.NH, " exceeds 65535");
}

template <typename F>
void with_head_dim(int64_t HD, F&& f) {
  if (HD == 64) return f.template operator()<64>();
  if (HD == 128) return f.template operator()<128>();
  return f.template operator()<32>();  // checked by check_operands
}

}  // namespace

void attention_forward(MatOut out, float* lse, const Heads& q, const Heads& k, const Heads& v,
                       const AttentionShape& a, const int32_t* seg_start) {
  if (a.B * a.Sq * a.NH == 0) return;
  check_operands(out.dtype, q, k, v, a);
  const Geometry g = attn::geometry(a, q, k, v);
  if (q.dtype != DType::F32)
    return attn::tc_forward(out.data, lse, {q.data, k.data, v.data}, g, q.dtype, seg_start);
  const QKV<float> x{static_cast<const float*>(q.data), static_cast<const float*>(k.data),
                     static_cast<const float*>(v.data)};
  with_head_dim(a.HD, [&]<int HD>() {
    forward<HD>(static_cast<float*>(out.data), lse, x, g, seg_start);
  });
}

void attention_backward(const Heads& dq, const Heads& dk, const Heads& dv, const float* dout,
                        Mat out, const Heads& q, const Heads& k, const Heads& v,
                        const float* lse, const AttentionShape& a, const int32_t* seg_start,
                        GradWrite write) {
  if (a.B * a.NH == 0 || a.Sq + a.Sk == 0) return;
  check_operands(out.dtype, q, k, v, a);
  MG_CHECK(dq.dtype == DType::F32 && dk.dtype == DType::F32 && dv.dtype == DType::F32,
           "CUDA attention backward: gradients are f32");
  Geometry g = attn::geometry(a, q, k, v);
  g.dq = head_view(dq);
  g.dk = head_view(dk);
  g.dv = head_view(dv);
  const Grads d{static_cast<float*>(dq.data), static_cast<float*>(dk.data),
                static_cast<float*>(dv.data)};
  const bool set = write == GradWrite::Set;  // every gradient row has one owner that stores it
  with_head_dim(a.HD, [&]<int HD>() {
    backward<HD>(d, dout, out, {q.data, k.data, v.data}, lse, g, seg_start, set);
  });
}

}  // namespace mg::cuda
