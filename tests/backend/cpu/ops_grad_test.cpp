// Finite-difference gradient checks for every op in backend/ops.h: L = sum(w * op(x)) with
// random w, analytic grads from the backward (called with dout = w) against central differences.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>

#include "backend/ops.h"
#include "testing/fd_check.h"
#include "testing/reference_attention.h"

namespace mg {
namespace {

using testing::fd_check;
using testing::random_vec;
using testing::weighted_sum;

TEST(OpsGrad, Linear) {
  const int64_t N = 6, IN = 5, OUT = 7;
  auto x = random_vec(N * IN, 1), W = random_vec(OUT * IN, 2), b = random_vec(OUT, 3);
  auto w = random_vec(N * OUT, 4);
  std::vector<float> out(N * OUT);
  auto loss = [&] {
    cpu::linear_forward(out.data(), x.data(), W.data(), b.data(), N, IN, OUT);
    return weighted_sum(out, w);
  };
  std::vector<float> dx(N * IN, 0.f), dW(OUT * IN, 0.f), db(OUT, 0.f);
  cpu::linear_backward(dx.data(), dW.data(), db.data(), w.data(), x.data(), W.data(), N, IN, OUT);
  fd_check("linear dx", x, dx, loss);
  fd_check("linear dW", W, dW, loss);
  fd_check("linear db", b, db, loss);
}

TEST(OpsGrad, BackwardAccumulates) {
  // Calling backward twice must double every gradient (+= semantics).
  const int64_t N = 3, IN = 4, OUT = 2;
  auto x = random_vec(N * IN, 5), W = random_vec(OUT * IN, 6), dout = random_vec(N * OUT, 7);
  std::vector<float> dx(N * IN, 0.f), dW(OUT * IN, 0.f), db(OUT, 0.f);
  cpu::linear_backward(dx.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), N, IN,
                       OUT);
  auto dx1 = dx, dW1 = dW, db1 = db;
  cpu::linear_backward(dx.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), N, IN,
                       OUT);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx[i], 2 * dx1[i]);
  for (size_t i = 0; i < dW.size(); ++i) EXPECT_FLOAT_EQ(dW[i], 2 * dW1[i]);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_FLOAT_EQ(db[i], 2 * db1[i]);
}

TEST(OpsGrad, Embedding) {
  const int64_t N = 8, H = 6, V = 5, P = 4;
  std::vector<int32_t> tok = {0, 3, 3, 1, 4, 0, 2, 3}, pos = {0, 1, 2, 3, 0, 1, 2, 3};
  auto wte = random_vec(V * H, 8), wpe = random_vec(P * H, 9), w = random_vec(N * H, 10);
  std::vector<float> out(N * H);
  auto loss = [&] {
    cpu::embedding_forward(out.data(), tok.data(), wte.data(), 0, V, N, H, false);
    cpu::embedding_forward(out.data(), pos.data(), wpe.data(), 0, P, N, H, true);
    return weighted_sum(out, w);
  };
  std::vector<float> dwte(V * H, 0.f), dwpe(P * H, 0.f);
  cpu::embedding_backward(dwte.data(), w.data(), tok.data(), 0, V, N, H);
  cpu::embedding_backward(dwpe.data(), w.data(), pos.data(), 0, P, N, H);
  fd_check("embedding dwte", wte, dwte, loss);
  fd_check("embedding dwpe", wpe, dwpe, loss);
}

TEST(OpsGrad, EmbeddingRowRangeShard) {
  // A shard holding rows [2, 4) of a 5-row table: other ids give zeros and no gradient.
  const int64_t N = 4, H = 3;
  std::vector<int32_t> ids = {0, 2, 3, 4};
  auto shard = random_vec(2 * H, 40);
  std::vector<float> out(N * H, 9.f), dshard(2 * H, 0.f), dout(N * H, 1.f);
  cpu::embedding_forward(out.data(), ids.data(), shard.data(), 2, 4, N, H, false);
  for (int64_t c = 0; c < H; ++c) {
    EXPECT_EQ(out[c], 0.f);
    EXPECT_EQ(out[H + c], shard[c]);
    EXPECT_EQ(out[2 * H + c], shard[H + c]);
    EXPECT_EQ(out[3 * H + c], 0.f);
  }
  cpu::embedding_backward(dshard.data(), dout.data(), ids.data(), 2, 4, N, H);
  for (float d : dshard) EXPECT_EQ(d, 1.f);
}

TEST(OpsGrad, Bias) {
  const int64_t N = 5, C = 7;
  auto x = random_vec(N * C, 41), b = random_vec(C, 42), w = random_vec(N * C, 43);
  std::vector<float> out(N * C);
  auto loss = [&] {
    out = x;
    cpu::bias_add_forward(out.data(), b.data(), N, C);
    return weighted_sum(out, w);
  };
  std::vector<float> db(C, 0.f);
  cpu::bias_backward(db.data(), w.data(), N, C);
  fd_check("bias db", b, db, loss);
}

TEST(OpsGrad, LayerNorm) {
  const int64_t N = 5, C = 16;
  auto x = random_vec(N * C, 11, -2.f, 2.f), g = random_vec(C, 12, 0.5f, 1.5f),
       b = random_vec(C, 13), w = random_vec(N * C, 14);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N, C,
                           1e-5f);
    return weighted_sum(out, w);
  };
  loss();
  std::vector<float> dx(N * C, 0.f), dg(C, 0.f), db(C, 0.f);
  cpu::layernorm_backward(dx.data(), dg.data(), db.data(), w.data(), x.data(), g.data(),
                          mean.data(), rstd.data(), N, C);
  fd_check("layernorm dx", x, dx, loss, 1e-2f, 1e-2);
  fd_check("layernorm dweight", g, dg, loss);
  fd_check("layernorm dbias", b, db, loss);
}

TEST(OpsGrad, LayerNormForwardMatchesDefinition) {
  const int64_t N = 2, C = 4;
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 0, 1}, g = {1, 2, 1, 1}, b = {0, 0, 1, 0};
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N, C,
                         1e-5f);
  // Row 0: mean 2.5, var 1.25.
  const double r = 1.0 / std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(out[0], (1 - 2.5) * r, 1e-6);
  EXPECT_NEAR(out[1], 2 * (2 - 2.5) * r, 1e-6);
  EXPECT_NEAR(out[2], (3 - 2.5) * r + 1, 1e-6);
  EXPECT_NEAR(mean[1], 0.0, 1e-7);
}

TEST(OpsGrad, Gelu) {
  const int64_t n = 200;
  auto x = random_vec(n, 15, -4.f, 4.f), w = random_vec(n, 16);
  std::vector<float> out(n);
  auto loss = [&] {
    cpu::gelu_forward(out.data(), x.data(), n);
    return weighted_sum(out, w);
  };
  std::vector<float> dx(n, 0.f);
  cpu::gelu_backward(dx.data(), x.data(), w.data(), n);
  fd_check("gelu dx", x, dx, loss, 1e-3f, 5e-3, 200);
  // GPT-2's tanh form at x = 1: 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.841192
  float one = 1.f, y = 0.f;
  cpu::gelu_forward(&y, &one, 1);
  EXPECT_NEAR(y, 0.8411920f, 1e-6);
}

TEST(OpsGrad, Residual) {
  const int64_t n = 30;
  auto a = random_vec(n, 17), b = random_vec(n, 18), w = random_vec(n, 19);
  std::vector<float> out(n);
  auto loss = [&] {
    cpu::residual_forward(out.data(), a.data(), b.data(), n);
    return weighted_sum(out, w);
  };
  std::vector<float> da(n, 0.f), db(n, 0.f);
  cpu::residual_backward(da.data(), db.data(), w.data(), n);
  fd_check("residual da", a, da, loss);
  fd_check("residual db", b, db, loss);
}

TEST(OpsGrad, CausalAttention) {
  // S = 70 spans two key/query blocks (64 + a ragged 6), with and without segment starts.
  const int64_t B = 2, S = 70, NH = 2, HD = 3, H = NH * HD;
  std::vector<int32_t> seg(B * S);
  for (int64_t t = 0; t < S; ++t) seg[t] = 0, seg[S + t] = int32_t(t < 30 ? 0 : t < 66 ? 30 : 66);
  for (const int32_t* sp : {(const int32_t*)nullptr, (const int32_t*)seg.data()}) {
    auto qkv = random_vec(B * S * 3 * H, 20, -1.5f, 1.5f), w = random_vec(B * S * H, 21);
    std::vector<float> out(B * S * H), lse(B * NH * S);
    auto loss = [&] {
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, S, NH, HD, sp);
      return weighted_sum(out, w);
    };
    loss();
    std::vector<float> dqkv(qkv.size(), 0.f);
    cpu::attention_backward(dqkv.data(), w.data(), out.data(), qkv.data(), lse.data(), B, S, NH, HD,
                            sp);
    fd_check(sp ? "attention dqkv (segments)" : "attention dqkv", qkv, dqkv, loss, 1e-2f, 5e-3,
             600);
  }
}

// The tiled kernels against the plain materialized-probabilities attention on random shapes
// with ragged tails (S not a multiple of the 64-row block), several heads and head sizes, more
// keys than one 256-column chunk, and segment starts: outputs, the log-sum-exp and every input gradient.
TEST(OpsGrad, FlashAttentionMatchesThePlainReference) {
  struct Case {
    int64_t B, S, NH, HD;
    bool seg;
  };
  for (const Case& k :
       {Case{1, 1, 1, 4, false}, Case{2, 63, 3, 8, false}, Case{1, 64, 2, 16, false},
        Case{2, 129, 2, 32, true}, Case{1, 200, 4, 64, true}, Case{1, 600, 2, 16, false},
        Case{1, 700, 1, 8, true}}) {
    const int64_t H = k.NH * k.HD, N = k.B * k.S;
    auto qkv = random_vec(N * 3 * H, 40, -2.f, 2.f), dout = random_vec(N * H, 41);
    std::vector<int32_t> seg(N);
    for (int64_t b = 0; b < k.B; ++b)
      for (int64_t t = 0; t < k.S; ++t) seg[b * k.S + t] = int32_t(k.seg ? (t / 37) * 37 : 0);
    const int32_t* sp = k.seg ? seg.data() : nullptr;
    std::vector<float> out(N * H), lse(k.B * k.NH * k.S), ref(N * H), probs(k.B * k.NH * k.S * k.S);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), k.B, k.S, k.NH, k.HD, sp);
    testing::reference_attention_forward(ref.data(), probs.data(), qkv.data(), k.B, k.S, k.NH, k.HD,
                                         sp);
    std::vector<double> a(out.begin(), out.end()), b(ref.begin(), ref.end());
    EXPECT_LT(testing::rel_l2(a, b), 1e-5) << "S " << k.S << " HD " << k.HD;
    std::vector<float> dq(qkv.size(), 0.f), dq_ref(qkv.size(), 0.f);
    cpu::attention_backward(dq.data(), dout.data(), out.data(), qkv.data(), lse.data(), k.B, k.S,
                            k.NH, k.HD, sp);
    testing::reference_attention_backward(dq_ref.data(), dout.data(), qkv.data(), probs.data(), k.B,
                                          k.S, k.NH, k.HD);
    std::vector<double> c(dq.begin(), dq.end()), d(dq_ref.begin(), dq_ref.end());
    EXPECT_LT(testing::rel_l2(c, d), 1e-5) << "S " << k.S << " HD " << k.HD;
  }
}

TEST(OpsGrad, CausalAttentionIsCausal) {
  // Changing a future token's k/v must not change earlier outputs.
  const int64_t B = 1, S = 4, NH = 1, HD = 2, H = 2;
  auto qkv = random_vec(S * 3 * H, 22);
  std::vector<float> out1(S * H), out2(S * H), lse(S);
  cpu::attention_forward(out1.data(), lse.data(), qkv.data(), B, S, NH, HD);
  for (int64_t c = 0; c < 3 * H; ++c) qkv[3 * 3 * H + c] += 5.f;  // last position
  cpu::attention_forward(out2.data(), lse.data(), qkv.data(), B, S, NH, HD);
  for (int64_t i = 0; i < 3 * H; ++i) EXPECT_EQ(out1[i], out2[i]);
  EXPECT_NE(out1[3 * H], out2[3 * H]);
  // Row 0 attends only to itself: output = v_0.
  EXPECT_FLOAT_EQ(out1[0], qkv[2 * HD]);
}

TEST(OpsGrad, CrossEntropy) {
  const int64_t N = 4, V = 9;
  auto logits = random_vec(N * V, 23, -3.f, 3.f), w = random_vec(N, 24, 0.1f, 1.f);
  std::vector<int32_t> target = {0, 8, 3, -1};  // the last row is ignored
  std::vector<float> losses(N), lse(N);
  auto loss = [&] {
    cpu::cross_entropy_forward(losses.data(), lse.data(), logits.data(), target.data(), N, V);
    return weighted_sum(losses, w);
  };
  loss();
  EXPECT_EQ(losses[3], 0.f);
  double ref = 0;
  for (int64_t j = 0; j < V; ++j) ref += std::exp(double(logits[V + j]));
  EXPECT_NEAR(losses[1], std::log(ref) - logits[V + 8], 1e-5);
  std::vector<float> dlogits(N * V);
  cpu::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), target.data(), w.data(), 0,
                              N, V);
  fd_check("cross-entropy dlogits", logits, dlogits, loss, 1e-2f, 5e-3, 1000);
}

TEST(OpsGrad, CrossEntropyPiecesComposeAcrossVocabShards) {
  // Two shards of a 10-wide vocab combined as the vocab-parallel loss does (max, sum of
  // exp, target logit) give the single-shard loss and the single-shard gradient columns.
  const int64_t N = 3, V = 10, half = 5;
  auto logits = random_vec(N * V, 44, -3.f, 3.f);
  std::vector<int32_t> target = {1, 7, 5};
  std::vector<float> ref_loss(N), ref_lse(N), dl = {1.f, 0.3f, 2.f}, ref_d(N * V);
  cpu::cross_entropy_forward(ref_loss.data(), ref_lse.data(), logits.data(), target.data(), N, V);
  cpu::cross_entropy_backward(ref_d.data(), logits.data(), ref_lse.data(), target.data(), dl.data(),
                              0, N, V);
  std::vector<float> shard[2];
  for (int s = 0; s < 2; ++s)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < half; ++j) shard[s].push_back(logits[n * V + s * half + j]);
  std::vector<float> mx(N), mx1(N), se(N), se1(N), tl(N), tl1(N);
  cpu::cross_entropy_row_max(mx.data(), shard[0].data(), N, half);
  cpu::cross_entropy_row_max(mx1.data(), shard[1].data(), N, half);
  for (int64_t n = 0; n < N; ++n) mx[n] = std::max(mx[n], mx1[n]);
  cpu::cross_entropy_sum_exp(se.data(), shard[0].data(), mx.data(), N, half);
  cpu::cross_entropy_sum_exp(se1.data(), shard[1].data(), mx.data(), N, half);
  cpu::cross_entropy_target_logit(tl.data(), shard[0].data(), target.data(), 0, N, half);
  cpu::cross_entropy_target_logit(tl1.data(), shard[1].data(), target.data(), half, N, half);
  std::vector<float> lse(N);
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = mx[n] + std::log(se[n] + se1[n]);
    EXPECT_NEAR(lse[n] - (tl[n] + tl1[n]), ref_loss[n], 1e-5);
  }
  for (int s = 0; s < 2; ++s) {
    cpu::cross_entropy_backward(shard[s].data(), shard[s].data(), lse.data(), target.data(),
                                dl.data(), s * half, N, half);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < half; ++j)
        EXPECT_NEAR(shard[s][n * half + j], ref_d[n * V + s * half + j], 1e-6);
  }
}

TEST(OpsGrad, CrossEntropyInPlace) {
  const int64_t N = 3, V = 5;
  auto logits = random_vec(N * V, 25);
  std::vector<int32_t> target = {1, 2, 4};
  std::vector<float> losses(N), lse(N), dl = {1.f, 0.5f, 2.f}, sep(N * V);
  cpu::cross_entropy_forward(losses.data(), lse.data(), logits.data(), target.data(), N, V);
  cpu::cross_entropy_backward(sep.data(), logits.data(), lse.data(), target.data(), dl.data(), 0, N,
                              V);
  cpu::cross_entropy_backward(logits.data(), logits.data(), lse.data(), target.data(), dl.data(), 0,
                              N, V);
  for (int64_t i = 0; i < N * V; ++i) EXPECT_FLOAT_EQ(logits[i], sep[i]);
}

// The clip factor folded into the update equals clipping the stored grads first, bit for bit.
TEST(OpsGrad, ClipFactorInTheUpdateEqualsClippingFirst) {
  const int64_t n = 1037;
  std::vector<float> g(n), p(n), m(n, 0.01f), v(n, 0.02f);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = std::sin(0.37f * float(i));
    p[i] = std::cos(0.11f * float(i));
  }
  std::vector<float> gc = g, p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v, b1(n), b2(n);
  cpu::scale_inplace(gc.data(), 0.3f, n);
  cpu::adamw_update(p1.data(), gc.data(), m1.data(), v1.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                    3);
  cpu::adamw_update(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                    3, 0.3f);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  std::vector<float> q1 = p, q2 = p;
  cpu::sgd_update(q1.data(), gc.data(), b1.data(), n, 0.1f, 0.9f, 0.01f, 1);
  cpu::sgd_update(q2.data(), g.data(), b2.data(), n, 0.1f, 0.9f, 0.01f, 1, 0.3f);
  EXPECT_EQ(q1, q2);
}

TEST(OpsGrad, AdamWMatchesClosedForm) {
  // One element, two steps, against the formula evaluated in double.
  float p = 0.5f, m = 0.f, v = 0.f;
  const float g1 = 0.2f, g2 = -0.1f, lr = 0.01f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  cpu::adamw_update(&p, &g1, &m, &v, 1, lr, b1, b2, eps, wd, 1);
  cpu::adamw_update(&p, &g2, &m, &v, 1, lr, b1, b2, eps, wd, 2);
  double P = 0.5, M = 0, Vv = 0;
  for (int t = 1; t <= 2; ++t) {
    const double g = t == 1 ? g1 : g2;
    P *= 1 - double(lr) * wd;
    M = b1 * M + (1 - b1) * g;
    Vv = b2 * Vv + (1 - b2) * g * g;
    P -= lr / (1 - std::pow(double(b1), t)) * M /
         (std::sqrt(Vv) / std::sqrt(1 - std::pow(double(b2), t)) + eps);
  }
  EXPECT_NEAR(p, P, 1e-6);
  EXPECT_NEAR(m, M, 1e-7);
  EXPECT_NEAR(v, Vv, 1e-8);
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// The threaded paths (per-thread partial sums, column-split scatter-add, per-thread attention
// scratch) must give the single-thread results.
TEST(OpsThreads, TwoThreadsMatchOne) {
  const int64_t B = 2, S = 16, NH = 2, HD = 8, H = NH * HD, N = B * S;
  auto qkv = testing::random_vec(N * 3 * H, 30), dout = testing::random_vec(N * H, 31);
  auto x = testing::random_vec(N * H, 32), g = testing::random_vec(H, 33);
  std::vector<int32_t> tok(N), pos(N);
  for (int64_t i = 0; i < N; ++i) tok[i] = int32_t(i % 5), pos[i] = int32_t(i % S);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out(N * H), lse(B * NH * S), dqkv(N * 3 * H, 0.f), mean(N), rstd(N),
        y(N * H), dx(N * H, 0.f), dg(H, 0.f), db(H, 0.f), dwte(5 * H, 0.f), dwpe(S * H, 0.f);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, S, NH, HD);
    cpu::attention_backward(dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(), B, S, NH,
                            HD);
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), g.data(), N, H,
                           1e-5f);
    cpu::layernorm_backward(dx.data(), dg.data(), db.data(), dout.data(), x.data(), g.data(),
                            mean.data(), rstd.data(), N, H);
    cpu::embedding_backward(dwte.data(), dout.data(), tok.data(), 0, 5, N, H);
    cpu::embedding_backward(dwpe.data(), dout.data(), pos.data(), 0, S, N, H);
    std::vector<float> all;
    for (auto* v : {&out, &dqkv, &y, &dx, &dg, &db, &dwte, &dwpe})
      all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  auto one = run(1), two = run(2);
  omp_set_num_threads(1);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i)
    ASSERT_NEAR(one[i], two[i], 1e-5f * (1.f + std::fabs(one[i]))) << i;
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// --reset-attention-mask: with segment starts, each segment attends as if it were alone.
TEST(OpsGrad, AttentionSegmentsAreIndependent) {
  const int64_t S = 6, NH = 2, HD = 3, H = NH * HD, cut = 2;  // segments [0, 2) and [2, 6)
  auto qkv = testing::random_vec(S * 3 * H, 50);
  std::vector<int32_t> seg = {0, 0, 2, 2, 2, 2};
  std::vector<float> out(S * H), probs(NH * S * S), tail_out((S - cut) * H),
      tail_probs(NH * (S - cut) * (S - cut));
  cpu::attention_forward(out.data(), probs.data(), qkv.data(), 1, S, NH, HD, seg.data());
  cpu::attention_forward(tail_out.data(), tail_probs.data(), qkv.data() + cut * 3 * H, 1, S - cut,
                         NH, HD);
  for (int64_t i = 0; i < (S - cut) * H; ++i) EXPECT_NEAR(out[cut * H + i], tail_out[i], 1e-6);
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t t = cut; t < S; ++t)
      for (int64_t j = 0; j < cut; ++j) EXPECT_EQ(probs[(h * S + t) * S + j], 0.f);
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

TEST(OpsGrad, SgdMatchesTorchFormula) {
  float p = 1.0f, buf = 0.f;
  const float g1 = 0.5f, g2 = -0.25f, lr = 0.1f, mom = 0.9f, wd = 0.01f;
  cpu::sgd_update(&p, &g1, &buf, 1, lr, mom, wd, 1);
  double P = 1.0, B = 0.5 + 0.01 * 1.0;  // first step: buf = g + wd p
  P -= 0.1 * B;
  EXPECT_NEAR(p, P, 1e-7);
  cpu::sgd_update(&p, &g2, &buf, 1, lr, mom, wd, 2);
  B = 0.9 * B + (-0.25 + 0.01 * P);
  P -= 0.1 * B;
  EXPECT_NEAR(p, P, 1e-7);
  EXPECT_NEAR(buf, B, 1e-7);
}

// GradWrite::Set stores the input gradient: what Add adds into zeros, whatever the buffer held
// (NaN here), while the weight and bias grads still accumulate.
TEST(OpsGrad, SetStoresWhatAddAddsToZero) {
  const float nan = std::nanf("");
  const int64_t N = 5, IN = 6, OUT = 4;
  auto x = random_vec(N * IN, 40), W = random_vec(OUT * IN, 41), dout = random_vec(N * OUT, 42);
  std::vector<float> dx_add(N * IN, 0.f), dx_set(N * IN, nan), dW(OUT * IN, 1.f), dW2 = dW;
  cpu::linear_backward(dx_add.data(), dW.data(), nullptr, dout.data(), x.data(), W.data(), N, IN,
                       OUT);
  cpu::linear_backward(dx_set.data(), dW2.data(), nullptr, dout.data(), x.data(), W.data(), N, IN,
                       OUT, cpu::GradWrite::Set);
  EXPECT_EQ(dx_set, dx_add);
  EXPECT_EQ(dW2, dW);
  auto g_add = std::vector<float>(N * IN, 0.f), g_set = std::vector<float>(N * IN, nan);
  cpu::gelu_backward(g_add.data(), x.data(), dx_add.data(), N * IN);
  cpu::gelu_backward(g_set.data(), x.data(), dx_add.data(), N * IN, cpu::GradWrite::Set);
  EXPECT_EQ(g_set, g_add);
  const int64_t B = 1, S = 9, NH = 2, HD = 4, H = NH * HD;
  auto qkv = random_vec(S * 3 * H, 43), d = random_vec(S * H, 44);
  std::vector<float> out(S * H), lse(NH * S), dq_add(S * 3 * H, 0.f), dq_set(S * 3 * H, nan);
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, S, NH, HD);
  cpu::attention_backward(dq_add.data(), d.data(), out.data(), qkv.data(), lse.data(), B, S, NH,
                          HD);
  cpu::attention_backward(dq_set.data(), d.data(), out.data(), qkv.data(), lse.data(), B, S, NH, HD,
                          nullptr, cpu::GradWrite::Set);
  EXPECT_EQ(dq_set, dq_add);
}

}  // namespace
}  // namespace mg
