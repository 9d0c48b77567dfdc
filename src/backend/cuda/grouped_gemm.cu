// Grouped linear layers (a mixture-of-experts layer's local experts, --moe-grouped-gemm):
// Y_g = X_g W_g^T + b_g for G groups of consecutive rows, one kernel launch per GEMM kind
// (forward, dinp, dweight) for all groups. The host builds a table of 32x32 output tiles
// (group, first row, first column) from the counts, so no group is padded, and uploads it with
// the groups' pointers and row offsets in one copy. A block owns one tile: 16x16 threads with
// 2x2 outputs each, 32-deep slices of both operands staged in shared memory, fp32 accumulation,
// 16-bit operands widened on load, results rounded once at the store. A dweight tile's block
// loops over all of its group's rows, so dweight and dbias add (+=) without atomics, in a fixed
// order (bitwise reproducible).
// Limits: plain FMA (no tensor cores, no register tiling beyond 2x2): several times below
// cuBLASLt on large experts; a group with many rows but small (OUT, IN) gives few dweight blocks.
#include <cstring>
#include <vector>

#include "backend/cuda/check.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/storage.cuh"

namespace mg::cuda {

namespace {

constexpr int kTile = 32, kHalf = kTile / 2;  // a tile's side; threads per side of a block
enum Kind { kForward, kDInp, kDWeight };

// The device-side table of one launch (all arrays in one device buffer).
struct Groups {
  const void* const* w;      // [G] weights (OUT, IN)
  const float* const* bias;  // [G] biases or null entries (forward)
  float* const* dw;          // [G] dweights (dweight kind)
  float* const* db;          // [G] dbiases or null entries (dweight kind)
  const int64_t* first;      // [G + 1] the first row of each group, then all rows
  const int32_t* tiles;      // [n, 3] group, first output row, first output column
  int64_t IN, OUT;
};

// v as a GEMM over 16-bit operands reads it: rounded to T (nothing for f32).
template <typename T>
__device__ inline float rounded(float v) {
  return to_f32(from_f32<T>(v));
}

// Operand A(m, k) and B(k, n) of the tile's GEMM; r0 is the group's first row.
//   forward: m = row, n = out feature, k = in feature:  A = x[m, k],  B = W[n, k]
//   dinp:    m = row, n = in feature,  k = out feature: A = d[m, k],  B = W[k, n]
//   dweight: m = out,  n = in,          k = group row:   A = d[k, m],  B = x[k, n]
template <int K, typename T>
__device__ inline float load_a(const Groups& a, const T* x, const float* dout, int64_t r0,
                               int64_t m, int64_t k) {
  if constexpr (K == kForward) return to_f32(x[m * a.IN + k]);
  else if constexpr (K == kDInp) return rounded<T>(dout[m * a.OUT + k]);
  else return rounded<T>(dout[(r0 + k) * a.OUT + m]);
}
template <int K, typename T>
__device__ inline float load_b(const Groups& a, const T* w, const T* x, int64_t r0, int64_t k,
                               int64_t n) {
  if constexpr (K == kForward) return to_f32(w[n * a.IN + k]);
  else if constexpr (K == kDInp) return to_f32(w[k * a.IN + n]);
  else return to_f32(x[(r0 + k) * a.IN + n]);
}

// One block per tile of the table; T the operands' storage, TO the forward output's.
template <int K, typename T, typename TO>
__global__ void grouped_kernel(Groups a, const T* x, const float* dout, TO* out, float* dinp,
                               bool set) {
  __shared__ float As[kTile][kTile + 1], Bs[kTile][kTile + 1];  // [k][m], [k][n]
  const int64_t g = a.tiles[3 * blockIdx.x], m0 = a.tiles[3 * blockIdx.x + 1],
                n0 = a.tiles[3 * blockIdx.x + 2];
  const int64_t r0 = a.first[g], r1 = a.first[g + 1];
  const int64_t m_end = K == kDWeight ? a.OUT : r1;
  const int64_t n_end = K == kForward ? a.OUT : a.IN;
  const int64_t depth = K == kForward ? a.IN : (K == kDInp ? a.OUT : r1 - r0);
  const T* w = static_cast<const T*>(a.w[g]);
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kHalf + tx;
  float acc[2][2] = {};
  for (int64_t k0 = 0; k0 < depth; k0 += kTile) {
    // Each thread stages 4 elements of each operand; consecutive threads walk the operand's
    // contiguous dimension (k for x and d rows and W rows, else m or n).
    for (int e = 0; e < 4; ++e) {
      const int idx = tid + e * kHalf * kHalf, i = idx / kTile, j = idx % kTile;
      const int ak = K == kDWeight ? i : j, am = K == kDWeight ? j : i;
      const int bk = K == kForward ? j : i, bn = K == kForward ? i : j;
      const int64_t m = m0 + am, ka = k0 + ak, n = n0 + bn, kb = k0 + bk;
      As[ak][am] = m < m_end && ka < depth ? load_a<K, T>(a, x, dout, r0, m, ka) : 0.f;
      Bs[bk][bn] = n < n_end && kb < depth ? load_b<K, T>(a, w, x, r0, kb, n) : 0.f;
    }
    __syncthreads();
    for (int k = 0; k < kTile; ++k) {
      const float a0 = As[k][ty], a1 = As[k][ty + kHalf], b0 = Bs[k][tx], b1 = Bs[k][tx + kHalf];
      acc[0][0] += a0 * b0;
      acc[0][1] += a0 * b1;
      acc[1][0] += a1 * b0;
      acc[1][1] += a1 * b1;
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int64_t m = m0 + ty + i * kHalf, n = n0 + tx + j * kHalf;
      if (m >= m_end || n >= n_end) continue;
      if constexpr (K == kForward) {
        // A 16-bit output adds its bias rounded to that dtype (as linear_forward's epilogue).
        const float* b = a.bias[g];
        out[m * a.OUT + n] = from_f32<TO>(acc[i][j] + (b ? rounded<TO>(b[n]) : 0.f));
      } else if constexpr (K == kDInp) {
        float& d = dinp[m * a.IN + n];
        d = set ? acc[i][j] : d + acc[i][j];
      } else {
        a.dw[g][m * a.IN + n] += acc[i][j];
      }
    }
  // dbias (the f32 dout's column sums): the blocks at column 0, one thread per out feature.
  if constexpr (K == kDWeight) {
    float* db = a.db[g];
    const int64_t o = m0 + tid;
    if (db && n0 == 0 && tid < kTile && o < a.OUT) {
      float s = 0.f;
      for (int64_t r = r0; r < r1; ++r) s += dout[r * a.OUT + o];
      db[o] += s;
    }
  }
}

// The table of one launch on the device: pointers, row offsets and tiles in one upload. The
// buffer returns to the caching allocator after the launch, safe in stream order.
struct Table {
  Buffer buf;
  Groups groups{};
  unsigned n_tiles = 0;
};

// Tiles of rows (forward, dinp; cols = OUT or IN) or of dweight (OUT x IN per group with rows).
Table make_table(Kind kind, const void* const* weights, const float* const* biases,
                 float* const* dweights, float* const* dbiases, const int64_t* counts, int64_t G,
                 int64_t IN, int64_t OUT) {
  std::vector<int64_t> first(size_t(G) + 1, 0);
  std::vector<int32_t> tiles;
  for (int64_t g = 0; g < G; ++g) {
    MG_CHECK(counts[g] >= 0, "grouped linear: group ", g, " has ", counts[g], " rows");
    first[size_t(g) + 1] = first[size_t(g)] + counts[g];
    if (counts[g] == 0) continue;
    const int64_t m_begin = kind == kDWeight ? 0 : first[size_t(g)];
    const int64_t m_end = kind == kDWeight ? OUT : first[size_t(g) + 1];
    const int64_t n_end = kind == kForward ? OUT : IN;
    for (int64_t m = m_begin; m < m_end; m += kTile)
      for (int64_t n = 0; n < n_end; n += kTile)
        tiles.insert(tiles.end(), {int32_t(g), int32_t(m), int32_t(n)});
  }
  MG_CHECK(first[size_t(G)] < (int64_t(1) << 31), "grouped linear: ", first[size_t(G)],
           " rows exceed the tile table's 32-bit rows");
  Table t;
  t.n_tiles = unsigned(tiles.size() / 3);
  if (t.n_tiles == 0) return t;
  // [w | bias | dw | db] pointers, then first, then tiles.
  std::vector<const void*> ptrs(size_t(4 * G), nullptr);
  for (int64_t g = 0; g < G; ++g) {
    ptrs[size_t(g)] = weights[g];
    ptrs[size_t(G + g)] = biases ? biases[g] : nullptr;
    ptrs[size_t(2 * G + g)] = dweights ? dweights[g] : nullptr;
    ptrs[size_t(3 * G + g)] = dbiases ? dbiases[g] : nullptr;
  }
  const size_t pb = ptrs.size() * sizeof(void*), fb = first.size() * 8, tb = tiles.size() * 4;
  std::vector<char> host(pb + fb + tb);
  std::memcpy(host.data(), ptrs.data(), pb);
  std::memcpy(host.data() + pb, first.data(), fb);
  std::memcpy(host.data() + pb + fb, tiles.data(), tb);
  t.buf = Buffer(host.size());
  copy_to_device(t.buf.get(), host.data(), host.size());
  char* d = static_cast<char*>(t.buf.get());
  auto* p = reinterpret_cast<void**>(d);
  t.groups = {p, reinterpret_cast<const float* const*>(p + G),
              reinterpret_cast<float* const*>(p + 2 * G),
              reinterpret_cast<float* const*>(p + 3 * G),
              reinterpret_cast<const int64_t*>(d + pb),
              reinterpret_cast<const int32_t*>(d + pb + fb), IN, OUT};
  return t;
}

template <int K, typename T, typename TO>
void launch(const Table& t, const void* x, const float* dout, void* out, float* dinp, bool set) {
  if (t.n_tiles == 0) return;
  grouped_kernel<K, T, TO><<<t.n_tiles, dim3(kHalf, kHalf), 0, compute_stream()>>>(
      t.groups, static_cast<const T*>(x), dout, static_cast<TO*>(out), dinp, set);
  MG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void grouped_linear_forward(MatOut out, Mat inp, const void* const* weights,
                            const float* const* biases, const int64_t* counts, int64_t G,
                            int64_t IN, int64_t OUT) {
  MG_CHECK(out.dtype == DType::F32 || out.dtype == inp.dtype, "grouped linear output ",
           dtype_name(out.dtype), " from ", dtype_name(inp.dtype), " operands");
  const Table t = make_table(kForward, weights, biases, nullptr, nullptr, counts, G, IN, OUT);
  with_storage(out.dtype, [&]<typename TO>() {
    with_storage(inp.dtype, [&]<typename T>() {
      launch<kForward, T, TO>(t, inp.data, nullptr, out.data, nullptr, false);
    });
  });
}

void grouped_linear_backward(float* dinp, float* const* dweights, float* const* dbiases,
                             const float* dout, Mat inp, const void* const* weights,
                             const int64_t* counts, int64_t G, int64_t IN, int64_t OUT,
                             GradWrite dinp_write) {
  with_storage(inp.dtype, [&]<typename T>() {
    if (dinp) {
      const Table t = make_table(kDInp, weights, nullptr, nullptr, nullptr, counts, G, IN, OUT);
      launch<kDInp, T, float>(t, inp.data, dout, nullptr, dinp, dinp_write == GradWrite::Set);
    }
    const Table t = make_table(kDWeight, weights, nullptr, dweights, dbiases, counts, G, IN, OUT);
    launch<kDWeight, T, float>(t, inp.data, dout, nullptr, nullptr, false);
  });
}

}  // namespace mg::cuda
