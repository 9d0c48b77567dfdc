// Grouped linear layers (a mixture-of-experts layer's local experts, --moe-grouped-gemm): the
// G per-group GEMMs of linear_forward / linear_backward (Y_g = X_g W_g^T + b_g) as one OpenMP
// region over a list of tiles built from the row counts, each tile one single-threaded oneDNN
// call (oneDNN runs serially inside a parallel region): sgemm for f32, the cached matmul
// primitives of gemm_lowp for 16-bit operands (AMX / AVX512_BF16 kernels). Experts with few rows
// still keep every thread busy, and row counts are cut into kRows pieces and then powers of two,
// so a 16-bit call's primitive is one of a few shapes, never one per distinct count (a 16-bit
// dweight's last few rows go widened through sgemm instead). 16-bit results match the per-group
// ops up to the order of the fp32 sums (products of 16-bit values are exact in f32).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/half.h"
#include "backend/cpu/staging.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/timers.h"

namespace mg::cpu {

namespace {

// Tiles: a forward / dinp output block of <= kRows rows, or a dweight block of all its columns
// summed over its group's rows in pieces of <= kRows; the blocks are cut along the other
// dimension only as far as it takes to give each thread kTilesPerThread tiles.
constexpr int64_t kRows = 512, kTilesPerThread = 4;
// A 16-bit dweight's last rows (fewer than this) run widened through sgemm: a oneDNN matmul
// call on a handful of rows costs more than its arithmetic.
constexpr int64_t kWidenRows = 32;

// Block [m0, m1) x [n0, n1) of group g's output.
struct Tile {
  int64_t g, m0, m1, n0, n1;
};

// first[g] = the first row of group g; first[G] = all rows.
std::vector<int64_t> row_offsets(const int64_t* counts, int64_t G) {
  std::vector<int64_t> first(size_t(G) + 1, 0);
  for (int64_t g = 0; g < G; ++g) {
    MG_CHECK(counts[g] >= 0, "grouped linear: group ", g, " has ", counts[g], " rows");
    first[size_t(g) + 1] = first[size_t(g)] + counts[g];
  }
  return first;
}

// Calls f(r, r_end) on [r0, r1) cut into pieces of kRows, then of descending powers of two
// down to min_piece, then what is left (fewer than min_piece rows) as one piece.
template <typename F>
void row_pieces(int64_t r0, int64_t r1, int64_t min_piece, F&& f) {
  for (; r1 - r0 >= kRows; r0 += kRows) f(r0, r0 + kRows);
  for (int64_t p = kRows / 2; p >= min_piece; p /= 2)
    if (r1 - r0 >= p) {
      f(r0, r0 + p);
      r0 += p;
    }
  if (r0 < r1) f(r0, r1);
}

// The width of the column blocks that turn `pieces` row pieces into kTilesPerThread tiles per
// thread: as wide as that allows (and at least 64 columns, or all of them).
int64_t block_width(int64_t pieces, int64_t cols) {
  const int64_t want = kTilesPerThread * omp_get_max_threads();
  const int64_t blocks =
      std::max<int64_t>(1, std::min((want + pieces - 1) / std::max<int64_t>(pieces, 1), cols / 64));
  return (cols + blocks - 1) / blocks;
}

// Row pieces of each group x column blocks of [0, cols); f32 (sgemm: no primitives) keeps a
// group's last < kRows rows in one piece. The columns are split only as far as it takes to give
// every thread kTilesPerThread tiles: each oneDNN call has a fixed cost (and packs its block of
// the weight), so fewer, larger tiles run faster.
std::vector<Tile> row_tiles(const std::vector<int64_t>& first, int64_t cols, DType t) {
  std::vector<Tile> pieces;
  for (size_t g = 0; g + 1 < first.size(); ++g)
    row_pieces(first[g], first[g + 1], t == DType::F32 ? kRows : 1, [&](int64_t r0, int64_t r1) {
      pieces.push_back({int64_t(g), r0, r1, 0, cols});
    });
  const int64_t width = block_width(int64_t(pieces.size()), cols);
  std::vector<Tile> tiles;
  for (const Tile& p : pieces)
    for (int64_t c = 0; c < cols; c += width)
      tiles.push_back({p.g, p.m0, p.m1, c, std::min(cols, c + width)});
  return tiles;
}

// Rows [r0, r1) x columns [c0, c1) of a 16-bit matrix m with row length ld, widened into this
// thread's buffer `slot` as a dense f32 block.
const float* widened(Mat m, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int slot) {
  thread_local std::vector<float> bufs[2];
  std::vector<float>& b = bufs[slot];
  const int64_t w = c1 - c0;
  if (b.size() < size_t((r1 - r0) * w)) b.resize(size_t((r1 - r0) * w));
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c)
      b[size_t((r - r0) * w + c - c0)] = load_f32(m.data, m.dtype, r * ld + c);
  return b.data();
}

// m moved by `elements`.
Mat at(Mat m, int64_t elements) {
  return {static_cast<const char*>(m.data) + elements * int64_t(dtype_size(m.dtype)), m.dtype};
}

// C[M,N] (= or +=) op(A) op(B) on this thread: sgemm for f32, gemm_lowp for 16-bit operands.
void tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, Mat A, int64_t lda, Mat B,
               int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  if (A.dtype == DType::F32)
    gemm(ta, tb, M, N, K, 1.f, static_cast<const float*>(A.data), lda,
         static_cast<const float*>(B.data), ldb, accumulate ? 1.f : 0.f, C, ldc);
  else gemm_lowp(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

}  // namespace

void grouped_linear_forward(MatOut out16, Mat inp, const void* const* weights,
                            const float* const* biases, const int64_t* counts, int64_t G,
                            int64_t IN, int64_t OUT) {
  timers::Scope timer(timers::kGemm);
  MG_CHECK(out16.dtype == DType::F32 || out16.dtype == inp.dtype, "grouped linear output ",
           dtype_name(out16.dtype), " from ", dtype_name(inp.dtype), " operands");
  const std::vector<int64_t> first = row_offsets(counts, G);
  const int64_t N = first[size_t(G)];
  float* out = f32_result(out16, N * OUT);
  // A 16-bit output adds its bias rounded to that dtype, as linear_forward does.
  std::vector<float> rounded_bias;
  if (biases && out16.dtype != DType::F32) {
    rounded_bias.assign(size_t(G * OUT), 0.f);
    for (int64_t g = 0; g < G; ++g)
      if (biases[g]) round_through(rounded_bias.data() + g * OUT, biases[g], out16.dtype, OUT);
  }
  const std::vector<Tile> tiles = row_tiles(first, OUT, inp.dtype);
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < tiles.size(); ++i) {
    const Tile t = tiles[i];
    const float* b = biases ? biases[t.g] : nullptr;
    if (b && out16.dtype != DType::F32) b = rounded_bias.data() + t.g * OUT;
    for (int64_t n = t.m0; b && n < t.m1; ++n)
      std::memcpy(out + n * OUT + t.n0, b + t.n0, size_t(t.n1 - t.n0) * sizeof(float));
    tile_gemm(false, true, t.m1 - t.m0, t.n1 - t.n0, IN, at(inp, t.m0 * IN), IN,
              at({weights[t.g], inp.dtype}, t.n0 * IN), IN, b != nullptr, out + t.m0 * OUT + t.n0,
              OUT);
  }
  store_result(out16, out, N * OUT);
}

void grouped_linear_backward(float* dinp, float* const* dweights, float* const* dbiases,
                             const float* dout, Mat inp, const void* const* weights,
                             const int64_t* counts, int64_t G, int64_t IN, int64_t OUT,
                             GradWrite dinp_write) {
  timers::Scope timer(timers::kGemm);
  const std::vector<int64_t> first = row_offsets(counts, G);
  const int64_t N = first[size_t(G)];
  // The GEMMs read dout rounded to a 16-bit operand dtype (as linear_backward); dbias the f32
  // dout.
  thread_local std::vector<uint16_t> dout16;
  Mat d = dout;
  if (inp.dtype != DType::F32) {
    dout16.resize(size_t(N * OUT));
    cast_from_f32(dout16.data(), inp.dtype, dout, N * OUT);
    d = {dout16.data(), inp.dtype};
  }
  // dinp tiles: group row pieces x IN blocks; dweight tiles: group x OUT block (all IN).
  const std::vector<Tile> dinp_tiles = dinp ? row_tiles(first, IN, inp.dtype) : std::vector<Tile>();
  const int64_t busy = std::count_if(counts, counts + G, [](int64_t c) { return c > 0; });
  const int64_t width = block_width(busy, OUT);
  std::vector<Tile> dw_tiles;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t o = 0; counts[g] > 0 && o < OUT; o += width)
      dw_tiles.push_back({g, o, std::min(OUT, o + width), 0, IN});
  const size_t n_dinp = dinp_tiles.size();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < n_dinp + dw_tiles.size(); ++i) {
    if (i < n_dinp) {  // dinp[rows, cols] (+)= d[rows, :] W_g[:, cols]
      const Tile t = dinp_tiles[i];
      tile_gemm(false, false, t.m1 - t.m0, t.n1 - t.n0, OUT, at(d, t.m0 * OUT), OUT,
                at({weights[t.g], inp.dtype}, t.n0), IN, dinp_write == GradWrite::Add,
                dinp + t.m0 * IN + t.n0, IN);
      continue;
    }
    // dW_g[outs, :] += d[rows_g, outs]^T x[rows_g, :], piece by piece of rows; and dbias[outs]
    // (in double, row by row, as bias_backward does).
    const Tile t = dw_tiles[i - n_dinp];
    const int64_t r0 = first[size_t(t.g)], r1 = first[size_t(t.g) + 1];
    float* dw = dweights[t.g] + t.m0 * IN + t.n0;
    row_pieces(r0, r1, inp.dtype == DType::F32 ? kRows : kWidenRows, [&](int64_t p0, int64_t p1) {
      if (inp.dtype == DType::F32 || p1 - p0 >= kWidenRows)
        return tile_gemm(true, false, t.m1 - t.m0, t.n1 - t.n0, p1 - p0, at(d, p0 * OUT + t.m0),
                         OUT, at(inp, p0 * IN + t.n0), IN, true, dw, IN);
      const float* d32 = widened(d, OUT, p0, p1, t.m0, t.m1, 0);
      const float* x32 = widened(inp, IN, p0, p1, t.n0, t.n1, 1);
      gemm(true, false, t.m1 - t.m0, t.n1 - t.n0, p1 - p0, 1.f, d32, t.m1 - t.m0, x32, t.n1 - t.n0,
           1.f, dw, IN);
    });
    float* db = dbiases ? dbiases[t.g] : nullptr;
    if (!db) continue;
    std::vector<double> acc(size_t(t.m1 - t.m0), 0.0);
    for (int64_t n = r0; n < r1; ++n)
      for (int64_t o = t.m0; o < t.m1; ++o) acc[o - t.m0] += dout[n * OUT + o];
    for (int64_t o = t.m0; o < t.m1; ++o) db[o] += float(acc[o - t.m0]);
  }
}

}  // namespace mg::cpu
