// Dropout on the CPU: the hidden dropout op against its formula, and attention-probability
// dropout inside the flash kernels against the plain attention with the mask applied to its
// materialized probabilities, by finite differences through a fixed mask (with a given key the
// op is a fixed function), and split over heads as tensor parallelism splits them.
#include <gtest/gtest.h>

#include <vector>

#include "backend/ops.h"
#include "testing/fd_check.h"
#include "testing/reference_attention.h"

namespace mg {
namespace {

using testing::random_vec;
using testing::weighted_sum;

TEST(Dropout, HiddenForwardAndBackwardFollowTheMask) {
  const int64_t B = 3, S = 5, H = 10, R = S * B;
  const DropoutRows d{dropout_key(0.4f, 7, 3, 1, DropoutSite::AttentionOut), 20, B, 2, 0};
  auto x = random_vec(R * H, 1), res = random_vec(R * H, 2), dy = random_vec(R * H, 3);
  std::vector<float> out(R * H), plain(R * H), dx(R * H, 1.f);
  cpu::dropout_forward(out.data(), x.data(), res.data(), R, H, d);
  cpu::dropout_forward(plain.data(), x.data(), nullptr, R, H, d);
  cpu::dropout_backward(dx.data(), dy.data(), R, H, d, cpu::GradWrite::Add);
  int64_t zeros = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < H; ++c) {
      const int64_t i = r * H + c;
      const float f = dropout_factor(d.key, 20 + r % B, 0, 2 + r / B, c);
      zeros += f == 0.f;
      EXPECT_EQ(out[i], res[i] + x[i] * f);
      EXPECT_EQ(plain[i], x[i] * f);
      EXPECT_EQ(dx[i], 1.f + dy[i] * f);
    }
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, R * H);
}

AttentionDropout attention_dropout(float p, int64_t sample0 = 5, int64_t head0 = 0) {
  return {dropout_key(p, 99, 4, 2, DropoutSite::AttentionProbs), sample0, head0};
}

// The flash kernel's output with dropout against sum_j P_tj f_tj v_j on the reference's P.
TEST(Dropout, AttentionMatchesTheMaskedPlainAttention) {
  const int64_t B = 2, S = 70, NH = 3, HD = 8, H = NH * HD, N = B * S;
  auto qkv = random_vec(N * 3 * H, 40, -2.f, 2.f);
  const cpu::FusedQKV v = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NH, HD);
  cpu::AttentionShape a = v.shape;
  a.dropout = attention_dropout(0.2f);
  std::vector<float> out(N * H), lse(B * NH * S), ref(N * H), probs(B * NH * S * S);
  cpu::attention_forward(out.data(), lse.data(), v.q, v.k, v.v, a);
  testing::reference_attention_forward(ref.data(), probs.data(), qkv.data(), B, S, NH, HD);
  std::vector<double> got(out.begin(), out.end()), want(N * H, 0.0);
  const int64_t ld = B * 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t j = 0; j <= t; ++j) {
          const double p = probs[((b * NH + h) * S + t) * S + j] *
                           double(dropout_factor(a.dropout.key, 5 + b, h, t, j));
          const float* vj = qkv.data() + j * ld + b * 3 * H + h * 3 * HD + 2 * HD;
          for (int64_t e = 0; e < HD; ++e) want[(t * B + b) * H + h * HD + e] += p * vj[e];
        }
  EXPECT_LT(testing::rel_l2(got, want), 1e-5);
  // And it is not the undropped attention.
  std::vector<double> undropped(ref.begin(), ref.end());
  EXPECT_GT(testing::rel_l2(got, undropped), 1e-2);
}

TEST(Dropout, AttentionGradientsByFiniteDifferencesThroughAFixedMask) {
  const int64_t B = 2, S = 70, NH = 2, HD = 3, H = NH * HD;
  auto qkv = random_vec(B * S * 3 * H, 20, -1.5f, 1.5f), w = random_vec(B * S * H, 21);
  std::vector<float> out(B * S * H), lse(B * NH * S);
  auto shape = [&] {
    cpu::AttentionShape a = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NH, HD).shape;
    a.dropout = attention_dropout(0.3f);
    return a;
  };
  auto loss = [&] {
    const cpu::FusedQKV v = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NH, HD);
    cpu::attention_forward(out.data(), lse.data(), v.q, v.k, v.v, shape());
    return weighted_sum(out, w);
  };
  loss();
  std::vector<float> dqkv(qkv.size(), 0.f);
  const cpu::FusedQKV v = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NH, HD);
  const cpu::FusedQKV d = cpu::fused_qkv(dqkv.data(), DType::F32, B, S, NH, NH, HD);
  cpu::attention_backward(d.q, d.k, d.v, w.data(), out.data(), v.q, v.k, v.v, lse.data(), shape());
  testing::fd_check("attention dqkv with dropout", qkv, dqkv, loss, 1e-2f, 5e-3, 600);
}

// Heads [1, 3) computed alone with head0 = 1 (a TP rank's share) give the full call's values.
TEST(Dropout, AttentionHeadShareDrawsTheGlobalHeadsMask) {
  const int64_t B = 2, S = 20, NH = 3, HD = 4, H = NH * HD, N = B * S;
  auto qkv = random_vec(N * 3 * H, 50);
  const cpu::FusedQKV v = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NH, HD);
  cpu::AttentionShape a = v.shape;
  a.dropout = attention_dropout(0.5f);
  std::vector<float> full(N * H), lse(B * NH * S);
  cpu::attention_forward(full.data(), lse.data(), v.q, v.k, v.v, a);
  // The last two heads: views shifted by one head's q/k/v, two heads wide.
  cpu::AttentionShape part = a;
  part.NH = part.NKV = 2;
  part.dropout.head0 = 1;
  std::vector<float> share(N * 2 * HD), lse2(B * 2 * S);
  cpu::attention_forward(share.data(), lse2.data(), v.q.shifted(3 * HD), v.k.shifted(3 * HD),
                         v.v.shifted(3 * HD), part);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t e = 0; e < 2 * HD; ++e) ASSERT_EQ(share[r * 2 * HD + e], full[r * H + HD + e]);
}

}  // namespace
}  // namespace mg
