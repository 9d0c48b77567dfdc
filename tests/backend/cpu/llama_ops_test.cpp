// The Llama-family ops of backend/ops.h: RMSNorm, SwiGLU and rotary embeddings against their
// definitions in double and finite differences; the general attention (grouped-query heads,
// Sq != Sk, position offsets, non-causal, segment starts) against the plain double reference,
// finite differences and the identities that tie it to multi-head attention; 16-bit outputs
// against the rounded f32 results.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "backend/ops.h"
#include "testing/fd_check.h"
#include "testing/rounded.h"
#include "testing/reference_attention.h"

namespace mg {
namespace {

using cpu::AttentionShape;
using cpu::GradWrite;
using cpu::Heads;
using testing::fd_check;
using testing::random_vec;
using testing::weighted_sum;

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  return testing::rel_l2(std::vector<double>(a.begin(), a.end()),
                         std::vector<double>(ref.begin(), ref.end()));
}

using testing::Rounded;
std::vector<uint16_t> rounded(const std::vector<float>& v, DType t) { return Rounded(v, t).h; }

// ---------------------------------------------------------------------------------------------
// RMSNorm

TEST(LlamaOps, RmsNormForwardMatchesDefinition) {
  const int64_t N = 6, C = 24;
  const auto x = random_vec(N * C, 1, -2.f, 2.f), g = random_vec(C, 2, 0.5f, 1.5f);
  std::vector<float> y(N * C), rstd(N);
  cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), N, C, 1e-5f);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += double(x[n * C + c]) * x[n * C + c];
    const double r = 1.0 / std::sqrt(ms / C + 1e-5);
    EXPECT_NEAR(rstd[n], r, 1e-6 * r);
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(y[n * C + c], x[n * C + c] * r * g[c], 3e-6 * (1 + std::fabs(x[n * C + c] * r)))
          << n << "," << c;
  }
}

TEST(LlamaOps, RmsNormGradients) {
  const int64_t N = 5, C = 16;
  auto x = random_vec(N * C, 3, -2.f, 2.f), g = random_vec(C, 4, 0.5f, 1.5f),
       w = random_vec(N * C, 5);
  std::vector<float> y(N * C), rstd(N);
  auto loss = [&] {
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), N, C, 1e-5f);
    return weighted_sum(y, w);
  };
  loss();
  std::vector<float> dx(N * C, 0.f), dg(C, 0.f);
  cpu::rmsnorm_backward(dx.data(), dg.data(), w.data(), x.data(), g.data(), rstd.data(), N, C);
  fd_check("rmsnorm dx", x, dx, loss, 1e-2f, 1e-2);
  fd_check("rmsnorm dweight", g, dg, loss);
  // The backward adds into both gradients.
  std::vector<float> dx2(N * C, 1.f), dg2(C, 1.f);
  cpu::rmsnorm_backward(dx2.data(), dg2.data(), w.data(), x.data(), g.data(), rstd.data(), N, C);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_FLOAT_EQ(dx2[i], 1.f + dx[i]);
  for (int64_t c = 0; c < C; ++c) EXPECT_FLOAT_EQ(dg2[c], 1.f + dg[c]);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

TEST(LlamaOps, SwiGluMatchesDefinitionAndGradients) {
  const int64_t N = 7, F = 9;
  auto x = random_vec(N * 2 * F, 6, -4.f, 4.f), w = random_vec(N * F, 7);
  std::vector<float> y(N * F);
  auto loss = [&] {
    cpu::swiglu_forward(y.data(), x.data(), N, F);
    return weighted_sum(y, w);
  };
  loss();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const double gate = x[n * 2 * F + f], up = x[n * 2 * F + F + f];
      const double ref = gate / (1.0 + std::exp(-gate)) * up;
      EXPECT_NEAR(y[n * F + f], ref, 2e-6 * (1 + std::fabs(ref)));
    }
  std::vector<float> dx(N * 2 * F, 0.f);
  cpu::swiglu_backward(dx.data(), x.data(), w.data(), N, F);
  fd_check("swiglu dx", x, dx, loss, 1e-3f, 5e-3, 200);
  std::vector<float> dx_set(N * 2 * F, std::nanf(""));
  cpu::swiglu_backward(dx_set.data(), x.data(), w.data(), N, F, GradWrite::Set);
  EXPECT_EQ(dx_set, dx) << "Set stores what Add adds to zeros";
}

// ---------------------------------------------------------------------------------------------
// Rotary embeddings

std::vector<float> llama_inv_freq(int64_t rot_dim, float base = 10000.f) {
  std::vector<float> f(size_t(rot_dim / 2));
  for (int64_t c = 0; c < rot_dim / 2; ++c)
    f[size_t(c)] = 1.0f / std::pow(base, float(2 * c) / float(rot_dim));
  return f;
}

// The Q and K heads of a GQA fused row [NG, (NH/NG + 2), HD] turn, V and channels past rot_dim
// stay as they were; the rotation against the definition in double (angle formed in fp32).
TEST(LlamaOps, RopeMatchesDefinitionOnFusedQkvViews) {
  const int64_t N = 7, NH = 4, NG = 2, HD = 8, rot_dim = 4, half = rot_dim / 2;
  const int64_t row = NG * (NH / NG + 2) * HD;
  const auto inv_freq = llama_inv_freq(rot_dim);
  std::vector<int32_t> pos(N);
  for (int64_t n = 0; n < N; ++n) pos[n] = int32_t((n * 997 + 13) % 4096);  // large angles too
  for (bool interleaved : {false, true}) {
    const auto x0 = random_vec(N * row, 8);
    auto x = x0;
    const auto f = cpu::fused_qkv(x.data(), DType::F32, 1, N, NH, NG, HD);
    cpu::rope_forward(f.q, pos.data(), inv_freq.data(), N, NH, HD, rot_dim, interleaved);
    cpu::rope_forward(f.k, pos.data(), inv_freq.data(), N, NG, HD, rot_dim, interleaved);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < NG; ++g)
        for (int64_t j = 0; j < NH / NG + 2; ++j) {  // q heads of the group, then k, then v
          const int64_t off = n * row + (g * (NH / NG + 2) + j) * HD;
          const bool rotated = j <= NH / NG;
          for (int64_t e = 0; e < HD; ++e) {
            if (!rotated || e >= rot_dim) {
              EXPECT_EQ(x[off + e], x0[off + e]) << "n " << n << " j " << j << " e " << e;
              continue;
            }
            const int64_t c = interleaved ? e / 2 : e % half;
            const int64_t e1 = interleaved ? 2 * c : c, e2 = interleaved ? 2 * c + 1 : c + half;
            const double a = double(float(pos[n]) * inv_freq[c]);
            const double x1 = x0[off + e1], x2 = x0[off + e2];
            const double ref =
                e == e1 ? x1 * std::cos(a) - x2 * std::sin(a) : x2 * std::cos(a) + x1 * std::sin(a);
            EXPECT_NEAR(x[off + e], ref, 2e-6) << (interleaved ? "interleaved" : "rotate-half");
          }
        }
  }
}

TEST(LlamaOps, RopeGradientsAndInverse) {
  const int64_t N = 5, NH = 3, HD = 8, rot_dim = 4;  // rotary percent 0.5
  const auto inv_freq = llama_inv_freq(rot_dim);
  const std::vector<int32_t> pos = {0, 3, 17, 250, 2047};
  const Heads view0{nullptr, DType::F32, NH * HD, HD, 1};
  for (bool interleaved : {false, true}) {
    auto x = random_vec(N * NH * HD, 9), w = random_vec(N * NH * HD, 10);
    std::vector<float> y;
    auto loss = [&] {
      y = x;
      Heads v = view0;
      v.data = y.data();
      cpu::rope_forward(v, pos.data(), inv_freq.data(), N, NH, HD, rot_dim, interleaved);
      return weighted_sum(y, w);
    };
    auto dx = w;
    Heads dv = view0;
    dv.data = dx.data();
    cpu::rope_backward(dv, pos.data(), inv_freq.data(), N, NH, HD, rot_dim, interleaved);
    fd_check(interleaved ? "rope dx (interleaved)" : "rope dx", x, dx, loss, 1e-2f, 1e-4, 200);
    // The backward of the forward's output is the input (a rotation's transpose is its inverse).
    loss();
    Heads yv = view0;
    yv.data = y.data();
    cpu::rope_backward(yv, pos.data(), inv_freq.data(), N, NH, HD, rot_dim, interleaved);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-6);
  }
}

// ---------------------------------------------------------------------------------------------
// 16-bit outputs

TEST(LlamaOps, SixteenBitOutputsAreTheRoundedF32Results) {
  const int64_t N = 13, C = 40, F = 24, NH = 3, HD = 8, rot_dim = 6;
  for (DType t : {DType::BF16, DType::F16}) {
    const auto x = random_vec(N * C, 11, -2.f, 2.f), g = random_vec(C, 12);
    std::vector<float> y(N * C), rstd(N);
    std::vector<uint16_t> y16(N * C);
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), N, C, 1e-6f);
    cpu::rmsnorm_forward({y16.data(), t}, rstd.data(), x.data(), g.data(), N, C, 1e-6f);
    EXPECT_EQ(y16, rounded(y, t)) << "rmsnorm " << dtype_name(t);

    const Rounded in(random_vec(N * 2 * F, 13, -3.f, 3.f), t);
    std::vector<float> s(N * F);
    std::vector<uint16_t> s16(N * F);
    cpu::swiglu_forward(s.data(), in.f.data(), N, F);
    cpu::swiglu_forward({s16.data(), t}, {in.h.data(), t}, N, F);
    EXPECT_EQ(s16, rounded(s, t)) << "swiglu forward " << dtype_name(t);
    const auto dout = random_vec(N * F, 14);
    std::vector<float> d16(N * 2 * F, 0.f), d32(N * 2 * F, 0.f);
    cpu::swiglu_backward(d16.data(), {in.h.data(), t}, dout.data(), N, F);
    cpu::swiglu_backward(d32.data(), in.f.data(), dout.data(), N, F);
    EXPECT_EQ(d16, d32) << "swiglu backward " << dtype_name(t);

    const auto inv_freq = llama_inv_freq(rot_dim, 500000.f);
    std::vector<int32_t> pos(N);
    for (int64_t n = 0; n < N; ++n) pos[n] = int32_t(n * 37);
    for (bool interleaved : {false, true}) {
      Rounded r(random_vec(N * NH * HD, 15), t);
      cpu::rope_forward({r.f.data(), DType::F32, NH * HD, HD}, pos.data(), inv_freq.data(), N, NH,
                        HD, rot_dim, interleaved);
      cpu::rope_forward({r.h.data(), t, NH * HD, HD}, pos.data(), inv_freq.data(), N, NH, HD,
                        rot_dim, interleaved);
      EXPECT_EQ(r.h, rounded(r.f, t)) << "rope " << dtype_name(t) << " " << interleaved;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Attention

// A contiguous (rows, heads*HD) tensor as a Heads view.
Heads contiguous(void* p, int64_t heads, int64_t HD, DType t = DType::F32) {
  return {p, t, heads * HD, HD, 1};
}

// Finite differences through Megatron's GQA fused QKV rows [NG, (NH/NG + 2), HD], the gradient
// written through the same views of one dQKV buffer.
TEST(LlamaOps, GqaAttentionGradients) {
  const int64_t B = 2, S = 37, NH = 4, HD = 4;
  std::vector<int32_t> seg(B * S);
  for (int64_t t = 0; t < S; ++t) seg[t] = 0, seg[S + t] = int32_t(t < 11 ? 0 : t < 30 ? 11 : 30);
  for (int64_t NKV : {1, 2, 4})
    for (const int32_t* sp : {(const int32_t*)nullptr, (const int32_t*)seg.data()}) {
      const int64_t row = NKV * (NH / NKV + 2) * HD;
      auto qkv = random_vec(S * B * row, 20 + uint32_t(NKV), -1.5f, 1.5f),
           w = random_vec(S * B * NH * HD, 21);
      std::vector<float> out(w.size()), lse(B * NH * S);
      auto loss = [&] {
        const auto f = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NKV, HD);
        cpu::attention_forward(out.data(), lse.data(), f.q, f.k, f.v, f.shape, sp);
        return weighted_sum(out, w);
      };
      loss();
      std::vector<float> dqkv(qkv.size(), 0.f);
      const auto f = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NKV, HD);
      const auto d = cpu::fused_qkv(dqkv.data(), DType::F32, B, S, NH, NKV, HD);
      cpu::attention_backward(d.q, d.k, d.v, w.data(), out.data(), f.q, f.k, f.v, lse.data(),
                              f.shape, sp);
      fd_check("gqa attention NKV " + std::to_string(NKV) + (sp ? " segments" : ""), qkv, dqkv,
               loss, 1e-2f, 5e-3, 600);
    }
}

struct AttnCase {
  int64_t B, Sq, Sk, NH, NKV, HD, q_pos0, k_pos0;
  bool causal, seg;
};

// Runs the kernel with Q contiguous and K, V interleaved in one (Sk*B, NKV, 2, HD) buffer (so dK
// and dV are views of one fused gradient), and the double reference on contiguous copies.
TEST(LlamaOps, GqaAttentionMatchesThePlainReference) {
  for (const AttnCase& c : {
           AttnCase{2, 37, 37, 4, 1, 8, 0, 0, true, false},
           AttnCase{2, 37, 37, 4, 2, 8, 0, 0, true, true},
           AttnCase{1, 300, 300, 4, 2, 16, 0, 0, true, false},  // several key chunks
           AttnCase{2, 20, 90, 6, 3, 8, 70, 0, true, true},     // a suffix of queries (KV cache)
           AttnCase{1, 64, 40, 2, 2, 8, 100, 80, true, false},  // both offset
           AttnCase{2, 40, 60, 4, 2, 8, 50, 30, true, true},    // both offset, segments
           AttnCase{2, 37, 53, 4, 4, 8, 0, 0, false, false},    // non-causal, Sq != Sk
           AttnCase{1, 70, 50, 4, 1, 8, 0, 0, false, true},     // non-causal, segment starts
           AttnCase{1, 30, 30, 2, 1, 8, 0, 10, true, false},    // queries 0..9 see no key
       }) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " Sq " + std::to_string(c.Sq) + " Sk " +
                 std::to_string(c.Sk) + " NKV " + std::to_string(c.NKV) + " causal " +
                 std::to_string(c.causal) + " seg " + std::to_string(c.seg));
    const AttentionShape a{c.B, c.Sq, c.Sk, c.NH, c.NKV, c.HD, c.q_pos0, c.k_pos0, c.causal};
    const int64_t Nq = c.B * c.Sq, Nk = c.B * c.Sk, H = c.NH * c.HD, HK = c.NKV * c.HD;
    const auto q = random_vec(Nq * H, 30, -2.f, 2.f), kv = random_vec(Nk * 2 * HK, 31, -2.f, 2.f),
               dout = random_vec(Nq * H, 32);
    std::vector<int32_t> seg(Nq);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t t = 0; t < c.Sq; ++t)
        seg[b * c.Sq + t] = int32_t((c.q_pos0 + t) / (23 + 4 * b) * (23 + 4 * b));
    const int32_t* sp = c.seg ? seg.data() : nullptr;
    const Heads kh{const_cast<float*>(kv.data()), DType::F32, 2 * HK, 2 * c.HD, 1};
    const Heads vh = kh.shifted(c.HD);
    std::vector<float> k(Nk * HK), v(Nk * HK);
    for (int64_t n = 0; n < Nk; ++n)
      for (int64_t g = 0; g < c.NKV; ++g)
        for (int64_t e = 0; e < c.HD; ++e) {
          k[(n * c.NKV + g) * c.HD + e] = kv[n * 2 * HK + g * 2 * c.HD + e];
          v[(n * c.NKV + g) * c.HD + e] = kv[n * 2 * HK + g * 2 * c.HD + c.HD + e];
        }

    std::vector<float> out(Nq * H), lse(c.B * c.NH * c.Sq), ref(Nq * H), ref_lse(lse.size());
    std::vector<double> probs;
    cpu::attention_forward(out.data(), lse.data(),
                           contiguous(const_cast<float*>(q.data()), c.NH, c.HD), kh, vh, a, sp);
    testing::reference_gqa_attention_forward(ref.data(), ref_lse.data(), probs, q.data(), k.data(),
                                             v.data(), a, sp);
    EXPECT_LT(rel_err(out, ref), 1e-5);
    int64_t lse_bad = 0, first_bad = -1;  // -inf (no key seen) must match exactly
    for (size_t i = 0; i < lse.size(); ++i)
      if (std::isinf(ref_lse[i])
              ? lse[i] != ref_lse[i]
              : !(std::fabs(lse[i] - ref_lse[i]) <= 1e-5 * (1 + std::fabs(ref_lse[i]))))
        first_bad = first_bad < 0 ? int64_t(i) : first_bad, ++lse_bad;
    EXPECT_EQ(lse_bad, 0) << "lse mismatches, the first at " << first_bad;

    std::vector<float> dq(q.size(), 0.f), dkv(kv.size(), 0.f), dq_ref(q.size(), 0.f),
        dk_ref(k.size(), 0.f), dv_ref(v.size(), 0.f);
    const Heads dkh{dkv.data(), DType::F32, 2 * HK, 2 * c.HD, 1};
    cpu::attention_backward(contiguous(dq.data(), c.NH, c.HD), dkh, dkh.shifted(c.HD), dout.data(),
                            out.data(), contiguous(const_cast<float*>(q.data()), c.NH, c.HD), kh,
                            vh, lse.data(), a, sp);
    testing::reference_gqa_attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(),
                                              dout.data(), q.data(), k.data(), v.data(), probs, a);
    std::vector<float> dk(k.size()), dv(v.size());
    for (int64_t n = 0; n < Nk; ++n)
      for (int64_t g = 0; g < c.NKV; ++g)
        for (int64_t e = 0; e < c.HD; ++e) {
          dk[(n * c.NKV + g) * c.HD + e] = dkv[n * 2 * HK + g * 2 * c.HD + e];
          dv[(n * c.NKV + g) * c.HD + e] = dkv[n * 2 * HK + g * 2 * c.HD + c.HD + e];
        }
    EXPECT_LT(rel_err(dq, dq_ref), 1e-5) << "dq";
    EXPECT_LT(rel_err(dk, dk_ref), 1e-5) << "dk";
    EXPECT_LT(rel_err(dv, dv_ref), 1e-5) << "dv";
  }
}

// The queries [p, S) alone, at q_pos0 = p against all S keys (a KV cache's step, a context-
// parallel rank's chunk), give the full attention's last rows; their backward, the full
// backward's with dO zero on the first p rows.
TEST(LlamaOps, SuffixQueriesEqualTheFullAttentionsLastRows) {
  const int64_t B = 2, S = 100, NH = 4, NKV = 2, HD = 8, H = NH * HD, HK = NKV * HD;
  for (int64_t p : {70, 99})
    for (bool use_seg : {false, true}) {
      const int64_t Sq = S - p;
      const auto q = random_vec(S * B * H, 40), k = random_vec(S * B * HK, 41),
                 v = random_vec(S * B * HK, 42), dout_suffix = random_vec(Sq * B * H, 43);
      std::vector<int32_t> seg(B * S), seg_suffix(B * Sq);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < S; ++t) {
          seg[b * S + t] = int32_t(t < 50 ? 0 : t < 80 ? 50 : 80);
          if (t >= p) seg_suffix[b * Sq + t - p] = seg[b * S + t];
        }
      const AttentionShape full{B, S, S, NH, NKV, HD}, suffix{B, Sq, S, NH, NKV, HD, p, 0};
      float* qp = const_cast<float*>(q.data());
      const Heads kh = contiguous(const_cast<float*>(k.data()), NKV, HD),
                  vh = contiguous(const_cast<float*>(v.data()), NKV, HD);
      std::vector<float> out(S * B * H), lse(B * NH * S), out_s(Sq * B * H), lse_s(B * NH * Sq);
      cpu::attention_forward(out.data(), lse.data(), contiguous(qp, NH, HD), kh, vh, full,
                             use_seg ? seg.data() : nullptr);
      cpu::attention_forward(out_s.data(), lse_s.data(), contiguous(qp + p * B * H, NH, HD), kh, vh,
                             suffix, use_seg ? seg_suffix.data() : nullptr);
      const std::vector<float> tail(out.begin() + p * B * H, out.end());
      EXPECT_LT(rel_err(out_s, tail), 1e-6) << "p " << p;
      for (int64_t bh = 0; bh < B * NH; ++bh)
        for (int64_t t = 0; t < Sq; ++t)
          EXPECT_NEAR(lse_s[bh * Sq + t], lse[bh * S + p + t], 1e-6) << "p " << p;

      std::vector<float> dout(S * B * H, 0.f);
      std::copy(dout_suffix.begin(), dout_suffix.end(), dout.begin() + p * B * H);
      std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f),
          dq_s(Sq * B * H, 0.f), dk_s(k.size(), 0.f), dv_s(v.size(), 0.f);
      cpu::attention_backward(contiguous(dq.data(), NH, HD), contiguous(dk.data(), NKV, HD),
                              contiguous(dv.data(), NKV, HD), dout.data(), out.data(),
                              contiguous(qp, NH, HD), kh, vh, lse.data(), full,
                              use_seg ? seg.data() : nullptr);
      cpu::attention_backward(contiguous(dq_s.data(), NH, HD), contiguous(dk_s.data(), NKV, HD),
                              contiguous(dv_s.data(), NKV, HD), dout_suffix.data(), out_s.data(),
                              contiguous(qp + p * B * H, NH, HD), kh, vh, lse_s.data(), suffix,
                              use_seg ? seg_suffix.data() : nullptr);
      EXPECT_LT(rel_err(dq_s, std::vector<float>(dq.begin() + p * B * H, dq.end())), 1e-6);
      EXPECT_LT(rel_err(dk_s, dk), 1e-6);
      EXPECT_LT(rel_err(dv_s, dv), 1e-6);
    }
}

// GQA is MHA on K/V heads replicated per query head: the same outputs, and dK/dV the replicated
// heads' gradients summed over each group.
TEST(LlamaOps, GqaEqualsMhaOnReplicatedKv) {
  const int64_t B = 2, S = 37, NH = 4, HD = 8, H = NH * HD;
  std::vector<int32_t> seg(B * S);
  for (int64_t i = 0; i < B * S; ++i) seg[i] = int32_t((i % S) / 13 * 13);
  for (int64_t NKV : {1, 2}) {
    const int64_t G = NH / NKV, HK = NKV * HD;
    const auto q = random_vec(S * B * H, 50), k = random_vec(S * B * HK, 51),
               v = random_vec(S * B * HK, 52), dout = random_vec(S * B * H, 53);
    std::vector<float> k_rep(S * B * H), v_rep(S * B * H);
    for (int64_t n = 0; n < S * B; ++n)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t e = 0; e < HD; ++e) {
          k_rep[n * H + h * HD + e] = k[n * HK + (h / G) * HD + e];
          v_rep[n * H + h * HD + e] = v[n * HK + (h / G) * HD + e];
        }
    const AttentionShape gqa{B, S, S, NH, NKV, HD}, mha{B, S, S, NH, NH, HD};
    const Heads qh = contiguous(const_cast<float*>(q.data()), NH, HD);
    std::vector<float> out(S * B * H), lse(B * NH * S), out_m(out.size()), lse_m(lse.size());
    cpu::attention_forward(out.data(), lse.data(), qh,
                           contiguous(const_cast<float*>(k.data()), NKV, HD),
                           contiguous(const_cast<float*>(v.data()), NKV, HD), gqa, seg.data());
    cpu::attention_forward(out_m.data(), lse_m.data(), qh, contiguous(k_rep.data(), NH, HD),
                           contiguous(v_rep.data(), NH, HD), mha, seg.data());
    EXPECT_EQ(out, out_m) << "NKV " << NKV;
    EXPECT_EQ(lse, lse_m) << "NKV " << NKV;

    std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f), dq_m(q.size(), 0.f),
        dk_m(k_rep.size(), 0.f), dv_m(v_rep.size(), 0.f);
    cpu::attention_backward(contiguous(dq.data(), NH, HD), contiguous(dk.data(), NKV, HD),
                            contiguous(dv.data(), NKV, HD), dout.data(), out.data(), qh,
                            contiguous(const_cast<float*>(k.data()), NKV, HD),
                            contiguous(const_cast<float*>(v.data()), NKV, HD), lse.data(), gqa,
                            seg.data());
    cpu::attention_backward(contiguous(dq_m.data(), NH, HD), contiguous(dk_m.data(), NH, HD),
                            contiguous(dv_m.data(), NH, HD), dout.data(), out_m.data(), qh,
                            contiguous(k_rep.data(), NH, HD), contiguous(v_rep.data(), NH, HD),
                            lse_m.data(), mha, seg.data());
    EXPECT_EQ(dq, dq_m) << "NKV " << NKV;
    std::vector<float> dk_sum(k.size(), 0.f), dv_sum(v.size(), 0.f);
    for (int64_t n = 0; n < S * B; ++n)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t e = 0; e < HD; ++e) {
          dk_sum[n * HK + (h / G) * HD + e] += dk_m[n * H + h * HD + e];
          dv_sum[n * HK + (h / G) * HD + e] += dv_m[n * H + h * HD + e];
        }
    EXPECT_LT(rel_err(dk, dk_sum), 1e-6) << "NKV " << NKV;
    EXPECT_LT(rel_err(dv, dv_sum), 1e-6) << "NKV " << NKV;
  }
}

// Through the fused GQA views: Set writes every element of dQKV exactly once (what Add adds to
// zeros, whatever the buffer held), Add adds; one thread or two give the same bits.
TEST(LlamaOps, AttentionGradWriteAndThreads) {
  const int64_t B = 2, S = 70, NH = 6, NKV = 2, HD = 8;
  const int64_t row = NKV * (NH / NKV + 2) * HD;
  const auto qkv = random_vec(S * B * row, 60), dout = random_vec(S * B * NH * HD, 61);
  const auto f = cpu::fused_qkv(qkv.data(), DType::F32, B, S, NH, NKV, HD);
  std::vector<float> out(S * B * NH * HD), lse(B * NH * S);
  cpu::attention_forward(out.data(), lse.data(), f.q, f.k, f.v, f.shape);
  auto backward = [&](std::vector<float>& dqkv, GradWrite write) {
    const auto d = cpu::fused_qkv(dqkv.data(), DType::F32, B, S, NH, NKV, HD);
    cpu::attention_backward(d.q, d.k, d.v, dout.data(), out.data(), f.q, f.k, f.v, lse.data(),
                            f.shape, nullptr, write);
  };
  std::vector<float> add(qkv.size(), 0.f), set(qkv.size(), std::nanf("")), acc(qkv.size(), 0.5f);
  backward(add, GradWrite::Add);
  backward(set, GradWrite::Set);
  backward(acc, GradWrite::Add);
  EXPECT_EQ(set, add);
  for (size_t i = 0; i < add.size(); ++i) ASSERT_EQ(acc[i], 0.5f + add[i]) << i;
  omp_set_num_threads(2);
  std::vector<float> two(qkv.size(), 0.f), out2(out.size()), lse2(lse.size());
  cpu::attention_forward(out2.data(), lse2.data(), f.q, f.k, f.v, f.shape);
  backward(two, GradWrite::Add);
  omp_set_num_threads(1);
  EXPECT_EQ(out2, out);
  EXPECT_EQ(two, add);
}

// A query that sees no key (keys all in its future) gets out 0, lse -inf and no gradient, and
// leaves the other rows' gradients finite.
TEST(LlamaOps, AttentionQueryWithoutKeysIsZero) {
  const int64_t B = 1, Sq = 8, Sk = 8, NH = 2, NKV = 1, HD = 4;
  const AttentionShape a{B, Sq, Sk, NH, NKV, HD, 0, 3};  // query t sees keys j <= t - 3
  const auto q = random_vec(Sq * NH * HD, 70), k = random_vec(Sk * HD, 71),
             v = random_vec(Sk * HD, 72), dout = random_vec(Sq * NH * HD, 73);
  const Heads qh = contiguous(const_cast<float*>(q.data()), NH, HD),
              kh = contiguous(const_cast<float*>(k.data()), NKV, HD),
              vh = contiguous(const_cast<float*>(v.data()), NKV, HD);
  std::vector<float> out(q.size(), 7.f), lse(NH * Sq);
  cpu::attention_forward(out.data(), lse.data(), qh, kh, vh, a);
  std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
  cpu::attention_backward(contiguous(dq.data(), NH, HD), contiguous(dk.data(), NKV, HD),
                          contiguous(dv.data(), NKV, HD), dout.data(), out.data(), qh, kh, vh,
                          lse.data(), a);
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t t = 0; t < Sq; ++t) {
      const bool empty = t < 3;
      EXPECT_EQ(std::isinf(lse[h * Sq + t]) && lse[h * Sq + t] < 0, empty) << t;
      for (int64_t e = 0; e < HD; ++e) {
        const int64_t i = t * NH * HD + h * HD + e;
        if (empty) {
          EXPECT_EQ(out[i], 0.f);
          EXPECT_EQ(dq[i], 0.f);
        }
        EXPECT_TRUE(std::isfinite(dq[i]));
      }
    }
  EXPECT_EQ(out[3 * NH * HD], v[0]) << "query 3 sees key 0 only";
  for (float x : dk) EXPECT_TRUE(std::isfinite(x));
  for (float x : dv) EXPECT_TRUE(std::isfinite(x));
  for (int64_t j = 5; j < Sk; ++j)  // keys 5..7 are seen by no query
    for (int64_t e = 0; e < HD; ++e) {
      EXPECT_EQ(dv[j * HD + e], 0.f);
      EXPECT_EQ(dk[j * HD + e], 0.f);
    }
}

// The 16-bit GQA attention is the f32 one on the widened values, rounded at the store.
TEST(LlamaOps, SixteenBitGqaAttentionIsTheF32OpOnWidenedValues) {
  const int64_t B = 2, S = 19, NH = 4, NKV = 2, HD = 8, N = B * S;
  const int64_t row = NKV * (NH / NKV + 2) * HD;
  for (DType t : {DType::BF16, DType::F16}) {
    const Rounded qkv(random_vec(N * row, 80), t);
    const auto dout = random_vec(N * NH * HD, 81);
    const auto f32 = cpu::fused_qkv(qkv.f.data(), DType::F32, B, S, NH, NKV, HD);
    const auto f16 = cpu::fused_qkv(qkv.h.data(), t, B, S, NH, NKV, HD);
    std::vector<float> out(N * NH * HD), lse(B * NH * S), lse16(lse.size());
    std::vector<uint16_t> out16(out.size());
    cpu::attention_forward(out.data(), lse.data(), f32.q, f32.k, f32.v, f32.shape);
    cpu::attention_forward({out16.data(), t}, lse16.data(), f16.q, f16.k, f16.v, f16.shape);
    EXPECT_EQ(out16, rounded(out, t)) << dtype_name(t);
    EXPECT_EQ(lse16, lse) << dtype_name(t);
    const Rounded o(out, t);
    std::vector<float> d16(qkv.f.size(), 0.f), d32(qkv.f.size(), 0.f);
    const auto g16 = cpu::fused_qkv(d16.data(), DType::F32, B, S, NH, NKV, HD);
    const auto g32 = cpu::fused_qkv(d32.data(), DType::F32, B, S, NH, NKV, HD);
    cpu::attention_backward(g16.q, g16.k, g16.v, dout.data(), {o.h.data(), t}, f16.q, f16.k, f16.v,
                            lse.data(), f16.shape);
    cpu::attention_backward(g32.q, g32.k, g32.v, dout.data(), o.f.data(), f32.q, f32.k, f32.v,
                            lse.data(), f32.shape);
    EXPECT_EQ(d16, d32) << dtype_name(t);
  }
}

}  // namespace
}  // namespace mg
