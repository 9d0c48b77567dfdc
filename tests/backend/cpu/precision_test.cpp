// Mixed-precision kernels: bf16/f16 rounding against a nearest-value search (ties to even) and
// the IEEE edge cases; 16-bit GEMMs and linear layers against a double-precision product of the
// same rounded operands; 16-bit embedding lookups against the f32 lookup of the widened table;
// the ops that store or read 16-bit activations against the f32 ops and casts.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/half.h"
#include "backend/ops.h"
#include "testing/fd_check.h"
#include "testing/rounded.h"

namespace mg {
namespace {

using testing::random_vec;

float widen(uint16_t h, DType t) {
  return t == DType::BF16 ? cpu::f32_from_bf16(h) : cpu::f32_from_f16(h);
}
uint16_t narrow(float x, DType t) {
  uint16_t h;
  cpu::cast_from_f32(&h, t, &x, 1);
  return h;
}

TEST(Precision, Bf16RoundsToNearestEven) {
  const float one = 1.f, ulp = std::ldexp(1.f, -7);  // bf16 spacing at 1
  EXPECT_EQ(narrow(one, DType::BF16), 0x3F80);
  EXPECT_EQ(narrow(one + ulp / 2, DType::BF16), 0x3F80);      // tie -> even (down)
  EXPECT_EQ(narrow(one + 3 * ulp / 2, DType::BF16), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(narrow(one + ulp / 2 + std::ldexp(1.f, -20), DType::BF16), 0x3F81);
  EXPECT_EQ(narrow(FLT_MAX, DType::BF16), 0x7F80);  // overflows to inf
  EXPECT_EQ(narrow(-INFINITY, DType::BF16), 0xFF80);
  EXPECT_TRUE(std::isnan(widen(narrow(NAN, DType::BF16), DType::BF16)));
}

TEST(Precision, F16RoundsToNearestEvenAndSaturatesToInf) {
  EXPECT_EQ(widen(narrow(65504.f, DType::F16), DType::F16), 65504.f);  // largest finite
  EXPECT_EQ(widen(narrow(65519.f, DType::F16), DType::F16), 65504.f);
  EXPECT_TRUE(std::isinf(widen(narrow(65520.f, DType::F16), DType::F16)));  // tie -> inf
  EXPECT_EQ(widen(narrow(std::ldexp(1.f, -24), DType::F16), DType::F16), std::ldexp(1.f, -24));
  EXPECT_EQ(widen(narrow(std::ldexp(1.f, -25), DType::F16), DType::F16), 0.f);  // tie -> even 0
  EXPECT_EQ(narrow(1.f + std::ldexp(1.f, -11), DType::F16), 0x3C00);            // tie -> even
}

// For random values over many binades, the stored value is the nearest representable one: no
// neighbour of the result (one code up or down) is closer, and an exact tie picks the even code.
TEST(Precision, CastIsTheNearestRepresentable) {
  for (DType t : {DType::BF16, DType::F16}) {
    auto x = random_vec(20000, 11, -1.f, 1.f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], int(i % 24) - 12);
    std::vector<uint16_t> h(x.size());
    cpu::cast_from_f32(h.data(), t, x.data(), int64_t(x.size()));  // the vector path
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(h[i], narrow(x[i], t)) << "vector and scalar paths differ at " << x[i];
      const double v = widen(h[i], t), err = std::fabs(double(x[i]) - v);
      for (int d : {-1, 1}) {
        const double n = widen(uint16_t(h[i] + d), t), nerr = std::fabs(double(x[i]) - n);
        if (std::isnan(n) || std::isinf(n)) continue;
        ASSERT_LE(err, nerr) << dtype_name(t) << " " << x[i];
        if (err == nerr) {
          ASSERT_EQ(h[i] % 2, 0) << "tie not to even: " << x[i];
        }
      }
    }
    std::vector<float> back(x.size());
    cpu::cast_to_f32(back.data(), h.data(), t, int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], widen(h[i], t));
    // store_rounded leaves exactly the stored values behind.
    std::vector<uint16_t> h2(x.size());
    cpu::store_rounded(h2.data(), t, x.data(), int64_t(x.size()));
    EXPECT_EQ(x, back);
    EXPECT_EQ(0, std::memcmp(h.data(), h2.data(), h.size() * 2));
  }
}

// The buffer casts (vectorized) give the scalar rules' bits for every 97th 32-bit pattern
// (all exponents, NaNs, infinities, subnormals, ties to even) and for the 16-bit patterns
// widened back, in a length that leaves a vector tail.
TEST(Precision, BufferCastsEqualTheScalarRules) {
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 97) {
    const uint32_t b = uint32_t(u);
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  for (uint32_t b : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x3f808000u,
                     0x3f818000u, 0x00008000u})
    x.push_back([&] {
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }());
  x.resize(x.size() / 16 * 16 + 7);
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<uint16_t> h(x.size());
    cpu::cast_from_f32(h.data(), t, x.data(), int64_t(x.size()));
    std::vector<float> back(x.size());
    cpu::cast_to_f32(back.data(), h.data(), t, int64_t(h.size()));
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = t == DType::BF16 ? cpu::bf16_from_f32(x[i]) : cpu::f16_from_f32(x[i]);
      const float wide = t == DType::BF16 ? cpu::f32_from_bf16(h[i]) : cpu::f32_from_f16(h[i]);
      bad += h[i] != want || std::memcmp(&back[i], &wide, 4) != 0;
    }
    EXPECT_EQ(bad, 0u) << dtype_name(t) << " of " << x.size();
  }
}

// An empty tensor's buffer may be null (an empty std::vector's data()): nothing is read or
// written. Found by fuzzing the safetensors reader (an F32 tensor of shape [0, 4]); the
// sanitizer build (preset debug) reports the null memcpy this guards against.
TEST(Precision, ZeroElementCastsTouchNoBuffer) {
  const float x = 1.f;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    cpu::cast_to_f32(nullptr, &x, t, 0);
    cpu::cast_from_f32(nullptr, t, &x, 0);
  }
}

TEST(Precision, InfNanCheck) {
  std::vector<float> x(1000, 1.f);
  EXPECT_FALSE(cpu::has_inf_or_nan(x.data(), 1000));
  x[777] = INFINITY;
  EXPECT_TRUE(cpu::has_inf_or_nan(x.data(), 1000));
  x[777] = NAN;
  EXPECT_TRUE(cpu::has_inf_or_nan(x.data(), 1000));
}

using testing::Rounded;

// C = op(A) op(B) (+ C) in double from the rounded operands, as stored with leading dims.
std::vector<double> reference_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                   const std::vector<float>& A, int64_t lda,
                                   const std::vector<float>& B, int64_t ldb,
                                   const std::vector<float>& C0, int64_t ldc, bool acc) {
  std::vector<double> C(C0.begin(), C0.end());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? A[k * lda + m] : A[m * lda + k]) *
             double(tb ? B[n * ldb + k] : B[k * ldb + n]);
      C[m * ldc + n] = (acc ? C[m * ldc + n] : 0.0) + s;
    }
  return C;
}

TEST(Precision, LowPrecisionGemmMatchesDoubleProductOfRoundedOperands) {
  const int64_t M = 7, N = 13, K = 33, pad = 3;
  for (DType t : {DType::BF16, DType::F16})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int acc = 0; acc < 2; ++acc) {
          const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          const Rounded A(random_vec(size_t((ta ? K : M) * lda), 1), t);
          const Rounded B(random_vec(size_t((tb ? N : K) * ldb), 2), t);
          std::vector<float> C = random_vec(size_t(M * ldc), 3);
          const auto want = reference_gemm(ta, tb, M, N, K, A.f, lda, B.f, ldb, C, ldc, acc);
          cpu::gemm_lowp(ta, tb, M, N, K, {A.h.data(), t}, lda, {B.h.data(), t}, ldb, acc, C.data(),
                         ldc);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n)
              ASSERT_NEAR(C[m * ldc + n], want[m * ldc + n],
                          1e-5 * (1 + std::fabs(want[m * ldc + n])))
                  << dtype_name(t) << " ta " << ta << " tb " << tb << " acc " << acc;
        }
}

// The 16-bit linear layer equals the f32 layer run on the rounded inputs, weights and (for
// backward) the rounded output gradient, except dbias, which sums the f32 gradient.
TEST(Precision, LowPrecisionLinearMatchesF32OnRoundedValues) {
  const int64_t N = 9, IN = 24, OUT = 10;
  for (DType t : {DType::BF16, DType::F16}) {
    const Rounded x(random_vec(N * IN, 4), t), W(random_vec(OUT * IN, 5), t);
    const auto b = random_vec(OUT, 6), dout = random_vec(N * OUT, 7);
    const Rounded dout_r(dout, t);
    std::vector<float> y(N * OUT), y_ref(N * OUT);
    cpu::linear_forward(y.data(), {x.h.data(), t}, {W.h.data(), t}, b.data(), N, IN, OUT);
    cpu::linear_forward(y_ref.data(), x.f.data(), W.f.data(), b.data(), N, IN, OUT);
    for (int64_t i = 0; i < N * OUT; ++i) EXPECT_NEAR(y[i], y_ref[i], 1e-5);
    std::vector<float> dx(N * IN, 0.5f), dW(OUT * IN, 0.25f), db(OUT, 0.f);
    std::vector<float> dx_ref = dx, dW_ref = dW, db_ref(OUT, 0.f);
    cpu::linear_backward(dx.data(), dW.data(), db.data(), dout.data(), {x.h.data(), t},
                         {W.h.data(), t}, N, IN, OUT);
    cpu::linear_backward(dx_ref.data(), dW_ref.data(), nullptr, dout_r.f.data(), x.f.data(),
                         W.f.data(), N, IN, OUT);
    cpu::bias_backward(db_ref.data(), dout.data(), N, OUT);
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], dx_ref[i], 1e-5);
    for (size_t i = 0; i < dW.size(); ++i) EXPECT_NEAR(dW[i], dW_ref[i], 1e-5);
    for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], db_ref[i], 1e-6);
  }
}

TEST(Precision, LowPrecisionEmbeddingEqualsWidenedTable) {
  const int64_t V = 12, H = 20, N = 9;
  const std::vector<int32_t> ids = {0, 3, 11, 5, 3, 7, 2, 9, 10};
  for (DType t : {DType::BF16, DType::F16}) {
    const Rounded table(random_vec(V * H, 8), t);
    for (bool acc : {false, true}) {
      auto out = random_vec(N * H, 9), ref = out;
      cpu::embedding_forward(out.data(), ids.data(), {table.h.data(), t}, 2, 10, N, H, acc);
      cpu::embedding_forward(ref.data(), ids.data(), table.f.data(), 2, 10, N, H, acc);
      EXPECT_EQ(out, ref);
    }
  }
}

// The ops that store 16-bit activations (MatOut) give exactly the f32 op's result rounded by
// cast_from_f32, and the ops that read them (Mat) exactly the f32 op on the widened values:
// a 16-bit model computes what f32 ops on rounded buffers would.
std::vector<uint16_t> rounded(const std::vector<float>& v, DType t) { return Rounded(v, t).h; }

TEST(Precision, SixteenBitOutputsAreTheRoundedF32Results) {
  const int64_t N = 13, C = 40, IN = 24, OUT = 18;
  for (DType t : {DType::BF16, DType::F16}) {
    const auto x = random_vec(N * C, 1), w = random_vec(C, 2), b = random_vec(C, 3);
    std::vector<float> y(N * C), mean(N), rstd(N);
    std::vector<uint16_t> y16(N * C);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                           1e-5f);
    cpu::layernorm_forward({y16.data(), t}, mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                           N, C, 1e-5f);
    EXPECT_EQ(y16, rounded(y, t)) << "layernorm " << dtype_name(t);

    const Rounded xi(random_vec(N * IN, 4), t), W(random_vec(OUT * IN, 5), t);
    // A 16-bit output adds its bias as a 16-bit module holds it: rounded to t.
    const auto bias = random_vec(OUT, 6);
    const Rounded bias_t(bias, t);
    for (const float* bp : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<float> z(N * OUT);
      std::vector<uint16_t> z16(N * OUT);
      cpu::linear_forward(z.data(), {xi.h.data(), t}, {W.h.data(), t},
                          bp ? bias_t.f.data() : nullptr, N, IN, OUT);
      cpu::linear_forward({z16.data(), t}, {xi.h.data(), t}, {W.h.data(), t}, bp, N, IN, OUT);
      EXPECT_EQ(z16, rounded(z, t)) << "linear " << dtype_name(t) << (bp ? " bias" : "");
    }
  }
}

TEST(Precision, SixteenBitAttentionAndGeluAreTheF32OpsOnWidenedValues) {
  const int64_t B = 2, S = 19, NH = 2, HD = 8, H = NH * HD, N = B * S;
  for (DType t : {DType::BF16, DType::F16}) {
    const Rounded qkv(random_vec(N * 3 * H, 7), t);
    const auto dout = random_vec(N * H, 8);
    std::vector<float> out(N * H), lse(B * NH * S), lse16(B * NH * S);
    std::vector<uint16_t> out16(N * H);
    cpu::attention_forward(out.data(), lse.data(), qkv.f.data(), B, S, NH, HD);
    cpu::attention_forward({out16.data(), t}, lse16.data(), {qkv.h.data(), t}, B, S, NH, HD);
    EXPECT_EQ(out16, rounded(out, t)) << "attention out " << dtype_name(t);
    EXPECT_EQ(lse16, lse) << "attention lse " << dtype_name(t);
    // Backward from the stored (rounded) output, read as 16-bit or as its widened f32 copy.
    const Rounded o(out, t);
    auto d16 = random_vec(N * 3 * H, 9), d32 = d16;
    cpu::attention_backward(d16.data(), dout.data(), {o.h.data(), t}, {qkv.h.data(), t}, lse.data(),
                            B, S, NH, HD);
    cpu::attention_backward(d32.data(), dout.data(), o.f.data(), qkv.f.data(), lse.data(), B, S, NH,
                            HD);
    EXPECT_EQ(d16, d32) << "attention dqkv " << dtype_name(t);

    const Rounded x(random_vec(N * H, 10), t);
    auto g16 = random_vec(N * H, 11), g32 = g16;
    cpu::gelu_backward(g16.data(), {x.h.data(), t}, dout.data(), N * H);
    cpu::gelu_backward(g32.data(), x.f.data(), dout.data(), N * H);
    EXPECT_EQ(g16, g32) << "gelu backward " << dtype_name(t);
    std::vector<float> y32(N * H);
    std::vector<uint16_t> y16(N * H);
    cpu::gelu_forward(y32.data(), x.f.data(), N * H);
    cpu::gelu_forward({y16.data(), t}, {x.h.data(), t}, N * H);
    EXPECT_EQ(y16, rounded(y32, t)) << "gelu forward " << dtype_name(t);
  }
}

// out = residual + (x W^T + bias), against a double-precision sum.
TEST(Precision, LinearResidualForwardAddsBiasAndResidual) {
  const int64_t N = 11, IN = 20, OUT = 14;
  const auto x = random_vec(N * IN, 12), W = random_vec(OUT * IN, 13), bias = random_vec(OUT, 14),
             res = random_vec(N * OUT, 15);
  std::vector<float> y(N * OUT);
  cpu::linear_residual_forward(y.data(), x.data(), W.data(), bias.data(), res.data(), N, IN, OUT);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OUT; ++o) {
      double ref = double(res[n * OUT + o]) + bias[o];
      for (int64_t i = 0; i < IN; ++i) ref += double(x[n * IN + i]) * W[o * IN + i];
      EXPECT_NEAR(y[n * OUT + o], ref, 1e-5) << n << "," << o;
    }
}

}  // namespace
}  // namespace mg
