// Flash attention on the tensor cores, for 16-bit models (FlashAttention-2's loop order,
// Dao 2023, written with WMMA 16x16x16 fragments). A block of 4 warps owns 64 rows: 64 queries
// (forward, dQ) or 64 keys (dK, dV), each warp 16 of them. Tiles of 64 keys (or queries) pass
// through shared memory in the operand dtype T (bf16 or f16): the model stores qkv and the
// output in that dtype, so only the probabilities, dO and dS are rounded here. Scores, the online softmax,
// lse and every accumulator are fp32. Per tile and warp, the scores go from the accumulator
// fragments to shared memory, where two lanes per row apply the mask and the softmax and write
// P (and dS) back in T for the next product.
//   forward: S = q k^T * scale, m and l online per row, O = sum (P f) V / l, lse = m + log l.
//   dQ kernel (per query tile): P = exp(S - lse), dP = dO V^T, dS = P (f dP - D) * scale,
//            dQ += dS K.
//   dK/dV kernel (per key tile): the same P^T and dS^T per query tile, dV += (P f)^T dO,
//            dK += dS^T Q.
// f: the attention-probability dropout factor of each (query, key), 0 or 1/(1-p) (1 without
// dropout), drawn by Geometry::drop_factor, the mask of the CPU and f32 kernels; m, l and lse
// stay those of the undropped softmax, as there.
// Q/K/V head views, grouped-query heads, position offsets, causal or not and seg_start as the
// f32 kernels (attention.cuh); the dK/dV block of a KV head loops over its group's query heads.
// No atomics: every output row is summed by the one warp that owns it, in a fixed order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/check.cuh"
#include "backend/cuda/storage.cuh"

namespace mg::cuda::attn {

namespace {

using namespace nvcuda;

constexpr int kRows = 64;   // rows a block owns, and rows per streamed tile
constexpr int kWarps = 4;   // 16 rows each
constexpr int kBlock = 32 * kWarps;

constexpr size_t round128(size_t bytes) { return (bytes + 127) / 128 * 128; }

// Shared-memory strides (elements), padded against bank conflicts; WMMA wants multiples of
// 8 (16-bit) and 4 (f32), and every fragment pointer 32-byte aligned, which these keep.
template <int HD>
struct Pitch {
  static constexpr int kTile = HD + 8;                          // a 64 x HD tile in T
  static constexpr int kProbs = kRows + 8;                      // a warp's 16 x 64 P or dS in T
  static constexpr int kF32 = (HD > kRows ? HD : kRows) + 4;    // a warp's 16 x max(64, HD) f32
  static constexpr size_t kTileBytes = round128(size_t(kRows) * kTile * 2);
  static constexpr size_t kProbsBytes = round128(size_t(16) * kProbs * 2);
  static constexpr size_t kF32Bytes = round128(size_t(16) * kF32 * 4);
  static constexpr size_t kVecBytes = round128(size_t(kRows) * 4);
};

// The dynamic shared memory of a kernel: `tiles` 64 x HD tiles in T, `vecs` 64-float vectors,
// and per warp `f32s` 16-row f32 scratches and `probs` 16 x 64 P/dS blocks in T. The launch
// sizes it with bytes(), the kernel carves it in that order with the Carver below.
template <int HD>
struct SmemPlan {
  int tiles, vecs, f32s, probs;
  constexpr size_t bytes() const {
    using P = Pitch<HD>;
    return tiles * P::kTileBytes + vecs * P::kVecBytes +
           kWarps * (f32s * P::kF32Bytes + probs * P::kProbsBytes);
  }
};

// Hands out 128-byte aligned pieces of the dynamic shared memory.
template <int HD>
struct Carver {
  using P = Pitch<HD>;
  unsigned char* p;
  int warp;
  template <typename U>
  __device__ U* take(size_t bytes) {
    U* r = reinterpret_cast<U*>(p);
    p += bytes;
    return r;
  }
  template <typename T>
  __device__ T* tile() { return take<T>(P::kTileBytes); }
  __device__ float* vec() { return take<float>(P::kVecBytes); }
  // This warp's slice of a per-warp piece.
  __device__ float* warp_f32() {
    return take<float>(kWarps * P::kF32Bytes) + warp * (P::kF32Bytes / sizeof(float));
  }
  template <typename T>
  __device__ T* warp_probs() {
    return take<T>(kWarps * P::kProbsBytes) + warp * (P::kProbsBytes / sizeof(T));
  }
};

template <int HD>
constexpr SmemPlan<HD> kForwardSmem{3, 0, 1, 1};  // q, k, v; scores / P V; P
template <int HD>
constexpr SmemPlan<HD> kDqSmem{4, 0, 2, 1};  // q, dO, k, v; scores, dP; dS
template <int HD>
constexpr SmemPlan<HD> kDkvSmem{4, 2, 2, 2};  // k, v, q, dO; lse, D; scores, dP; P, dS

// x as an operand in T: copied when it already is one, else rounded.
template <typename T, typename Src>
__device__ T as_operand(Src x) {
  if constexpr (std::is_same_v<T, Src>) return x;
  else return from_f32<T>(to_f32(x));
}

// 64 rows from r0 of an array of S rows (f32, or already in T) into a 64 x HD tile in T (zeros
// past S). row(t) is the address of row t's HD values.
template <int HD, typename T, typename RowFn>
__device__ void load_tile(T* dst, int64_t r0, int64_t S, RowFn row) {
  for (int i = threadIdx.x; i < kRows * HD; i += kBlock) {
    const int r = i / HD, e = i % HD;
    const int64_t t = r0 + r;
    dst[r * Pitch<HD>::kTile + e] = t < S ? as_operand<T>(row(t)[e]) : from_f32<T>(0.f);
  }
}

// Queries [r0, r0 + 64) of query head (b, h) into a tile.
template <int HD, typename T>
__device__ void load_q_tile(T* dst, const T* q, const Geometry& g, int64_t b, int64_t h,
                            int64_t r0) {
  load_tile<HD>(dst, r0, g.Sq, [&](int64_t t) { return q + g.q_at(b, h, t); });
}
// Keys and values [r0, r0 + 64) of KV head (b, kvh) into two tiles.
template <int HD, typename T>
__device__ void load_kv_tiles(T* ks, T* vs, QKV<T> x, const Geometry& g, int64_t b, int64_t kvh,
                              int64_t r0) {
  load_tile<HD>(ks, r0, g.Sk, [&](int64_t j) { return x.k + g.k_at(b, kvh, j); });
  load_tile<HD>(vs, r0, g.Sk, [&](int64_t j) { return x.v + g.v_at(b, kvh, j); });
}
// dO rows [r0, r0 + 64) of query head (b, h) into a tile.
template <int HD, typename T>
__device__ void load_dout_tile(T* dst, const float* dout, const Geometry& g, int64_t b,
                               int64_t h, int64_t r0) {
  load_tile<HD>(dst, r0, g.Sq, [&](int64_t t) { return dout + g.out_at(b, h, t); });
}

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// out[16 x 64] (f32, stride kF32) = a[16 x HD] b[64 x HD]^T: a's 16 rows against all 64 rows
// of the tile b (both row-major in T, stride kTile).
template <int HD, typename T>
__device__ void rows_times_tile_t(float* out, const T* a, const T* b) {
#pragma unroll
  for (int j = 0; j < kRows / 16; ++j) {
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) {
      FragA<T> fa;
      FragB<T, wmma::col_major> fb;  // b^T: element (e, key) at b[key * stride + e]
      wmma::load_matrix_sync(fa, a + k * 16, Pitch<HD>::kTile);
      wmma::load_matrix_sync(fb, b + j * 16 * Pitch<HD>::kTile + k * 16, Pitch<HD>::kTile);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + j * 16, acc, Pitch<HD>::kF32, wmma::mem_row_major);
  }
}

// acc[e-block] += p[16 x 64] (T, stride kProbs) tile[64 x HD] (T, stride kTile), for each of
// the HD / 16 column blocks.
template <int HD, typename T>
__device__ void probs_times_tile(FragC (&acc)[HD / 16], const T* p, const T* tile) {
#pragma unroll
  for (int eb = 0; eb < HD / 16; ++eb)
#pragma unroll
    for (int k = 0; k < kRows / 16; ++k) {
      FragA<T> fa;
      FragB<T, wmma::row_major> fb;
      wmma::load_matrix_sync(fa, p + k * 16, Pitch<HD>::kProbs);
      wmma::load_matrix_sync(fb, tile + k * 16 * Pitch<HD>::kTile + eb * 16, Pitch<HD>::kTile);
      wmma::mma_sync(acc[eb], fa, fb, acc[eb]);
    }
}

// Adds (or with set, stores) the warp's 16 x HD accumulators to global rows: row r of the warp
// goes to dst(r), which is null for rows past S. Goes through the warp's f32 scratch.
template <int HD, typename DstFn>
__device__ void add_rows(float* scratch, FragC (&acc)[HD / 16], DstFn dst, bool set) {
#pragma unroll
  for (int eb = 0; eb < HD / 16; ++eb)
    wmma::store_matrix_sync(scratch + eb * 16, acc[eb], Pitch<HD>::kF32, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int i = lane; i < 16 * HD; i += 32) {
    const int r = i / HD, e = i % HD;
    if (float* d = dst(r)) {
      const float v = scratch[r * Pitch<HD>::kF32 + e];
      d[e] = set ? v : d[e] + v;
    }
  }
  __syncwarp();
}

template <int HD, typename T>
__global__ void __launch_bounds__(kBlock)
    forward_kernel(T* out, float* lse, QKV<T> x, Geometry g, float scale,
                   const int32_t* seg_start) {
  using P = Pitch<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Carver<HD> c{smem, warp};  // kForwardSmem
  T* qs = c.template tile<T>();
  T* ks = c.template tile<T>();
  T* vs = c.template tile<T>();
  float* sf = c.warp_f32();
  T* pb = c.template warp_probs<T>();

  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, kvh = h / g.group();
  const int64_t q0 = int64_t(blockIdx.x) * kRows;
  const int32_t* seg = seg_start ? seg_start + b * g.Sq : nullptr;
  load_q_tile<HD>(qs, x.q, g, b, h, q0);
  __syncthreads();  // the q tile is in (and a block with no key tile meets a barrier too)

  // Lane pair (2r, 2r+1) owns query row r of the warp: columns [32 half, 32 half + 32) of each
  // score tile, and the same half of the output row.
  const int r = lane / 2, half = lane % 2;
  const int64_t t = q0 + warp * 16 + r;
  float m = -INFINITY, l = 0.f, o[HD / 2];
  for (float& x : o) x = 0.f;
  const int64_t last = g.key_end(min(q0 + kRows, g.Sq));  // later keys are masked for all
  for (int64_t k0 = 0; k0 < last; k0 += kRows) {
    __syncthreads();  // the previous tile is consumed
    load_kv_tiles<HD>(ks, vs, x, g, b, kvh, k0);
    __syncthreads();
    rows_times_tile_t<HD>(sf, qs + warp * 16 * P::kTile, ks);
    __syncwarp();
    float s[32], mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int col = half * 32 + j;
      const int64_t k = k0 + col;
      const bool vis = t < g.Sq && k < g.Sk && g.visible(t, k, seg);
      s[j] = vis ? sf[r * P::kF32 + col] * scale : -INFINITY;
      mx = fmaxf(mx, s[j]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    // A row with nothing visible yet keeps m = -inf, l = 0 (corr 1, every p 0).
    const float corr = m_new == -INFINITY ? 1.f : expf(m - m_new);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const bool vis = s[j] != -INFINITY;
      const float p = vis ? expf(s[j] - m_new) : 0.f;
      sum += float(from_f32<T>(p));  // the rounded p, as the product P V sees it undropped
      // V sees the kept probabilities times 1/(1 - rate), l counts all (as the f32 kernel).
      const float f = vis ? g.drop_factor(b, h, t, k0 + half * 32 + j) : 1.f;
      pb[r * P::kProbs + half * 32 + j] = from_f32<T>(p * f);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * corr + sum;
    m = m_new;
    __syncwarp();
    FragC pv[HD / 16];
    for (auto& f : pv) wmma::fill_fragment(f, 0.f);
    probs_times_tile<HD>(pv, pb, vs);
#pragma unroll
    for (int eb = 0; eb < HD / 16; ++eb)  // the scores are read: reuse their scratch
      wmma::store_matrix_sync(sf + eb * 16, pv[eb], P::kF32, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) o[i] = o[i] * corr + sf[r * P::kF32 + half * (HD / 2) + i];
    __syncwarp();
  }
  if (t >= g.Sq) return;
  T* dst = out + g.out_at(b, h, t) + half * (HD / 2);
  const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: out 0, lse -inf
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) dst[i] = from_f32<T>(o[i] * inv);
  if (half == 0) lse[g.stat_at(b, h, t)] = l > 0.f ? m + logf(l) : -INFINITY;
}

// dQ for a tile of 64 queries, streaming key tiles.
template <int HD, typename T>
__global__ void __launch_bounds__(kBlock)
    dq_kernel(float* dq_out, const float* dout, QKV<T> x, const float* lse, const float* D,
              Geometry g, float scale, const int32_t* seg_start, bool set) {
  using P = Pitch<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Carver<HD> c{smem, warp};  // kDqSmem
  T* qs = c.template tile<T>();
  T* dos = c.template tile<T>();
  T* ks = c.template tile<T>();
  T* vs = c.template tile<T>();
  float* sf = c.warp_f32();
  float* dpf = c.warp_f32();
  T* dsb = c.template warp_probs<T>();

  const int64_t bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH, kvh = h / g.group();
  const int64_t q0 = int64_t(blockIdx.x) * kRows;
  const int32_t* seg = seg_start ? seg_start + b * g.Sq : nullptr;
  load_q_tile<HD>(qs, x.q, g, b, h, q0);
  load_dout_tile<HD>(dos, dout, g, b, h, q0);

  const int r = lane / 2, half = lane % 2;
  const int64_t t = q0 + warp * 16 + r;
  const float L = t < g.Sq ? lse[g.stat_at(b, h, t)] : 0.f;
  const float Dt = t < g.Sq ? D[g.stat_at(b, h, t)] : 0.f;
  FragC dq[HD / 16];
  for (auto& f : dq) wmma::fill_fragment(f, 0.f);
  const int64_t last = g.key_end(min(q0 + kRows, g.Sq));
  for (int64_t k0 = 0; k0 < last; k0 += kRows) {
    __syncthreads();
    load_kv_tiles<HD>(ks, vs, x, g, b, kvh, k0);
    __syncthreads();
    rows_times_tile_t<HD>(sf, qs + warp * 16 * P::kTile, ks);    // q k^T
    rows_times_tile_t<HD>(dpf, dos + warp * 16 * P::kTile, vs);  // dO v^T
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int col = half * 32 + j;
      const int64_t k = k0 + col;
      const bool vis = t < g.Sq && k < g.Sk && g.visible(t, k, seg);
      const float p = vis ? expf(sf[r * P::kF32 + col] * scale - L) : 0.f;
      const float f = vis ? g.drop_factor(b, h, t, k) : 1.f;  // dS = P (f dP - D)
      dsb[r * P::kProbs + col] = from_f32<T>(p * (f * dpf[r * P::kF32 + col] - Dt) * scale);
    }
    __syncwarp();
    probs_times_tile<HD>(dq, dsb, ks);
    __syncwarp();
  }
  add_rows<HD>(sf, dq, [&](int row) -> float* {
    const int64_t q = q0 + warp * 16 + row;
    return q < g.Sq ? dq_out + g.dq.at(q * g.B + b, h, HD) : nullptr;
  }, set);
}

// dK and dV for a tile of 64 keys of one KV head, streaming, for each query head of its group
// in turn, the query tiles that can see them.
template <int HD, typename T>
__global__ void __launch_bounds__(kBlock)
    dkv_kernel(Grads d, const float* dout, QKV<T> x, const float* lse, const float* D,
               Geometry g, float scale, const int32_t* seg_start, bool set) {
  using P = Pitch<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Carver<HD> c{smem, warp};  // kDkvSmem
  T* ks = c.template tile<T>();
  T* vs = c.template tile<T>();
  T* qs = c.template tile<T>();
  T* dos = c.template tile<T>();
  float* ls = c.vec();
  float* ds = c.vec();
  float* sf = c.warp_f32();
  float* dpf = c.warp_f32();
  T* pb = c.template warp_probs<T>();
  T* dsb = c.template warp_probs<T>();

  const int64_t bg = blockIdx.y, b = bg / g.NKV, kvh = bg % g.NKV;
  const int64_t k0 = int64_t(blockIdx.x) * kRows;
  const int32_t* seg = seg_start ? seg_start + b * g.Sq : nullptr;
  load_kv_tiles<HD>(ks, vs, x, g, b, kvh, k0);

  // Lane pair (2r, 2r+1) owns key row r of the warp, columns = queries of the tile.
  const int r = lane / 2, half = lane % 2;
  const int64_t j = k0 + warp * 16 + r;
  FragC dk[HD / 16], dv[HD / 16];
  for (auto& f : dk) wmma::fill_fragment(f, 0.f);
  for (auto& f : dv) wmma::fill_fragment(f, 0.f);
  const int64_t first = g.query_begin(k0);  // earlier queries cannot see these keys
  for (int64_t h = kvh * g.group(); h < (kvh + 1) * g.group(); ++h) {
    for (int64_t t0 = first; t0 < g.Sq; t0 += kRows) {
      __syncthreads();
      load_q_tile<HD>(qs, x.q, g, b, h, t0);
      load_dout_tile<HD>(dos, dout, g, b, h, t0);
      for (int i = threadIdx.x; i < kRows; i += kBlock) {
        const bool in = t0 + i < g.Sq;
        ls[i] = in ? lse[g.stat_at(b, h, t0 + i)] : 0.f;
        ds[i] = in ? D[g.stat_at(b, h, t0 + i)] : 0.f;
      }
      __syncthreads();
      rows_times_tile_t<HD>(sf, ks + warp * 16 * P::kTile, qs);    // k q^T
      rows_times_tile_t<HD>(dpf, vs + warp * 16 * P::kTile, dos);  // v dO^T
      __syncwarp();
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        const int col = half * 32 + jj;
        const int64_t t = t0 + col;
        const bool vis = t < g.Sq && j < g.Sk && g.visible(t, j, seg);
        const float p = vis ? expf(sf[r * P::kF32 + col] * scale - ls[col]) : 0.f;
        const float f = vis ? g.drop_factor(b, h, t, j) : 1.f;
        pb[r * P::kProbs + col] = from_f32<T>(p * f);
        dsb[r * P::kProbs + col] =
            from_f32<T>(p * (f * dpf[r * P::kF32 + col] - ds[col]) * scale);
      }
      __syncwarp();
      probs_times_tile<HD>(dv, pb, dos);  // dV += (P f)^T dO
      probs_times_tile<HD>(dk, dsb, qs);  // dK += dS^T q
      __syncwarp();
    }
  }
  auto row_of = [&](float* base, HeadView view) {
    return [&, base, view](int row) -> float* {
      const int64_t k = k0 + warp * 16 + row;
      return k < g.Sk ? base + view.at(k * g.B + b, kvh, HD) : nullptr;
    };
  };
  add_rows<HD>(sf, dk, row_of(d.dk, g.dk), set);
  add_rows<HD>(sf, dv, row_of(d.dv, g.dv), set);
}

// Above 48 KiB a kernel must opt in to its dynamic shared memory (up to 227 KiB on Hopper; the
// dK/dV kernel needs 156 KB at head dim 128, more than the ~100 KiB of sm_86/89/120 GPUs).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), size_t smem, dim3 grid, Args... args) {
  static const int optin = [] {
    int dev = 0, v = 0;
    MG_CUDA_CHECK(cudaGetDevice(&dev));
    MG_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v;
  }();
  MG_USER_CHECK(smem <= size_t(optin), "tensor-core attention needs ", smem,
                " bytes of shared memory per block at this head dim, but the GPU offers ", optin,
                "; use a smaller head dim (more --num-attention-heads for the same --hidden-size), "
                "or f32 (no --bf16/--fp16), whose kernel needs less");
  MG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(smem)));
  kernel<<<grid, kBlock, smem, compute_stream()>>>(args...);
  MG_CUDA_CHECK(cudaGetLastError());
}

// Grids: (query tiles, B * NH) for forward and dQ, (key tiles, B * NKV) for dK/dV.
dim3 query_grid(const Geometry& g) {
  return dim3(unsigned((g.Sq + kRows - 1) / kRows), unsigned(g.B * g.NH));
}
dim3 key_grid(const Geometry& g) {
  return dim3(unsigned((g.Sk + kRows - 1) / kRows), unsigned(g.B * g.NKV));
}

template <typename T>
QKV<T> typed(QKV<void> x) {
  return {static_cast<const T*>(x.q), static_cast<const T*>(x.k), static_cast<const T*>(x.v)};
}

template <int HD, typename T>
void forward(T* out, float* lse, QKV<T> x, const Geometry& g, const int32_t* seg) {
  launch(forward_kernel<HD, T>, kForwardSmem<HD>.bytes(), query_grid(g), out, lse, x, g,
         1.0f / sqrtf(float(HD)), seg);
}

template <int HD, typename T>
void backward(Grads d, const float* dout, QKV<T> x, const float* lse, const float* D,
              const Geometry& g, const int32_t* seg, bool set) {
  const float scale = 1.0f / sqrtf(float(HD));
  if (g.Sq > 0)
    launch(dq_kernel<HD, T>, kDqSmem<HD>.bytes(), query_grid(g), d.dq, dout, x, lse, D, g, scale,
           seg, set);
  if (g.Sk > 0)
    launch(dkv_kernel<HD, T>, kDkvSmem<HD>.bytes(), key_grid(g), d, dout, x, lse, D, g, scale,
           seg, set);
}

// Calls f.template operator()<HD, T>() for the supported head dims and operand dtypes.
template <typename F>
void dispatch(int64_t HD, DType operands, F f) {
  const bool bf16 = operands == DType::BF16;
  if (HD == 64) return bf16 ? f.template operator()<64, __nv_bfloat16>() : f.template operator()<64, __half>();
  if (HD == 128) return bf16 ? f.template operator()<128, __nv_bfloat16>() : f.template operator()<128, __half>();
  if (HD == 32) return bf16 ? f.template operator()<32, __nv_bfloat16>() : f.template operator()<32, __half>();
  MG_CHECK(false, "tensor-core attention supports head dims 32, 64 and 128, not ", HD);
}

}  // namespace

bool tc_supported(int64_t HD, DType operands) {
  return (operands == DType::BF16 || operands == DType::F16) && (HD == 32 || HD == 64 || HD == 128);
}

void tc_forward(void* out, float* lse, QKV<void> x, const Geometry& g, DType operands,
                const int32_t* seg_start) {
  dispatch(g.HD, operands, [&]<int D, typename T>() {
    forward<D, T>(static_cast<T*>(out), lse, typed<T>(x), g, seg_start);
  });
}

void tc_backward(Grads d, const float* dout, QKV<void> x, const float* lse, const float* D,
                 const Geometry& g, DType operands, const int32_t* seg_start, bool set) {
  dispatch(g.HD, operands, [&]<int H, typename T>() {
    backward<H, T>(d, dout, typed<T>(x), lse, D, g, seg_start, set);
  });
}

}  // namespace mg::cuda::attn
