// CPU vs CUDA kernel parity (label gpu): every op of backend/cuda, forward and backward, on
// random data of several shapes (ragged tails included), against its backend/cpu twin. The
// error printed and checked is normalised: max |gpu - cpu| / max |cpu| over the output, with
// dtype-aware tolerances (f32 1e-5, bf16/f16 1e-2). Without a GPU every test reports SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/half.h"
#include "core/error.h"
#include "backend/cuda/device.h"
#include "testing/require_gpu.h"
#include "backend/cuda/ops.h"
#include "backend/ops.h"

namespace mg {
namespace {

using Vec = std::vector<float>;
using cpu::GradWrite;
constexpr double kTolF32 = 1e-5, kTol16 = 1e-2;

Vec random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, scale);
  Vec v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// A device copy of a host vector, and back.
template <typename T>
cuda::Buffer up(const std::vector<T>& h) {
  cuda::Buffer b(h.size() * sizeof(T));
  if (!h.empty()) cuda::copy_to_device(b.get(), h.data(), h.size() * sizeof(T));
  return b;
}
Vec down(const cuda::Buffer& b, size_t n) {
  Vec h(n);
  if (n) cuda::copy_to_host(h.data(), b.get(), n * sizeof(float));
  return h;
}

// Infinite where the GPU has a non-finite value the CPU does not (std::max would skip a NaN).
double norm_err(const Vec& gpu, const Vec& cpu) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isfinite(gpu[i]) != std::isfinite(cpu[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(gpu[i]) - double(cpu[i])));
    ref = std::max(ref, std::fabs(double(cpu[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

void expect_close(const char* what, const std::string& shape, const Vec& gpu, const Vec& cpu,
                  double tol) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  const double e = norm_err(gpu, cpu);
  std::printf("  %-28s %-26s max err %.3e (tol %.0e)\n", what, shape.c_str(), e, tol);
  EXPECT_LE(e, tol) << what << " " << shape;
}

// x rounded to the 16-bit dtype t (bf16 or f16).
std::vector<uint16_t> to16(const Vec& x, DType t) {
  MG_CHECK(t == DType::BF16 || t == DType::F16, "to16 to ", dtype_name(t));
  std::vector<uint16_t> r(x.size());
  cpu::cast_from_f32(r.data(), t, x.data(), int64_t(x.size()));
  return r;
}

// n 16-bit values of dtype t from the device (or a host vector), widened.
Vec down16(const cuda::Buffer& b, size_t n, DType t) {
  std::vector<uint16_t> h(n);
  if (n) cuda::copy_to_host(h.data(), b.get(), n * 2);
  Vec r(n);
  cpu::cast_to_f32(r.data(), h.data(), t, int64_t(n));
  return r;
}
Vec widen(const std::vector<uint16_t>& h, DType t) {
  Vec r(h.size());
  cpu::cast_to_f32(r.data(), h.data(), t, int64_t(h.size()));
  return r;
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

TEST(CudaParity, Gemm) {
  MG_REQUIRE_GPU();
  std::printf("%s\n", cuda::device_name().c_str());
  for (auto [M, N, K] :
       {std::tuple<int64_t, int64_t, int64_t>{64, 48, 32}, {77, 129, 65}, {256, 768, 512}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (DType t : {DType::F32, DType::BF16}) {
          const int64_t lda = ta ? M : K, ldb = tb ? K : N;
          Vec A = random_vec(size_t(M * K), 1), B = random_vec(size_t(K * N), 2),
              C0 = random_vec(size_t(M * N), 3);
          Vec ref = C0;
          if (t == DType::F32) {
            cpu::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, ref.data(), N);
            auto a = up(A), b = up(B), c = up(C0);
            cuda::gemm(ta, tb, M, N, K, 0.5f, a.as<float>(), lda, b.as<float>(), ldb, 1.0f,
                       c.as<float>(), N);
            expect_close(ta ? (tb ? "gemm f32 TT" : "gemm f32 TN")
                            : (tb ? "gemm f32 NT" : "gemm f32 NN"),
                         dims({M, N, K}), down(c, ref.size()), ref, kTolF32);
          } else {
            const auto A16 = to16(A, t), B16 = to16(B, t);
            cpu::gemm_lowp(ta, tb, M, N, K, {A16.data(), t}, lda, {B16.data(), t}, ldb, true,
                           ref.data(), N);
            auto a = up(A16), b = up(B16), c = up(C0);
            cuda::gemm(ta, tb, M, N, K, 1.0f, {a.get(), t}, lda, {b.get(), t}, ldb, 1.0f,
                       c.as<float>(), N);
            expect_close("gemm bf16 (fp32 accum)", dims({M, N, K}), down(c, ref.size()), ref,
                         kTolF32 * 10);  // same rounded operands: only the sum order differs
          }
        }
  }
}

TEST(CudaParity, LinearForwardBackward) {
  MG_REQUIRE_GPU();
  for (auto [N, IN, OUT] : {std::tuple<int64_t, int64_t, int64_t>{33, 40, 24}, {256, 768, 2304}}) {
    for (DType t : {DType::F32, DType::BF16}) {
      const double tol = t == DType::F32 ? kTolF32 : kTol16;
      Vec x = random_vec(size_t(N * IN), 4), w = random_vec(size_t(OUT * IN), 5, 0.05f),
          bias = random_vec(static_cast<size_t>(OUT), 6), dy = random_vec(size_t(N * OUT), 7);
      // (f32 runs use x and w themselves: rounding them to 16 bits would write 4 bytes each)
      const auto x16 = t == DType::F32 ? std::vector<uint16_t>() : to16(x, t),
                 w16 = t == DType::F32 ? std::vector<uint16_t>() : to16(w, t);
      const cpu::Mat xm = t == DType::F32 ? cpu::Mat(x.data()) : cpu::Mat(x16.data(), t);
      const cpu::Mat wm = t == DType::F32 ? cpu::Mat(w.data()) : cpu::Mat(w16.data(), t);
      Vec y(size_t(N * OUT)), dx(size_t(N * IN), 0.5f), dw(size_t(OUT * IN), 0.25f),
          db(static_cast<size_t>(OUT), 1.0f);
      Vec dx0 = dx, dw0 = dw, db0 = db;
      cpu::linear_forward(y.data(), xm, wm, bias.data(), N, IN, OUT);
      cpu::linear_backward(dx.data(), dw.data(), db.data(), dy.data(), xm, wm, N, IN, OUT);
      auto gx = t == DType::F32 ? up(x) : up(x16), gw = t == DType::F32 ? up(w) : up(w16);
      auto gb = up(bias), gdy = up(dy), gy = cuda::Buffer(y.size() * 4), gdx = up(dx0),
           gdw = up(dw0), gdb = up(db0);
      const cuda::Mat gxm{gx.get(), t}, gwm{gw.get(), t};
      cuda::linear_forward(gy.as<float>(), gxm, gwm, gb.as<float>(), N, IN, OUT);
      cuda::linear_backward(gdx.as<float>(), gdw.as<float>(), gdb.as<float>(), gdy.as<float>(), gxm,
                            gwm, N, IN, OUT);
      const std::string s = dims({N, IN, OUT}) + (t == DType::F32 ? " f32" : " bf16");
      expect_close("linear forward (bias epilogue)", s, down(gy, y.size()), y, tol);
      expect_close("linear backward dinp", s, down(gdx, dx.size()), dx, tol);
      expect_close("linear backward dweight", s, down(gdw, dw.size()), dw, tol);
      expect_close("linear backward dbias", s, down(gdb, db.size()), db, kTolF32);
      {  // dinp stored (beta 0) over garbage
        Vec dxs(dx.size(), 0.f), dws = dw0;
        cpu::linear_backward(dxs.data(), dws.data(), nullptr, dy.data(), xm, wm, N, IN, OUT,
                             GradWrite::Set);
        auto gdxs = up(Vec(dx.size(), NAN)), gdws = up(dw0);
        cuda::linear_backward(gdxs.as<float>(), gdws.as<float>(), nullptr, gdy.as<float>(), gxm,
                              gwm, N, IN, OUT, GradWrite::Set);
        expect_close("linear backward dinp (set)", s, down(gdxs, dxs.size()), dxs, tol);
      }
      Vec y0(y.size());
      cpu::linear_forward(y0.data(), xm, wm, nullptr, N, IN, OUT);
      cuda::linear_forward(gy.as<float>(), gxm, gwm, nullptr, N, IN, OUT);
      expect_close("linear forward (no bias)", s, down(gy, y0.size()), y0, tol);
      // The residual add in the epilogue: out = residual + (x W^T + bias).
      Vec res = random_vec(y.size(), 17), yr(y.size());
      cpu::linear_residual_forward(yr.data(), xm, wm, bias.data(), res.data(), N, IN, OUT);
      auto gres = up(res);
      cuda::linear_residual_forward(gy.as<float>(), gxm, gwm, gb.as<float>(), gres.as<float>(), N,
                                    IN, OUT);
      expect_close("linear + residual epilogue", s, down(gy, yr.size()), yr, tol);
      if (t == DType::F32) {
        // Operands and bias one float into their blocks (4-byte aligned, as parameters packed
        // at odd offsets are): other cuBLASLt plans, and the bias copied to an aligned block.
        Vec xs(x.size() + 1), ws(w.size() + 1), bs(bias.size() + 1);
        std::copy(x.begin(), x.end(), xs.begin() + 1);
        std::copy(w.begin(), w.end(), ws.begin() + 1);
        std::copy(bias.begin(), bias.end(), bs.begin() + 1);
        auto gxs = up(xs), gws = up(ws), gbs = up(bs);
        cuda::Buffer gys((y.size() + 1) * 4);
        cuda::linear_forward(gys.as<float>() + 1, {gxs.as<float>() + 1, t},
                             {gws.as<float>() + 1, t}, gbs.as<float>() + 1, N, IN, OUT);
        Vec got = down(gys, y.size() + 1);
        got.erase(got.begin());
        expect_close("linear forward (offset 4 B)", s, got, y, tol);
        continue;
      }
      // A 16-bit output: the GEMM's own output type, the bias (rounded to it) in the epilogue;
      // bf16 and f16 operands.
      for (DType o : {DType::BF16, DType::F16})
        for (const float* bp :
             {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
          const bool gb_on = bp != nullptr;
          const auto xo = to16(x, o), wo = to16(w, o);
          std::vector<uint16_t> y16(y.size());
          cpu::linear_forward({y16.data(), o}, {xo.data(), o}, {wo.data(), o}, bp, N, IN, OUT);
          auto gxo = up(xo), gwo = up(wo);
          cuda::Buffer gy16(y.size() * 2);
          cuda::linear_forward({gy16.get(), o}, {gxo.get(), o}, {gwo.get(), o},
                               gb_on ? gb.as<float>() : nullptr, N, IN, OUT);
          const std::string what =
              std::string("linear forward -> ") + dtype_name(o) + (gb_on ? " (bias)" : "");
          expect_close(what.c_str(), s, down16(gy16, y.size(), o), widen(y16, o), kTol16);
        }
    }
  }
}

// The experts of a MoE layer in one pass: uneven counts with empty groups, row and column
// tails of the 32-wide tiles, null and present biases, dinp added and stored; f32 and bf16
// (bf16 out in forward).
TEST(CudaParity, GroupedLinearForwardBackward) {
  MG_REQUIRE_GPU();
  for (const auto& [counts, IN, OUT] :
       {std::tuple<std::vector<int64_t>, int64_t, int64_t>{{0, 37, 1, 0, 70}, 45, 33},
        {{5, 0, 64, 3}, 64, 96}}) {
    for (DType t : {DType::F32, DType::BF16}) {
      const int64_t G = int64_t(counts.size());
      int64_t N = 0;
      for (int64_t c : counts) N += c;
      // f32 results from the same rounded operands differ only in the order of the sums.
      const double tol = kTolF32 * (t == DType::F32 ? 1 : 10);
      const Vec x = random_vec(size_t(N * IN), 31), w = random_vec(size_t(G * OUT * IN), 32, 0.1f),
                bias = random_vec(size_t(G * OUT), 33), dy = random_vec(size_t(N * OUT), 34);
      const auto x16 = t == DType::F32 ? std::vector<uint16_t>() : to16(x, t),
                 w16 = t == DType::F32 ? std::vector<uint16_t>() : to16(w, t);
      const size_t es = t == DType::F32 ? 4 : 2;
      const void* xh = t == DType::F32 ? static_cast<const void*>(x.data()) : x16.data();
      const void* wh = t == DType::F32 ? static_cast<const void*>(w.data()) : w16.data();
      auto gx = t == DType::F32 ? up(x) : up(x16), gw = t == DType::F32 ? up(w) : up(w16);
      auto gb = up(bias), gdy = up(dy);
      // Per group: host pointers for the CPU, device pointers for CUDA (bias on even groups).
      std::vector<const void*> wc, wg;
      std::vector<const float*> bc, bg;
      for (int64_t g = 0; g < G; ++g) {
        wc.push_back(static_cast<const char*>(wh) + size_t(g * OUT * IN) * es);
        wg.push_back(static_cast<const char*>(gw.get()) + size_t(g * OUT * IN) * es);
        bc.push_back(g % 2 ? nullptr : bias.data() + g * OUT);
        bg.push_back(g % 2 ? nullptr : gb.as<float>() + g * OUT);
      }
      const std::string s = dims({G, N, IN, OUT}) + (t == DType::F32 ? " f32" : " bf16");
      // Forward: out in the operands' dtype, with biases; and f32 out without.
      std::vector<uint16_t> y16(size_t(N * OUT));
      Vec y(size_t(N * OUT));
      cuda::Buffer gy(size_t(N * OUT) * 4);
      if (t == DType::F32) {
        cpu::grouped_linear_forward(y.data(), x.data(), wc.data(), bc.data(), counts.data(), G, IN,
                                    OUT);
        cuda::grouped_linear_forward(gy.as<float>(), {gx.get(), t}, wg.data(), bg.data(),
                                     counts.data(), G, IN, OUT);
        expect_close("grouped linear forward", s, down(gy, y.size()), y, tol);
      } else {
        cpu::grouped_linear_forward({y16.data(), t}, {x16.data(), t}, wc.data(), bc.data(),
                                    counts.data(), G, IN, OUT);
        cuda::grouped_linear_forward({gy.get(), t}, {gx.get(), t}, wg.data(), bg.data(),
                                     counts.data(), G, IN, OUT);
        expect_close("grouped linear forward -> bf16", s, down16(gy, y.size(), t), widen(y16, t),
                     kTol16);
      }
      cpu::grouped_linear_forward(y.data(), {xh, t}, wc.data(), nullptr, counts.data(), G, IN, OUT);
      cuda::grouped_linear_forward(gy.as<float>(), {gx.get(), t}, wg.data(), nullptr, counts.data(),
                                   G, IN, OUT);
      expect_close("grouped linear forward (no bias)", s, down(gy, y.size()), y, tol);
      // Backward: dweight and dbias accumulate; dinp added, then stored over NaNs.
      for (GradWrite write : {GradWrite::Add, GradWrite::Set}) {
        Vec dx(size_t(N * IN), write == GradWrite::Add ? 0.5f : NAN),
            dw(size_t(G * OUT * IN), 0.25f), db(size_t(G * OUT), 1.f);
        auto gdx = up(dx), gdw = up(dw), gdb = up(db);
        std::vector<float*> dwc, dwg, dbc, dbg;
        for (int64_t g = 0; g < G; ++g) {
          dwc.push_back(dw.data() + g * OUT * IN);
          dwg.push_back(gdw.as<float>() + g * OUT * IN);
          dbc.push_back(g % 2 ? nullptr : db.data() + g * OUT);
          dbg.push_back(g % 2 ? nullptr : gdb.as<float>() + g * OUT);
        }
        cpu::grouped_linear_backward(dx.data(), dwc.data(), dbc.data(), dy.data(), {xh, t},
                                     wc.data(), counts.data(), G, IN, OUT, write);
        cuda::grouped_linear_backward(gdx.as<float>(), dwg.data(), dbg.data(), gdy.as<float>(),
                                      {gx.get(), t}, wg.data(), counts.data(), G, IN, OUT, write);
        const std::string sw = s + (write == GradWrite::Set ? " set" : " add");
        expect_close("grouped linear dinp", sw, down(gdx, dx.size()), dx, tol);
        expect_close("grouped linear dweight", sw, down(gdw, dw.size()), dw, tol);
        expect_close("grouped linear dbias", sw, down(gdb, db.size()), db, kTolF32);
      }
    }
  }
}

TEST(CudaParity, EmbeddingForwardBackward) {
  MG_REQUIRE_GPU();
  const int64_t V = 97, H = 48, N = 131, rb = 20, re = 80;  // a vocab-parallel shard [20, 80)
  std::vector<int32_t> ids(N);
  std::mt19937 gen(8);
  for (auto& i : ids) i = int32_t(gen() % V);
  ids[3] = ids[7] = ids[11] = 33;  // repeated tokens sum in order
  Vec table = random_vec(size_t((re - rb) * H), 9), dout = random_vec(size_t(N * H), 10);
  Vec out(static_cast<size_t>(N * H)), dtable = random_vec(table.size(), 30);  // += checked
  const Vec dtable0 = dtable;
  cpu::embedding_forward(out.data(), ids.data(), table.data(), rb, re, N, H, false);
  cpu::embedding_backward(dtable.data(), dout.data(), ids.data(), rb, re, N, H);
  auto gids = up(ids), gt = up(table), gout = cuda::Buffer(out.size() * 4), gd = up(dout),
       gdt = up(dtable0);
  cuda::embedding_forward(gout.as<float>(), gids.as<int32_t>(), gt.as<float>(), rb, re, N, H,
                          false);
  cuda::embedding_backward(gdt.as<float>(), gd.as<float>(), gids.as<int32_t>(), rb, re, N, H);
  expect_close("embedding forward", dims({N, H}), down(gout, out.size()), out, 0.0);
  // The same adds in the same (position) order as the CPU loop: bit for bit.
  expect_close("embedding backward", dims({N, H}), down(gdt, dtable.size()), dtable, 0.0);
  // A bf16 table, accumulating into the output.
  const auto t16 = to16(table, DType::BF16);
  Vec acc = dout;
  cpu::embedding_forward(acc.data(), ids.data(), {t16.data(), DType::BF16}, rb, re, N, H, true);
  auto gt16 = up(t16), gacc = up(dout);
  cuda::embedding_forward(gacc.as<float>(), gids.as<int32_t>(), {gt16.get(), DType::BF16}, rb, re,
                          N, H, true);
  expect_close("embedding forward bf16 +=", dims({N, H}), down(gacc, acc.size()), acc, 0.0);
}

TEST(CudaParity, LayerNormGeluResidualBias) {
  MG_REQUIRE_GPU();
  for (auto [N, C] : {std::pair<int64_t, int64_t>{37, 40}, {256, 768}, {1000, 1283}}) {
    const size_t n = size_t(N * C);
    Vec x = random_vec(n, 11), w = random_vec(static_cast<size_t>(C), 12),
        b = random_vec(static_cast<size_t>(C), 13), dy = random_vec(n, 14);
    Vec y(n), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), dx(n, 0.1f),
        dw(static_cast<size_t>(C), 0.3f), db(static_cast<size_t>(C), -0.2f);  // += checked
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                           1e-5f);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    auto gx = up(x), gw = up(w), gb = up(b), gdy = up(dy), gy = cuda::Buffer(n * 4),
         gm = cuda::Buffer(static_cast<size_t>(N) * 4),
         gr = cuda::Buffer(static_cast<size_t>(N) * 4), gdx = up(Vec(n, 0.1f)),
         gdw = up(Vec(static_cast<size_t>(C), 0.3f)), gdb = up(Vec(static_cast<size_t>(C), -0.2f));
    cuda::layernorm_forward(gy.as<float>(), gm.as<float>(), gr.as<float>(), gx.as<float>(),
                            gw.as<float>(), gb.as<float>(), N, C, 1e-5f);
    cuda::layernorm_backward(gdx.as<float>(), gdw.as<float>(), gdb.as<float>(), gdy.as<float>(),
                             gx.as<float>(), gw.as<float>(), gm.as<float>(), gr.as<float>(), N, C);
    const std::string s = dims({N, C});
    expect_close("layernorm forward", s, down(gy, n), y, kTolF32);
    expect_close("layernorm rstd", s, down(gr, static_cast<size_t>(N)), rstd, kTolF32);
    expect_close("layernorm backward dinp", s, down(gdx, n), dx, kTolF32);
    expect_close("layernorm backward dweight", s, down(gdw, static_cast<size_t>(C)), dw, kTolF32);
    expect_close("layernorm backward dbias", s, down(gdb, static_cast<size_t>(C)), db, kTolF32);
    for (DType t : {DType::BF16, DType::F16}) {  // stored straight into a 16-bit output
      std::vector<uint16_t> y16(n);
      cpu::layernorm_forward({y16.data(), t}, mean.data(), rstd.data(), x.data(), w.data(),
                             b.data(), N, C, 1e-5f);
      cuda::Buffer gy16(n * 2);
      cuda::layernorm_forward({gy16.get(), t}, gm.as<float>(), gr.as<float>(), gx.as<float>(),
                              gw.as<float>(), gb.as<float>(), N, C, 1e-5f);
      expect_close(t == DType::BF16 ? "layernorm forward -> bf16" : "layernorm forward -> f16", s,
                   down16(gy16, n, t), widen(y16, t), kTol16);
    }

    Vec g(n), dg(n, 0.2f);
    cpu::gelu_forward(g.data(), x.data(), int64_t(n));
    cpu::gelu_backward(dg.data(), x.data(), dy.data(), int64_t(n));
    auto gg = cuda::Buffer(n * 4), gdg = up(Vec(n, 0.2f));
    cuda::gelu_forward(gg.as<float>(), gx.as<float>(), int64_t(n));
    cuda::gelu_backward(gdg.as<float>(), gx.as<float>(), gdy.as<float>(), int64_t(n));
    expect_close("gelu forward", s, down(gg, n), g, kTolF32);
    expect_close("gelu backward", s, down(gdg, n), dg, kTolF32);
    {  // the input as a 16-bit model stores it
      const auto x16 = to16(x, DType::BF16);
      Vec dg16(n, 0.2f);
      cpu::gelu_backward(dg16.data(), {x16.data(), DType::BF16}, dy.data(), int64_t(n));
      auto gx16 = up(x16), gdg16 = up(Vec(n, 0.2f));
      cuda::gelu_backward(gdg16.as<float>(), {gx16.get(), DType::BF16}, gdy.as<float>(),
                          int64_t(n));
      expect_close("gelu backward (bf16 input)", s, down(gdg16, n), dg16, kTolF32);
      Vec dgs(n, 0.f);
      cpu::gelu_backward(dgs.data(), {x16.data(), DType::BF16}, dy.data(), int64_t(n),
                         GradWrite::Set);
      auto gdgs = up(Vec(n, NAN));
      cuda::gelu_backward(gdgs.as<float>(), {gx16.get(), DType::BF16}, gdy.as<float>(), int64_t(n),
                          GradWrite::Set);
      expect_close("gelu backward (set)", s, down(gdgs, n), dgs, kTolF32);
    }
    // GELU of a 16-bit model's stored fc1 output into 16-bit storage: the same bits as the
    // f32 GELU of the widened input rounded, and the CPU's within 16-bit rounding.
    for (DType t : {DType::BF16, DType::F16}) {
      const auto x16 = to16(x, t);
      std::vector<uint16_t> y16(n);
      cpu::gelu_forward({y16.data(), t}, {x16.data(), t}, int64_t(n));
      auto gx16 = up(x16);
      cuda::Buffer gy16(n * 2), gxw(n * 4), gyw(n * 4), ref16(n * 2);
      cuda::gelu_forward({gy16.get(), t}, {gx16.get(), t}, int64_t(n));
      cuda::cast_to_f32(gxw.as<float>(), gx16.get(), t, int64_t(n));
      cuda::gelu_forward(gyw.as<float>(), gxw.as<float>(), int64_t(n));
      cuda::cast_from_f32(ref16.get(), t, gyw.as<float>(), int64_t(n));
      std::vector<uint16_t> got(n), ref(n);
      cuda::copy_to_host(got.data(), gy16.get(), n * 2);
      cuda::copy_to_host(ref.data(), ref16.get(), n * 2);
      EXPECT_EQ(got, ref) << "16-bit gelu_forward against the f32 one rounded, " << dtype_name(t);
      expect_close(t == DType::BF16 ? "gelu forward bf16" : "gelu forward f16", s, widen(got, t),
                   widen(y16, t), kTol16);
    }

    Vec r(n), da(n, 1.f), dbb(n, 2.f);
    cpu::residual_forward(r.data(), x.data(), dy.data(), int64_t(n));
    cpu::residual_backward(da.data(), dbb.data(), dy.data(), int64_t(n));
    auto grr = cuda::Buffer(n * 4), gda = up(Vec(n, 1.f)), gdbb = up(Vec(n, 2.f));
    cuda::residual_forward(grr.as<float>(), gx.as<float>(), gdy.as<float>(), int64_t(n));
    cuda::residual_backward(gda.as<float>(), gdbb.as<float>(), gdy.as<float>(), int64_t(n));
    expect_close("residual forward", s, down(grr, n), r, 0.0);
    expect_close("residual backward da", s, down(gda, n), da, 0.0);
    expect_close("residual backward db", s, down(gdbb, n), dbb, 0.0);
    Vec sc = x;
    cpu::scale_inplace(sc.data(), 0.37f, int64_t(n));
    auto gsc = up(x);
    cuda::scale_inplace(gsc.as<float>(), 0.37f, int64_t(n));
    expect_close("scale in place", s, down(gsc, n), sc, 0.0);

    Vec ob = x, bsum(static_cast<size_t>(C), 0.5f);
    cpu::bias_add_forward(ob.data(), b.data(), N, C);
    cpu::bias_backward(bsum.data(), dy.data(), N, C);
    auto gob = up(x), gbs = up(Vec(static_cast<size_t>(C), 0.5f));
    cuda::bias_add_forward(gob.as<float>(), gb.as<float>(), N, C);
    cuda::bias_backward(gbs.as<float>(), gdy.as<float>(), N, C);
    expect_close("bias add", s, down(gob, n), ob, 0.0);
    expect_close("bias backward", s, down(gbs, static_cast<size_t>(C)), bsum, kTolF32);
    {  // with the rounded gradient stored in the same pass
      auto gbs2 = up(Vec(static_cast<size_t>(C), 0.5f));
      cuda::Buffer g16(n * 2);
      cuda::bias_backward_and_round(gbs2.as<float>(), g16.get(), DType::BF16, gdy.as<float>(), N,
                                    C);
      expect_close("bias backward (+ bf16 dout)", s, down(gbs2, static_cast<size_t>(C)), bsum,
                   kTolF32);
      std::vector<uint16_t> got(n);
      cuda::copy_to_host(got.data(), g16.get(), n * 2);
      EXPECT_EQ(got, to16(dy, DType::BF16)) << "bias_backward_and_round dout, " << s;
    }
  }
}

TEST(CudaParity, RmsNorm) {
  MG_REQUIRE_GPU();
  for (auto [N, C] : {std::pair<int64_t, int64_t>{33, 40}, {256, 768}, {1000, 64}}) {
    const size_t n = size_t(N * C);
    Vec x = random_vec(n, 41, 2.f), w = random_vec(size_t(C), 42), dy = random_vec(n, 43);
    Vec y(n), rstd(static_cast<size_t>(N));
    Vec dx = random_vec(n, 44), dw = random_vec(size_t(C), 45);  // += checked
    const Vec dx0 = dx, dw0 = dw;
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    auto gx = up(x), gw = up(w), gdy = up(dy), gy = cuda::Buffer(n * 4),
         gr = cuda::Buffer(size_t(N) * 4), gdx = up(dx0), gdw = up(dw0);
    cuda::rmsnorm_forward(gy.as<float>(), gr.as<float>(), gx.as<float>(), gw.as<float>(), N, C,
                          1e-5f);
    cuda::rmsnorm_backward(gdx.as<float>(), gdw.as<float>(), gdy.as<float>(), gx.as<float>(),
                           gw.as<float>(), gr.as<float>(), N, C);
    const std::string s = dims({N, C});
    expect_close("rmsnorm forward", s, down(gy, n), y, kTolF32);
    expect_close("rmsnorm rstd", s, down(gr, size_t(N)), rstd, kTolF32);
    expect_close("rmsnorm backward dinp", s, down(gdx, n), dx, kTolF32);
    expect_close("rmsnorm backward dweight", s, down(gdw, size_t(C)), dw, kTolF32);
    for (DType t : {DType::BF16, DType::F16}) {  // stored straight into a 16-bit output
      std::vector<uint16_t> y16(n);
      cpu::rmsnorm_forward({y16.data(), t}, rstd.data(), x.data(), w.data(), N, C, 1e-5f);
      cuda::Buffer gy16(n * 2);
      cuda::rmsnorm_forward({gy16.get(), t}, gr.as<float>(), gx.as<float>(), gw.as<float>(), N, C,
                            1e-5f);
      expect_close(t == DType::BF16 ? "rmsnorm forward -> bf16" : "rmsnorm forward -> f16", s,
                   down16(gy16, n, t), widen(y16, t), kTol16);
    }
  }
}

// Zero-centred norm weights (--apply-layernorm-1p): both norms with weight offset 1, forward
// (f32 and bf16 out) and backward, against the CPU.
TEST(CudaParity, NormsWithWeightOffset) {
  MG_REQUIRE_GPU();
  for (auto [N, C] : {std::pair<int64_t, int64_t>{33, 40}, {256, 768}}) {
    const size_t n = size_t(N * C);
    Vec x = random_vec(n, 51, 2.f), w = random_vec(size_t(C), 52, 0.2f),
        b = random_vec(size_t(C), 53), dy = random_vec(n, 54);
    const Vec dx0 = random_vec(n, 55), dw0 = random_vec(size_t(C), 56),
              db0 = random_vec(size_t(C), 57);
    const std::string s = dims({N, C});
    for (bool rms : {true, false}) {
      const std::string name = rms ? "rmsnorm+1" : "layernorm+1";
      Vec y(n), mean(static_cast<size_t>(N)), rstd(mean), dx = dx0, dw = dw0, db = db0;
      std::vector<uint16_t> y16(n);
      auto gx = up(x), gw = up(w), gb = up(b), gdy = up(dy), gy = cuda::Buffer(n * 4),
           gm = cuda::Buffer(size_t(N) * 4), gr = cuda::Buffer(size_t(N) * 4), gdx = up(dx0),
           gdw = up(dw0), gdb = up(db0);
      cuda::Buffer gy16(n * 2);
      if (rms) {
        cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f, 1.f);
        cpu::rmsnorm_forward({y16.data(), DType::BF16}, rstd.data(), x.data(), w.data(), N, C,
                             1e-5f, 1.f);
        cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N,
                              C, 1.f);
        cuda::rmsnorm_forward(gy.as<float>(), gr.as<float>(), gx.as<float>(), gw.as<float>(), N, C,
                              1e-5f, 1.f);
        cuda::rmsnorm_forward({gy16.get(), DType::BF16}, gr.as<float>(), gx.as<float>(),
                              gw.as<float>(), N, C, 1e-5f, 1.f);
        cuda::rmsnorm_backward(gdx.as<float>(), gdw.as<float>(), gdy.as<float>(), gx.as<float>(),
                               gw.as<float>(), gr.as<float>(), N, C, 1.f);
      } else {
        cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                               C, 1e-5f, 1.f);
        cpu::layernorm_forward({y16.data(), DType::BF16}, mean.data(), rstd.data(), x.data(),
                               w.data(), b.data(), N, C, 1e-5f, 1.f);
        cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                                mean.data(), rstd.data(), N, C, 1.f);
        cuda::layernorm_forward(gy.as<float>(), gm.as<float>(), gr.as<float>(), gx.as<float>(),
                                gw.as<float>(), gb.as<float>(), N, C, 1e-5f, 1.f);
        cuda::layernorm_forward({gy16.get(), DType::BF16}, gm.as<float>(), gr.as<float>(),
                                gx.as<float>(), gw.as<float>(), gb.as<float>(), N, C, 1e-5f, 1.f);
        cuda::layernorm_backward(gdx.as<float>(), gdw.as<float>(), gdb.as<float>(), gdy.as<float>(),
                                 gx.as<float>(), gw.as<float>(), gm.as<float>(), gr.as<float>(), N,
                                 C, 1.f);
        expect_close((name + " backward dbias").c_str(), s, down(gdb, size_t(C)), db, kTolF32);
      }
      expect_close((name + " forward").c_str(), s, down(gy, n), y, kTolF32);
      expect_close((name + " forward -> bf16").c_str(), s, down16(gy16, n, DType::BF16),
                   widen(y16, DType::BF16), kTol16);
      expect_close((name + " backward dinp").c_str(), s, down(gdx, n), dx, kTolF32);
      expect_close((name + " backward dweight").c_str(), s, down(gdw, size_t(C)), dw, kTolF32);
      // The offset is applied: gamma = w + 1 given as w with offset 0 gives the same output.
      Vec gamma = w, y_plain(n);
      for (float& g : gamma) g += 1.f;
      if (rms)
        cpu::rmsnorm_forward(y_plain.data(), rstd.data(), x.data(), gamma.data(), N, C, 1e-5f);
      else
        cpu::layernorm_forward(y_plain.data(), mean.data(), rstd.data(), x.data(), gamma.data(),
                               b.data(), N, C, 1e-5f);
      expect_close((name + " forward vs gamma = w + 1").c_str(), s, y, y_plain, kTolF32);
    }
  }
}

// SwiGLU on [gate | up] rows: f32, and input and output stored in bf16/f16 (the backward reads
// the 16-bit input); the gradient added (+=) and stored (Set, over NaN).
TEST(CudaParity, SwiGlu) {
  MG_REQUIRE_GPU();
  for (auto [N, F] : {std::pair<int64_t, int64_t>{33, 40}, {128, 1000}}) {
    const size_t ni = size_t(N * 2 * F), no = size_t(N * F);
    const Vec x = random_vec(ni, 51, 2.f), dy = random_vec(no, 52), dx0 = random_vec(ni, 53);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      const bool lp = t != DType::F32;
      const auto x16 = lp ? to16(x, t) : std::vector<uint16_t>();
      const cpu::Mat xm = lp ? cpu::Mat(x16.data(), t) : cpu::Mat(x.data());
      Vec y(no);
      std::vector<uint16_t> y16(lp ? no : 0);
      cpu::swiglu_forward(lp ? cpu::MatOut(y16.data(), t) : cpu::MatOut(y.data()), xm, N, F);
      Vec dx = dx0, dxs(ni, 0.f);
      cpu::swiglu_backward(dx.data(), xm, dy.data(), N, F);
      cpu::swiglu_backward(dxs.data(), xm, dy.data(), N, F, GradWrite::Set);
      auto gx = lp ? up(x16) : up(x), gdy = up(dy), gy = cuda::Buffer(no * (lp ? 2 : 4)),
           gdx = up(dx0), gdxs = up(Vec(ni, NAN));
      cuda::swiglu_forward({gy.get(), t}, {gx.get(), t}, N, F);
      cuda::swiglu_backward(gdx.as<float>(), {gx.get(), t}, gdy.as<float>(), N, F);
      cuda::swiglu_backward(gdxs.as<float>(), {gx.get(), t}, gdy.as<float>(), N, F, GradWrite::Set);
      const std::string s = dims({N, F}) + " " + dtype_name(t);
      expect_close("swiglu forward", s, lp ? down16(gy, no, t) : down(gy, no),
                   lp ? widen(y16, t) : y, lp ? kTol16 : kTolF32);
      expect_close("swiglu backward", s, down(gdx, ni), dx, kTolF32);
      expect_close("swiglu backward (set)", s, down(gdxs, ni), dxs, kTolF32);
    }
  }
}

// RoPE in place on the Q and K heads of a fused GQA buffer (rows [NG, NH/NG + 2, HD]): the V
// heads and the channels past rot_dim must come back unchanged; forward in f32 and 16-bit,
// backward on an f32 gradient of the same layout.
TEST(CudaParity, Rope) {
  MG_REQUIRE_GPU();
  struct Case {
    int64_t B, S, NH, NG, HD, rot_dim;
    bool interleaved;
  };
  for (const Case& c : {Case{2, 9, 4, 2, 64, 64, false}, Case{2, 9, 4, 2, 64, 64, true},
                        Case{1, 17, 2, 1, 128, 32, false}, Case{3, 5, 6, 3, 32, 16, true},
                        Case{2, 33, 4, 4, 64, 48, false}}) {
    const int64_t N = c.S * c.B, half = c.rot_dim / 2;
    const size_t n = size_t(N * c.NG * (c.NH / c.NG + 2) * c.HD);
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int64_t t = 0; t < c.S; ++t)
      for (int64_t b = 0; b < c.B; ++b) pos[size_t(t * c.B + b)] = int32_t(7 + 301 * t + 1000 * b);
    Vec inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
      inv_freq[size_t(i)] = 1.0f / std::pow(10000.f, float(2 * i) / float(c.rot_dim));
    auto gpos = up(pos), gfreq = up(inv_freq);
    const Vec x = random_vec(n, 54), dx = random_vec(n, 55);
    const std::string s = dims({c.B, c.S, c.NH, c.NG, c.HD, c.rot_dim}) +
                          (c.interleaved ? " interleaved" : " rotate-half");
    // Rotates the Q and K views of a host or device buffer of dtype t.
    auto rotate = [&](auto op, void* buf, DType t, const int32_t* p, const float* f) {
      const cpu::FusedQKV v = cpu::fused_qkv(buf, t, c.B, c.S, c.NH, c.NG, c.HD);
      op(v.q, p, f, N, c.NH, c.HD, c.rot_dim, c.interleaved);
      op(v.k, p, f, N, c.NG, c.HD, c.rot_dim, c.interleaved);
    };
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      const bool lp = t != DType::F32;
      Vec ref = x;
      std::vector<uint16_t> ref16 = lp ? to16(x, t) : std::vector<uint16_t>();
      auto gx = lp ? up(ref16) : up(ref);
      rotate(cpu::rope_forward, lp ? static_cast<void*>(ref16.data()) : ref.data(), t, pos.data(),
             inv_freq.data());
      rotate(cuda::rope_forward, gx.get(), t, gpos.as<int32_t>(), gfreq.as<float>());
      const Vec got = lp ? down16(gx, n, t) : down(gx, n);
      expect_close("rope forward", s + " " + dtype_name(t), got, lp ? widen(ref16, t) : ref,
                   lp ? kTol16 : kTolF32);
      if (lp) continue;
      // Only the first rot_dim channels of the Q and K heads move (rows [NG, NH/NG + 2, HD]).
      int64_t moved = 0, stray = 0;
      for (size_t i = 0; i < n; ++i) {
        const int64_t w = int64_t(i) % ((c.NH / c.NG + 2) * c.HD);
        const bool rotated = w / c.HD < c.NH / c.NG + 1 && w % c.HD < c.rot_dim;
        (rotated ? moved : stray) += got[i] != x[i];
      }
      EXPECT_GT(moved, int64_t(n) / (c.NH / c.NG + 2) / 2) << "rope forward rotated little, " << s;
      EXPECT_EQ(stray, 0) << "rope forward changed V heads or channels past rot_dim, " << s;
    }
    Vec dref = dx;
    auto gdx = up(dx);
    rotate(cpu::rope_backward, dref.data(), DType::F32, pos.data(), inv_freq.data());
    rotate(cuda::rope_backward, gdx.get(), DType::F32, gpos.as<int32_t>(), gfreq.as<float>());
    expect_close("rope backward", s, down(gdx, n), dref, kTolF32);
  }
}

// One attention case, forward and backward, against the CPU. operands F32: the exact kernels
// (tolerance f32). BF16/F16: qkv and out are stored in that dtype (as a 16-bit model's are) and
// dO is rounded to it; the tensor-core kernels, which also round P and dS, must stay within the
// 16-bit tolerance of the CPU's fp32 computation on the same 16-bit inputs.
// --qk-layernorm's head copies: the K heads of fused GQA rows gathered (widened) into a
// contiguous buffer and a contiguous buffer scattered into the Q heads, f32 and 16-bit.
TEST(CudaParity, HeadsGatherScatter) {
  MG_REQUIRE_GPU();
  const int64_t B = 3, S = 7, NH = 6, NG = 2, HD = 32, N = B * S;
  const size_t n = size_t(N * NG * (NH / NG + 2) * HD), nq = size_t(N * NH * HD);
  const Vec x = random_vec(n, 61), heads = random_vec(nq, 62);
  for (DType t : {DType::F32, DType::BF16}) {
    const bool lp = t != DType::F32;
    std::vector<uint16_t> x16 = lp ? to16(x, t) : std::vector<uint16_t>();
    Vec xf = x;
    void* host = lp ? static_cast<void*>(x16.data()) : xf.data();
    auto gx = lp ? up(x16) : up(xf);
    const cpu::FusedQKV hv = cpu::fused_qkv(host, t, B, S, NH, NG, HD);
    const cpu::FusedQKV gv = cpu::fused_qkv(gx.get(), t, B, S, NH, NG, HD);
    Vec k_cpu(size_t(N * NG * HD));
    cuda::Buffer gk(k_cpu.size() * sizeof(float));
    cpu::heads_gather(k_cpu.data(), hv.k, N, NG, HD);
    cuda::heads_gather(gk.as<float>(), gv.k, N, NG, HD);
    expect_close("heads gather", dtype_name(t), down(gk, k_cpu.size()), k_cpu, 0.0);
    auto gh = up(heads);
    cpu::heads_scatter(hv.q, heads.data(), N, NH, HD);
    cuda::heads_scatter(gv.q, gh.as<float>(), N, NH, HD);
    expect_close("heads scatter", dtype_name(t), lp ? down16(gx, n, t) : down(gx, n),
                 lp ? widen(x16, t) : xf, 0.0);
  }
}

void check_attention(int64_t B, int64_t S, int64_t NH, int64_t HD, bool segments, DType operands) {
  const int64_t H = NH * HD, N = B * S;
  const bool lp = operands != DType::F32;
  Vec qkv = random_vec(size_t(N * 3 * H), 15), dout = random_vec(size_t(N * H), 16);
  if (lp)
    cpu::cast_to_f32(dout.data(), to16(dout, operands).data(), operands, int64_t(dout.size()));
  std::vector<int32_t> seg;
  if (segments) {  // documents starting at 0, 40 + 13 b and 95 - 20 b in row b
    seg.resize(static_cast<size_t>(B * S));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t s1 = 40 + 13 * b, s2 = 95 - 20 * b;
      for (int64_t t = 0; t < S; ++t) seg[b * S + t] = int32_t(t >= s2 ? s2 : (t >= s1 ? s1 : 0));
    }
  }
  const int32_t* cs = segments ? seg.data() : nullptr;
  const auto q16 = lp ? to16(qkv, operands) : std::vector<uint16_t>();
  std::vector<uint16_t> o16(lp ? size_t(N * H) : 0);
  Vec out(static_cast<size_t>(N * H)), lse(static_cast<size_t>(B * NH * S)),
      dqkv = random_vec(qkv.size(), 31);  // += checked
  const Vec dqkv0 = dqkv;
  const cpu::Mat cq = lp ? cpu::Mat(q16.data(), operands) : cpu::Mat(qkv.data());
  const cpu::MatOut co = lp ? cpu::MatOut(o16.data(), operands) : cpu::MatOut(out.data());
  cpu::attention_forward(co, lse.data(), cq, B, S, NH, HD, cs);
  cpu::attention_backward(dqkv.data(), dout.data(), {co.data, operands}, cq, lse.data(), B, S, NH,
                          HD, cs);
  auto gq = lp ? up(q16) : up(qkv), gd = up(dout), go = cuda::Buffer(out.size() * (lp ? 2 : 4)),
       gl = cuda::Buffer(lse.size() * 4), gdq = up(dqkv0);
  cuda::Buffer gseg = segments ? up(seg) : cuda::Buffer();
  const int32_t* gs = segments ? gseg.as<int32_t>() : nullptr;
  cuda::attention_forward({go.get(), operands}, gl.as<float>(), {gq.get(), operands}, B, S, NH, HD,
                          gs);
  cuda::attention_backward(gdq.as<float>(), gd.as<float>(), {go.get(), operands},
                           {gq.get(), operands}, gl.as<float>(), B, S, NH, HD, gs);
  // Stored rather than added (GradWrite::Set): every row has one writer, whatever dqkv held.
  Vec dset(dqkv.size(), 0.f);
  cpu::attention_backward(dset.data(), dout.data(), {co.data, operands}, cq, lse.data(), B, S, NH,
                          HD, cs, GradWrite::Set);
  auto gds = up(Vec(dqkv.size(), NAN));
  cuda::attention_backward(gds.as<float>(), gd.as<float>(), {go.get(), operands},
                           {gq.get(), operands}, gl.as<float>(), B, S, NH, HD, gs, GradWrite::Set);
  const std::string s = dims({B, S, NH, HD}) + (segments ? " segments" : "") +
                        (operands == DType::F32 ? "" : std::string(" ") + dtype_name(operands));
  expect_close("attention forward", s, lp ? down16(go, out.size(), operands) : down(go, out.size()),
               lp ? widen(o16, operands) : out, lp ? kTol16 : kTolF32);
  expect_close("attention lse", s, down(gl, lse.size()), lse, lp ? kTol16 : kTolF32);
  expect_close("attention backward dqkv", s, down(gdq, dqkv.size()), dqkv,
               lp ? kTol16 : kTolF32 * 10);
  expect_close("attention backward dqkv (set)", s, down(gds, dset.size()), dset,
               lp ? kTol16 : kTolF32 * 10);
}

struct AttentionCase {
  int64_t B, S, NH, HD;
  bool segments;
};
const AttentionCase kAttentionCases[] = {{1, 17, 2, 32, false},
                                         {2, 77, 3, 64, false},
                                         {2, 130, 2, 64, true},
                                         {1, 64, 2, 128, false},
                                         {1, 200, 2, 128, true}};

TEST(CudaParity, FlashAttentionForwardBackward) {
  MG_REQUIRE_GPU();
  for (const AttentionCase& c : kAttentionCases)
    check_attention(c.B, c.S, c.NH, c.HD, c.segments, DType::F32);
}

// The tensor-core kernels (16-bit models), bf16 and f16 operands, ragged tails included.
TEST(CudaParity, TensorCoreFlashAttentionForwardBackward) {
  MG_REQUIRE_GPU();
  for (DType t : {DType::BF16, DType::F16})
    for (const AttentionCase& c : kAttentionCases)
      check_attention(c.B, c.S, c.NH, c.HD, c.segments, t);
}

// lse of a query that sees no key is -inf on both sides: those rows must agree, then count as 0.
void expect_close_lse(const char* what, const std::string& shape, Vec gpu, Vec cpu, double tol) {
  int64_t differ = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const bool g = gpu[i] == -INFINITY, c = cpu[i] == -INFINITY;
    differ += g != c;
    if (g && c) gpu[i] = cpu[i] = 0.f;
  }
  EXPECT_EQ(differ, 0) << what << " " << shape << ": rows that see no key differ";
  expect_close(what, shape, gpu, cpu, tol);
}

// General attention: grouped-query heads, Sq queries at q_pos0 against Sk keys at k_pos0, causal
// or not, segments given in absolute key positions. fused: q, k, v are views of one buffer with
// Megatron's GQA rows [NKV, NH/NKV + 2, HD] (Sq = Sk), and so are dq, dk, dv of one f32 dQKV
// buffer; else q (Sq*B, NH*HD), k and v (Sk*B, NKV*HD) lie one after the other in one buffer.
struct GqaCase {
  int64_t B, Sq, Sk, NH, NKV, HD, q_pos0, k_pos0;
  bool causal, segments, fused;
};

void check_gqa_attention(const GqaCase& c, DType t, const AttentionDropout& drop = {}) {
  ASSERT_TRUE(!c.fused || c.Sq == c.Sk);
  const bool lp = t != DType::F32;
  const int64_t G = c.NH / c.NKV, HD = c.HD, Nq = c.Sq * c.B, Nk = c.Sk * c.B;
  const cpu::AttentionShape a{c.B, c.Sq, c.Sk, c.NH, c.NKV, HD, c.q_pos0, c.k_pos0, c.causal, drop};
  const int64_t nq = c.fused ? Nq * c.NKV * (G + 2) * HD : Nq * c.NH * HD;
  const int64_t nk = c.fused ? 0 : Nk * c.NKV * HD;
  const size_t nx = size_t(nq + 2 * nk), no = size_t(Nq * c.NH * HD);
  const size_t nl = size_t(c.B * c.NH * c.Sq);
  auto views = [&](void* base, DType dt) -> std::array<cpu::Heads, 3> {
    if (c.fused) {
      const cpu::FusedQKV f = cpu::fused_qkv(base, dt, c.B, c.Sq, c.NH, c.NKV, HD);
      return {f.q, f.k, f.v};
    }
    const cpu::Heads kv{base, dt, c.NKV * HD, HD, 1};
    return {cpu::Heads{base, dt, c.NH * HD, HD, 1}, kv.shifted(nq), kv.shifted(nq + nk)};
  };
  Vec x = random_vec(nx, 61), dout = random_vec(no, 62);
  if (lp) cpu::cast_to_f32(dout.data(), to16(dout, t).data(), t, int64_t(no));
  std::vector<int32_t> seg;
  if (c.segments) {  // documents from 0, k_pos0 + Sk/4 + 3b and k_pos0 + Sk/2 + 5b in row b
    seg.resize(static_cast<size_t>(c.B * c.Sq));
    for (int64_t b = 0; b < c.B; ++b) {
      const int64_t s1 = c.k_pos0 + c.Sk / 4 + 3 * b, s2 = c.k_pos0 + c.Sk / 2 + 5 * b;
      for (int64_t i = 0; i < c.Sq; ++i) {
        const int64_t p = c.q_pos0 + i;
        seg[size_t(b * c.Sq + i)] = int32_t(p >= s2 ? s2 : (p >= s1 ? s1 : 0));
      }
    }
  }
  const int32_t* cs = c.segments ? seg.data() : nullptr;
  // CPU: forward, backward added into dx, backward stored into dset.
  auto x16 = lp ? to16(x, t) : std::vector<uint16_t>();
  const auto [q, k, v] = views(lp ? static_cast<void*>(x16.data()) : x.data(), t);
  Vec out(no), lse(nl), dx = random_vec(nx, 63), dset(nx, 0.f);
  const Vec dx0 = dx;
  std::vector<uint16_t> o16(lp ? no : 0);
  const cpu::MatOut co = lp ? cpu::MatOut(o16.data(), t) : cpu::MatOut(out.data());
  cpu::attention_forward(co, lse.data(), q, k, v, a, cs);
  const auto [dq, dk, dv] = views(dx.data(), DType::F32);
  cpu::attention_backward(dq, dk, dv, dout.data(), {co.data, t}, q, k, v, lse.data(), a, cs);
  const auto [sq, sk, sv] = views(dset.data(), DType::F32);
  cpu::attention_backward(sq, sk, sv, dout.data(), {co.data, t}, q, k, v, lse.data(), a, cs,
                          GradWrite::Set);
  // GPU: the same on device copies; the stored gradient over NaN (every element one writer).
  auto gx = lp ? up(x16) : up(x), gd = up(dout), go = cuda::Buffer(no * (lp ? 2 : 4)),
       gl = cuda::Buffer(nl * 4), gdx = up(dx0), gds = up(Vec(nx, NAN));
  cuda::Buffer gseg = c.segments ? up(seg) : cuda::Buffer();
  const int32_t* gs = c.segments ? gseg.as<int32_t>() : nullptr;
  const auto [gq, gk, gv] = views(gx.get(), t);
  cuda::attention_forward({go.get(), t}, gl.as<float>(), gq, gk, gv, a, gs);
  const auto [gdq, gdk, gdv] = views(gdx.get(), DType::F32);
  cuda::attention_backward(gdq, gdk, gdv, gd.as<float>(), {go.get(), t}, gq, gk, gv, gl.as<float>(),
                           a, gs);
  const auto [gsq, gsk, gsv] = views(gds.get(), DType::F32);
  cuda::attention_backward(gsq, gsk, gsv, gd.as<float>(), {go.get(), t}, gq, gk, gv, gl.as<float>(),
                           a, gs, GradWrite::Set);
  const std::string s =
      dims({c.B, c.Sq, c.Sk, c.NH, c.NKV, HD}) + " pos " + std::to_string(c.q_pos0) + "/" +
      std::to_string(c.k_pos0) + (c.causal ? "" : " non-causal") + (c.segments ? " segments" : "") +
      (c.fused ? " fused" : "") + (drop.active() ? " dropout" : "") + " " + dtype_name(t);
  expect_close("gqa attention forward", s, lp ? down16(go, no, t) : down(go, no),
               lp ? widen(o16, t) : out, lp ? kTol16 : kTolF32);
  expect_close_lse("gqa attention lse", s, down(gl, nl), lse, lp ? kTol16 : kTolF32);
  expect_close("gqa attention backward", s, down(gdx, nx), dx, lp ? kTol16 : kTolF32 * 10);
  expect_close("gqa attention backward (set)", s, down(gds, nx), dset, lp ? kTol16 : kTolF32 * 10);
}

// {B, Sq, Sk, NH, NKV, HD, q_pos0, k_pos0, causal, segments, fused}
const GqaCase kGqaCases[] = {
    {2, 77, 77, 4, 1, 64, 0, 0, true, false, true},     // multi-query, ragged
    {2, 130, 130, 4, 2, 64, 0, 0, true, true, true},    // GQA with segments
    {1, 50, 50, 3, 3, 32, 0, 0, true, false, true},     // NKV = NH through the GQA rows
    {2, 20, 77, 4, 2, 64, 57, 0, true, false, false},   // the last 20 queries of 77 (KV cache)
    {2, 40, 70, 4, 1, 128, 10, 30, true, true, false},  // rows without keys, keys nobody sees
    {2, 33, 50, 4, 2, 64, 0, 0, false, false, false},   // non-causal, Sq < Sk
    {1, 65, 65, 8, 2, 32, 0, 0, false, true, true},     // non-causal with segments
    {2, 0, 20, 4, 2, 64, 0, 0, true, false, false},     // no queries: dK, dV stored as 0
    {2, 9, 0, 4, 2, 32, 0, 0, true, false, false},      // no keys: out 0, lse -inf
};

TEST(CudaParity, GqaAttentionForwardBackward) {
  MG_REQUIRE_GPU();
  for (const GqaCase& c : kGqaCases) check_gqa_attention(c, DType::F32);
}

TEST(CudaParity, TensorCoreGqaAttentionForwardBackward) {
  MG_REQUIRE_GPU();
  for (DType t : {DType::BF16, DType::F16})
    for (const GqaCase& c : kGqaCases) check_gqa_attention(c, t);
}

// Attention-probability dropout: the f32 kernels draw the CPU's mask (core/dropout_mask.h) for
// global heads from head0 and samples from sample0, so forward and backward agree with the CPU.
TEST(CudaParity, GqaAttentionWithDropout) {
  MG_REQUIRE_GPU();
  const AttentionDropout drop{dropout_key(0.2f, 1234, 5, 3, DropoutSite::AttentionProbs), 11, 2};
  for (const GqaCase& c : kGqaCases) check_gqa_attention(c, DType::F32, drop);
}

// The same mask in the tensor-core kernels (bf16, f16): forward (P f weighs V, lse undropped)
// and dQ/dK/dV, within the 16-bit tolerance of the CPU on the same rounded inputs.
TEST(CudaParity, TensorCoreGqaAttentionWithDropout) {
  MG_REQUIRE_GPU();
  const AttentionDropout drop{dropout_key(0.2f, 1234, 5, 3, DropoutSite::AttentionProbs), 11, 2};
  for (DType t : {DType::BF16, DType::F16})
    for (const GqaCase& c : kGqaCases) check_gqa_attention(c, t, drop);
}

// Hidden dropout: the same elements dropped (bitwise-equal outputs and gradients) on rows of an
// SP rank's block (t0 > 0) of a micro-batch that starts at sample 40.
TEST(CudaParity, HiddenDropoutMasksIdentical) {
  MG_REQUIRE_GPU();
  const int64_t B = 3, R = 7 * B, C = 130;
  const DropoutRows d{dropout_key(0.1f, 1234, 9, 2, DropoutSite::MlpOut), 40, B, 7, 0};
  const Vec x = random_vec(size_t(R * C), 71), res = random_vec(size_t(R * C), 72);
  Vec out(size_t(R * C)), dx = random_vec(size_t(R * C), 73);
  const Vec dx0 = dx;
  cpu::dropout_forward(out.data(), x.data(), res.data(), R, C, d);
  cpu::dropout_backward(dx.data(), x.data(), R, C, d, GradWrite::Add);
  auto gx = up(x), gr = up(res), go = cuda::Buffer(size_t(R * C) * 4), gdx = up(dx0);
  cuda::dropout_forward(go.as<float>(), gx.as<float>(), gr.as<float>(), R, C, d);
  cuda::dropout_backward(gdx.as<float>(), gx.as<float>(), R, C, d, GradWrite::Add);
  const Vec gout = down(go, size_t(R * C)), gdxh = down(gdx, size_t(R * C));
  int64_t dropped = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(gout[i], out[i]) << "element " << i;
    ASSERT_EQ(gdxh[i], dx[i]) << "element " << i;
    dropped += out[i] == res[i];
  }
  EXPECT_GT(dropped, 0);
}

TEST(CudaParity, CrossEntropy) {
  MG_REQUIRE_GPU();
  for (auto [N, V] : {std::pair<int64_t, int64_t>{13, 101}, {64, 50304}}) {
    Vec logits = random_vec(size_t(N * V), 17, 3.f), dl = random_vec(static_cast<size_t>(N), 18);
    std::vector<int32_t> tg(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) tg[n] = int32_t((n * 7919) % V);
    tg[1] = -1;  // ignored
    Vec loss(static_cast<size_t>(N)), lse(static_cast<size_t>(N)), mx(static_cast<size_t>(N)),
        se(static_cast<size_t>(N)), tl(static_cast<size_t>(N)), dlog(logits.size());
    cpu::cross_entropy_forward(loss.data(), lse.data(), logits.data(), tg.data(), N, V);
    cpu::cross_entropy_row_max(mx.data(), logits.data(), N, V);
    cpu::cross_entropy_sum_exp(se.data(), logits.data(), mx.data(), N, V);
    cpu::cross_entropy_target_logit(tl.data(), logits.data(), tg.data(), 5, N, V);
    cpu::cross_entropy_backward(dlog.data(), logits.data(), lse.data(), tg.data(), dl.data(), 0, N,
                                V);
    auto glg = up(logits), gtg = up(tg), gdl = up(dl),
         gloss = cuda::Buffer(static_cast<size_t>(N) * 4),
         glse = cuda::Buffer(static_cast<size_t>(N) * 4),
         gmx = cuda::Buffer(static_cast<size_t>(N) * 4),
         gse = cuda::Buffer(static_cast<size_t>(N) * 4),
         gtl = cuda::Buffer(static_cast<size_t>(N) * 4);
    cuda::cross_entropy_forward(gloss.as<float>(), glse.as<float>(), glg.as<float>(),
                                gtg.as<int32_t>(), N, V);
    cuda::cross_entropy_row_max(gmx.as<float>(), glg.as<float>(), N, V);
    cuda::cross_entropy_sum_exp(gse.as<float>(), glg.as<float>(), gmx.as<float>(), N, V);
    cuda::cross_entropy_target_logit(gtl.as<float>(), glg.as<float>(), gtg.as<int32_t>(), 5, N, V);
    const std::string s = dims({N, V});
    expect_close("cross-entropy loss", s, down(gloss, static_cast<size_t>(N)), loss, kTolF32);
    expect_close("cross-entropy lse", s, down(glse, static_cast<size_t>(N)), lse, kTolF32);
    expect_close("cross-entropy row max", s, down(gmx, static_cast<size_t>(N)), mx, 0.0);
    expect_close("cross-entropy sum exp", s, down(gse, static_cast<size_t>(N)), se, kTolF32);
    expect_close("cross-entropy target logit", s, down(gtl, static_cast<size_t>(N)), tl, 0.0);
    // The combine step of the vocab-parallel loss, on the pieces above (lse built in place over
    // the row maxima, as the model calls it).
    Vec closs = tl, clse = mx;
    cpu::cross_entropy_combine(closs.data(), clse.data(), clse.data(), se.data(), tg.data(), N);
    cuda::cross_entropy_combine(gtl.as<float>(), gmx.as<float>(), gmx.as<float>(), gse.as<float>(),
                                gtg.as<int32_t>(), N);
    expect_close("cross-entropy combine loss", s, down(gtl, static_cast<size_t>(N)), closs,
                 kTolF32);
    expect_close("cross-entropy combine lse", s, down(gmx, static_cast<size_t>(N)), clse, kTolF32);
    // In place, as the model calls it: the gradient overwrites the logits.
    cuda::cross_entropy_backward(glg.as<float>(), glg.as<float>(), glse.as<float>(),
                                 gtg.as<int32_t>(), gdl.as<float>(), 0, N, V);
    expect_close("cross-entropy backward", s, down(glg, dlog.size()), dlog, kTolF32);
    // As a vocab-parallel shard starting at column 7: targets shift, some fall outside.
    Vec dshard(logits.size());
    cpu::cross_entropy_backward(dshard.data(), logits.data(), lse.data(), tg.data(), dl.data(), 7,
                                N, V);
    auto glg2 = up(logits), gsh = cuda::Buffer(logits.size() * 4);
    cuda::cross_entropy_backward(gsh.as<float>(), glg2.as<float>(), glse.as<float>(),
                                 gtg.as<int32_t>(), gdl.as<float>(), 7, N, V);
    expect_close("cross-entropy backward shard", s, down(gsh, dshard.size()), dshard, kTolF32);
  }
}

TEST(CudaParity, OptimizerAndReductions) {
  MG_REQUIRE_GPU();
  const int64_t n = 1000003;
  Vec p = random_vec(static_cast<size_t>(n), 19), g = random_vec(static_cast<size_t>(n), 20),
      m = random_vec(static_cast<size_t>(n), 21, 0.1f),
      v = random_vec(static_cast<size_t>(n), 22, 0.1f);
  for (float& x : v) x = x * x;
  auto gp = up(p), gg = up(g), gm = up(m), gv = up(v);
  Vec pc = p, mc = m, vc = v;
  cpu::adamw_update(pc.data(), g.data(), mc.data(), vc.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                    7);
  cuda::adamw_update(gp.as<float>(), gg.as<float>(), gm.as<float>(), gv.as<float>(), n, 3e-4f, 0.9f,
                     0.95f, 1e-8f, 0.1f, 7);
  expect_close("adamw params", dims({n}), down(gp, static_cast<size_t>(n)), pc, kTolF32);
  expect_close("adamw exp_avg", dims({n}), down(gm, static_cast<size_t>(n)), mc, kTolF32);
  expect_close("adamw exp_avg_sq", dims({n}), down(gv, static_cast<size_t>(n)), vc, kTolF32);
  // The clip factor folded into the update equals scaling the gradient first.
  Vec gs = g;
  cpu::scale_inplace(gs.data(), 0.37f, n);
  Vec p2 = p, m2 = m, v2 = v;
  cpu::adamw_update(p2.data(), gs.data(), m2.data(), v2.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                    1);
  auto hp = up(p), hm = up(m), hv = up(v);
  cuda::adamw_update(hp.as<float>(), gg.as<float>(), hm.as<float>(), hv.as<float>(), n, 3e-4f, 0.9f,
                     0.95f, 1e-8f, 0.1f, 1, 0.37f);
  expect_close("adamw with clip factor", dims({n}), down(hp, static_cast<size_t>(n)), p2, kTolF32);

  Vec ps = p, buf(static_cast<size_t>(n), 0.f);
  cpu::sgd_update(ps.data(), g.data(), buf.data(), n, 0.1f, 0.9f, 0.01f, 1);
  auto sp = up(p), sb = up(Vec(static_cast<size_t>(n), 0.f));
  cuda::sgd_update(sp.as<float>(), gg.as<float>(), sb.as<float>(), n, 0.1f, 0.9f, 0.01f, 1);
  expect_close("sgd params", dims({n}), down(sp, static_cast<size_t>(n)), ps, kTolF32);
  cpu::sgd_update(ps.data(), g.data(), buf.data(), n, 0.1f, 0.9f, 0.01f, 2);  // with momentum
  cuda::sgd_update(sp.as<float>(), gg.as<float>(), sb.as<float>(), n, 0.1f, 0.9f, 0.01f, 2);
  expect_close("sgd params, step 2", dims({n}), down(sp, static_cast<size_t>(n)), ps, kTolF32);

  const double ref = cpu::sum_squares(g.data(), n), got = cuda::sum_squares(gg.as<float>(), n);
  std::printf("  %-28s %-26s %.10g vs %.10g\n", "sum of squares", dims({n}).c_str(), got, ref);
  EXPECT_NEAR(got, ref, 1e-9 * ref);
  EXPECT_EQ(got, cuda::sum_squares(gg.as<float>(), n)) << "the reduction order must be fixed";
  // Several ranges (one empty, one ragged, one reaching the end) in one call.
  const cpu::Range ranges[] = {{0, n / 3}, {n / 3, 0}, {n / 3 + 1, n / 5 + 7}, {n / 2, n - n / 2}};
  const double ref_r = cpu::sum_squares_ranges(g.data(), ranges, 4);
  const double got_r = cuda::sum_squares_ranges(gg.as<float>(), ranges, 4);
  std::printf("  %-28s %-26s %.10g vs %.10g\n", "sum of squares, 4 ranges", dims({n}).c_str(),
              got_r, ref_r);
  EXPECT_NEAR(got_r, ref_r, 1e-9 * ref_r);

  EXPECT_FALSE(cuda::has_inf_or_nan(gg.as<float>(), n));
  const float inf = INFINITY;
  cuda::copy_to_device(gg.as<float>() + n - 1, &inf, sizeof(float));
  EXPECT_TRUE(cuda::has_inf_or_nan(gg.as<float>(), n));

  for (DType t : {DType::BF16, DType::F16}) {
    const auto ref16 = to16(g, t);
    cuda::Buffer g16(static_cast<size_t>(n) * 2);
    cuda::cast_from_f32(g16.get(), t, up(g).as<float>(), n);
    std::vector<uint16_t> got16(static_cast<size_t>(n));
    cuda::copy_to_host(got16.data(), g16.get(), static_cast<size_t>(n) * 2);
    EXPECT_EQ(got16, ref16) << "f32 -> " << dtype_name(t) << " rounds to nearest even";
    cuda::Buffer back(static_cast<size_t>(n) * 4);
    cuda::cast_to_f32(back.as<float>(), g16.get(), t, n);
    Vec ref32(static_cast<size_t>(n));
    cpu::cast_to_f32(ref32.data(), ref16.data(), t, n);
    expect_close(t == DType::BF16 ? "cast bf16 -> f32" : "cast f16 -> f32", dims({n}),
                 down(back, static_cast<size_t>(n)), ref32, 0.0);
    // store_rounded: the 16-bit copy and the rounded f32 values, bit for bit.
    Vec x = g, x_ref = g;
    std::vector<uint16_t> st_ref(static_cast<size_t>(n)), st(static_cast<size_t>(n));
    cpu::store_rounded(st_ref.data(), t, x_ref.data(), n);
    auto gx = up(x);
    cuda::Buffer gst(static_cast<size_t>(n) * 2);
    cuda::store_rounded(gst.get(), t, gx.as<float>(), n);
    cuda::copy_to_host(st.data(), gst.get(), static_cast<size_t>(n) * 2);
    EXPECT_EQ(st, st_ref) << "store_rounded to " << dtype_name(t);
    expect_close("store_rounded values", dims({n}), down(gx, static_cast<size_t>(n)), x_ref, 0.0);
  }
}

TEST(CudaParity, AllocatorReusesBlocksAndCountsThePeak) {
  MG_REQUIRE_GPU();
  cuda::empty_cache();  // earlier tests in this process left blocks of the same size cached
  const int64_t live0 = cuda::bytes_live();
  void* a = cuda::alloc(3 << 20);
  EXPECT_EQ(cuda::bytes_live() - live0, 4 << 20);  // rounded to 2 MiB
  cuda::release(a);
  void* b = cuda::alloc(3 << 20);
  EXPECT_EQ(a, b) << "a released block of the same rounded size is handed out again";
  EXPECT_GE(cuda::bytes_peak(), live0 + (4 << 20));
  cuda::release(b);
  EXPECT_EQ(cuda::bytes_live(), live0);
}

// copy_to_device stages small copies through a ring of pinned slots (upload.cu). Queue more
// copies than there are slots behind a long GEMM, rewriting the one host source right after each
// call: every device buffer must still receive the values the source held at its call.
TEST(CudaParity, PinnedUploadsKeepEachCallsBytes) {
  MG_REQUIRE_GPU();
  const int64_t M = 2048;
  auto a = up(random_vec(size_t(M * M), 1)), c = up(Vec(size_t(M * M), 0.f));
  for (int i = 0; i < 4; ++i)  // ~70 GFLOP queued ahead of the copies
    cuda::gemm(false, false, M, M, M, 1.0f, a.as<float>(), M, a.as<float>(), M, 0.0f, c.as<float>(),
               M);
  const cuda::UploadCounts before = cuda::upload_counts();
  const size_t n = 4099;  // floats per copy
  const int copies = 40;  // more than the slots, so slots are waited on and written again
  std::vector<cuda::Buffer> dst;
  Vec src(n);
  for (int k = 0; k < copies; ++k) {
    for (size_t i = 0; i < n; ++i) src[i] = float(k * 100000 + int(i));
    dst.emplace_back(n * sizeof(float));
    cuda::copy_to_device(dst.back().get(), src.data(), n * sizeof(float));
  }
  // One copy larger than a slot goes straight from the caller's memory.
  const size_t big = size_t(before.slot_bytes) / sizeof(float) + 1;
  Vec big_src = random_vec(big, 7);
  cuda::Buffer big_dst(big * sizeof(float));
  cuda::copy_to_device(big_dst.get(), big_src.data(), big * sizeof(float));
  const cuda::UploadCounts after = cuda::upload_counts();
  EXPECT_EQ(after.staged - before.staged, copies);
  EXPECT_EQ(after.direct - before.direct, 1);
  int64_t wrong = 0;
  for (int k = 0; k < copies; ++k) {
    const Vec got = down(dst[size_t(k)], n);
    for (size_t i = 0; i < n; ++i) wrong += got[i] != float(k * 100000 + int(i));
  }
  std::printf("  %-28s %d copies of %zu floats, %lld wrong values\n", "pinned uploads", copies, n,
              static_cast<long long>(wrong));
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(down(big_dst, big), big_src);
}

}  // namespace
}  // namespace mg
