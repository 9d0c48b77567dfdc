// MoE router: the backward against fp64 central differences of sum(w ⊙ G) + aux + z; the aux and
// z losses against closed forms; choices, weights, losses and gradients against a PyTorch
// restatement of Megatron-Core's routing (moe_router_reference.py); capacity dropping on hand
// cases whose drops are counted exactly.
#include "layers/moe_router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "testing/fd_check.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

constexpr int64_t kT = 7, kE = 6;

template <typename T>
void write_bin(const std::filesystem::path& p, const std::vector<T>& v) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

std::vector<double> read_f64(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  std::vector<double> v(size_t(f.tellg()) / sizeof(double));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(double)));
  return v;
}

struct Case {
  int64_t k;
  RouterScore score;
  bool pre;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (int64_t k : {1, 2, 4})
    for (RouterScore s : {RouterScore::Softmax, RouterScore::Sigmoid})
      for (bool pre : {false, true}) out.push_back({k, s, pre});
  return out;
}

// Upstream refuses softmax top-1 without pre-softmax (the weight is always 1).
bool refused(const Case& c) { return c.k == 1 && c.score == RouterScore::Softmax && !c.pre; }

std::string name(const Case& c) {
  return std::string(c.score == RouterScore::Softmax ? "softmax" : "sigmoid") +
         " k=" + std::to_string(c.k) + (c.pre ? " pre-softmax" : "");
}

MoeRouterConfig config(const Case& c) {
  MoeRouterConfig cfg;
  cfg.num_experts = kE;
  cfg.topk = c.k;
  cfg.score = c.score;
  cfg.pre_softmax = c.pre;
  cfg.topk_scaling_factor = 1.5;
  cfg.aux_loss_coeff = 0.3;
  cfg.z_loss_coeff = 0.05;
  return cfg;
}

template <typename T>
std::vector<T> to(const std::vector<float>& v) {
  return std::vector<T>(v.begin(), v.end());
}

double objective(const MoeRouterCache<double>& c, const std::vector<double>& g) {
  double s = c.aux_loss + c.z_loss;
  for (size_t i = 0; i < g.size(); ++i) s += c.weights[i] * g[i];
  return s;
}

// The backward of T tokens (of `sequences` sequences) against central differences of
// sum(w ⊙ g) + aux + z in every logit.
void expect_backward_matches_fd(const MoeRouterConfig& cfg, std::vector<double> x,
                                const std::vector<double>& g, int64_t T, int64_t sequences = 1) {
  const auto base = moe_router_forward(cfg, x.data(), T, sequences);
  std::vector<double> dx(x.size());
  moe_router_backward(cfg, base, x.data(), g.data(), T, dx.data());
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const auto plus = moe_router_forward(cfg, x.data(), T, sequences);
    x[i] = x0 - h;
    const auto minus = moe_router_forward(cfg, x.data(), T, sequences);
    x[i] = x0;
    // The difference quotient is only the derivative while the routing stays put.
    ASSERT_EQ(plus.experts, base.experts);
    ASSERT_EQ(minus.experts, base.experts);
    ASSERT_EQ(plus.tokens_per_expert, base.tokens_per_expert);
    ASSERT_EQ(minus.tokens_per_expert, base.tokens_per_expert);
    const double fd = (objective(plus, g) - objective(minus, g)) / (2 * h);
    EXPECT_NEAR(dx[i], fd, 1e-8 + 1e-7 * std::abs(fd)) << "logit " << i;
  }
}

TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  for (const Case& cs : all_cases()) {
    SCOPED_TRACE(name(cs));
    const MoeRouterConfig cfg = config(cs);
    const std::vector<double> x = to<double>(testing::random_vec(kT * kE, 11, -2.f, 2.f));
    const std::vector<double> g = to<double>(testing::random_vec(kT * cs.k, 12));
    if (refused(cs)) {
      EXPECT_THROW(moe_router_forward(cfg, x.data(), kT), UsageError);
      continue;
    }
    expect_backward_matches_fd(cfg, x, g, kT);
  }
}

// Every term of the gradient is exercised: each coefficient alone gives a nonzero gradient.
TEST(MoeRouter, EachLossTermHasAGradient) {
  Case cs{2, RouterScore::Softmax, false};
  const std::vector<double> x = to<double>(testing::random_vec(kT * kE, 21, -2.f, 2.f));
  const std::vector<double> zero(kT * 2, 0.0);
  for (int term = 0; term < 2; ++term) {
    MoeRouterConfig cfg = config(cs);
    (term == 0 ? cfg.z_loss_coeff : cfg.aux_loss_coeff) = 0;
    const auto c = moe_router_forward(cfg, x.data(), kT);
    std::vector<double> dx(x.size());
    moe_router_backward(cfg, c, x.data(), zero.data(), kT, dx.data());
    double norm = 0;
    for (double v : dx) norm += v * v;
    EXPECT_GT(norm, 1e-8) << (term == 0 ? "aux" : "z");
  }
}

TEST(MoeRouter, LossesMatchClosedForms) {
  // Equal logits c: softmax is 1/E everywhere, so aux = coeff·E·Σ_e f_e/E = coeff (Σ f_e = 1)
  // whatever the routing, and logsumexp = c + log E for every token.
  for (RouterScore s : {RouterScore::Softmax, RouterScore::Sigmoid}) {
    MoeRouterConfig cfg = config({2, s, false});
    const double cval = 0.7;
    const std::vector<double> x(kT * kE, cval);
    const auto c = moe_router_forward(cfg, x.data(), kT);
    EXPECT_NEAR(c.aux_loss, cfg.aux_loss_coeff, 1e-15);
    EXPECT_NEAR(c.z_loss, cfg.z_loss_coeff * std::pow(cval + std::log(double(kE)), 2), 1e-15);
    // Ties go to the lower index: every token picks experts 0 and 1.
    for (int64_t t = 0; t < kT; ++t) {
      EXPECT_EQ(c.experts[size_t(t * 2)], 0);
      EXPECT_EQ(c.experts[size_t(t * 2 + 1)], 1);
    }
  }
  // Random logits: the definitions written out here, per term.
  for (const Case& cs : all_cases()) {
    if (refused(cs)) continue;
    SCOPED_TRACE(name(cs));
    const MoeRouterConfig cfg = config(cs);
    const std::vector<double> x = to<double>(testing::random_vec(kT * kE, 31, -3.f, 3.f));
    const auto c = moe_router_forward(cfg, x.data(), kT);
    std::vector<double> f(kE, 0), p(kE, 0);
    double z = 0;
    for (int64_t t = 0; t < kT; ++t) {
      std::vector<double> q(kE);
      double sum = 0, ssum = 0;
      for (int64_t e = 0; e < kE; ++e) sum += std::exp(x[size_t(t * kE + e)]);
      for (int64_t e = 0; e < kE; ++e) ssum += 1 / (1 + std::exp(-x[size_t(t * kE + e)]));
      for (int64_t e = 0; e < kE; ++e)
        q[size_t(e)] = cs.score == RouterScore::Softmax
                           ? std::exp(x[size_t(t * kE + e)]) / sum
                           : 1 / (1 + std::exp(-x[size_t(t * kE + e)])) / ssum;
      z += std::log(sum) * std::log(sum);
      std::vector<int> order(kE);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return q[a] > q[b]; });
      for (int j = 0; j < cs.k; ++j) f[size_t(order[size_t(j)])] += 1.0 / double(kT * cs.k);
      for (int64_t e = 0; e < kE; ++e) p[size_t(e)] += q[size_t(e)] / kT;
    }
    double aux = 0;
    for (int64_t e = 0; e < kE; ++e) aux += f[size_t(e)] * p[size_t(e)];
    aux *= cfg.aux_loss_coeff * kE;
    EXPECT_NEAR(c.aux_loss, aux, 1e-14);
    EXPECT_NEAR(c.z_loss, cfg.z_loss_coeff * z / kT, 1e-14);
  }
}

// seq_aux_loss (Megatron's sequence_load_balancing_loss_func): T = S·B sequence-first tokens,
// token t in sequence t % B. The loss is the mean over the B sequences of each sequence's own
// switch loss (the router run on that sequence's rows alone); the z-loss and the routing are
// unchanged; the backward matches central differences.
TEST(MoeRouter, SeqAuxLossIsTheMeanOverSequences) {
  constexpr int64_t S = 5, B = 3, T = S * B;
  for (const Case& cs : all_cases()) {
    if (refused(cs)) continue;
    SCOPED_TRACE(name(cs));
    MoeRouterConfig plain = config(cs), seq = config(cs);
    seq.per_sequence = true;
    const std::vector<double> x = to<double>(testing::random_vec(T * kE, 41, -2.f, 2.f));
    const auto c = moe_router_forward(seq, x.data(), T, B);
    const auto whole = moe_router_forward(plain, x.data(), T, B);
    EXPECT_EQ(c.experts, whole.experts);
    EXPECT_EQ(c.weights, whole.weights);
    EXPECT_DOUBLE_EQ(c.z_loss, whole.z_loss);
    double mean = 0;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> rows;
      for (int64_t s = 0; s < S; ++s)
        rows.insert(rows.end(), x.begin() + (s * B + b) * kE, x.begin() + (s * B + b + 1) * kE);
      mean += moe_router_forward(plain, rows.data(), S).aux_loss / B;
    }
    EXPECT_NEAR(c.aux_loss, mean, 1e-14);
    EXPECT_GT(std::fabs(c.aux_loss - whole.aux_loss), 1e-6) << "the grouping changes the loss";
    // One sequence: the micro-batch's loss.
    EXPECT_NEAR(moe_router_forward(seq, x.data(), T, 1).aux_loss, whole.aux_loss, 1e-15);

    expect_backward_matches_fd(seq, x, to<double>(testing::random_vec(T * cs.k, 42)), T, B);
  }
}

// Group-limited routing (--moe-router-num-groups 4 --moe-router-group-topk 2, 8 experts, top-4:
// each group scored by its best 2): a hand case where the plain top-4 would take expert 4 from
// the third-best group; here the experts of groups 1 and 0 only, best first. Then the backward
// against finite differences for softmax, pre-softmax and sigmoid scores, and the rules.
TEST(MoeRouter, GroupLimitedRouting) {
  MoeRouterConfig cfg;
  cfg.num_experts = 8;
  cfg.topk = 4;
  cfg.num_groups = 4;
  cfg.group_topk = 2;
  // Group sums of the best two: g0 0.9 + 0.1, g1 0.6 + 0.6 (best), g2 0.8 + 0, g3 0.3 + 0.3.
  const std::vector<double> x = {0.9, 0.1, 0.6, 0.6, 0.8, 0.0, 0.3, 0.3};
  EXPECT_EQ(moe_router_forward(cfg, x.data(), 1).experts, (std::vector<int32_t>{0, 2, 3, 1}));
  MoeRouterConfig plain = cfg;
  plain.num_groups = plain.group_topk = 0;
  EXPECT_EQ(moe_router_forward(plain, x.data(), 1).experts, (std::vector<int32_t>{0, 4, 2, 3}));

  for (RouterScore score : {RouterScore::Softmax, RouterScore::Sigmoid})
    for (bool pre : {false, true}) {
      MoeRouterConfig c = cfg;
      c.score = score;
      c.pre_softmax = pre;
      c.aux_loss_coeff = 0.3;
      c.z_loss_coeff = 0.05;
      constexpr int64_t T = 5;
      expect_backward_matches_fd(c, to<double>(testing::random_vec(T * 8, 51, -2.f, 2.f)),
                                 to<double>(testing::random_vec(T * 4, 52)), T);
    }

  // --moe-router-num-groups alone is ignored, as upstream.
  MoeRouterConfig groups_only = plain;
  groups_only.num_groups = 4;
  EXPECT_EQ(moe_router_forward(groups_only, x.data(), 1).experts,
            (std::vector<int32_t>{0, 4, 2, 3}));
  for (auto [groups, gk, k] :
       {std::tuple{3, 1, 2}, std::tuple{4, 5, 4}, std::tuple{4, 3, 2}, std::tuple{4, 1, 4},
        std::tuple{0, 2, 4}, std::tuple{-1, 1, 4}, std::tuple{4, -1, 4}}) {
    MoeRouterConfig bad = cfg;
    bad.num_groups = groups;
    bad.group_topk = gk;
    bad.topk = k;
    EXPECT_THROW(bad.validate(), UsageError) << groups << " " << gk << " " << k;
  }
}

TEST(MoeRouter, MatchesPyTorchReference) {
  std::vector<Case> cases;
  for (const Case& cs : all_cases())
    if (!refused(cs)) cases.push_back(cs);
  auto logits_of = [](const Case& cs) {
    return testing::random_vec(kT * kE, 41 + uint32_t(cs.k), -3.f, 3.f);
  };
  auto grad_of = [](const Case& cs) { return to<double>(testing::random_vec(kT * cs.k, 43)); };
  // One interpreter runs every case.
  testing::TempDir dir("mg_moe_router");
  {
    std::ofstream list(dir / "cases.txt");
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& cs = cases[i];
      const MoeRouterConfig cfg = config(cs);
      char line[256];
      std::snprintf(line, sizeof line, "%lld %lld %lld %s %d %.17g %.17g %.17g\n", (long long)kT,
                    (long long)kE, (long long)cs.k,
                    cs.score == RouterScore::Softmax ? "softmax" : "sigmoid", int(cs.pre),
                    cfg.topk_scaling_factor, cfg.aux_loss_coeff, cfg.z_loss_coeff);
      list << line;
      write_bin(dir / (std::to_string(i) + ".logits.f32"), logits_of(cs));
      write_bin(dir / (std::to_string(i) + ".grad.f64"), grad_of(cs));
    }
  }
  const auto r = testing::run_command(std::string(MG_PYTHON) + " " + MG_SOURCE_DIR +
                                      "/tests/layers/moe_router_reference.py " + dir.str());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& cs = cases[ci];
    SCOPED_TRACE(name(cs));
    const MoeRouterConfig cfg = config(cs);
    const std::vector<float> x = logits_of(cs);
    const std::vector<double> g = grad_of(cs);
    const std::string pre = std::to_string(ci) + ".";
    const auto ref_experts = read_f64(dir / (pre + "experts.f64"));
    const auto ref_weights = read_f64(dir / (pre + "weights.f64"));
    const auto ref_losses = read_f64(dir / (pre + "losses.f64"));
    const auto ref_dlogits = read_f64(dir / (pre + "dlogits.f64"));
    ASSERT_EQ(ref_experts.size(), size_t(kT * cs.k));
    ASSERT_EQ(ref_weights.size(), size_t(kT * cs.k));
    ASSERT_EQ(ref_losses.size(), 2u);
    ASSERT_EQ(ref_dlogits.size(), size_t(kT * kE));

    // fp64 path: the same math, so agreement to rounding.
    const std::vector<double> xd = to<double>(x);
    const auto cd = moe_router_forward(cfg, xd.data(), kT);
    std::vector<double> dxd(xd.size());
    moe_router_backward(cfg, cd, xd.data(), g.data(), kT, dxd.data());
    for (size_t i = 0; i < ref_experts.size(); ++i) {
      EXPECT_EQ(cd.experts[i], int32_t(ref_experts[i])) << i;
      EXPECT_NEAR(cd.weights[i], ref_weights[i], 1e-14) << i;
    }
    EXPECT_NEAR(cd.aux_loss, ref_losses[0], 1e-14);
    EXPECT_NEAR(cd.z_loss, ref_losses[1], 1e-14);
    EXPECT_LT(testing::rel_l2(dxd, ref_dlogits), 1e-12);

    // fp32 path, as the model runs it.
    const auto cf = moe_router_forward(cfg, x.data(), kT);
    const std::vector<float> gf(g.begin(), g.end());
    std::vector<float> dxf(x.size());
    moe_router_backward(cfg, cf, x.data(), gf.data(), kT, dxf.data());
    for (size_t i = 0; i < ref_experts.size(); ++i) {
      EXPECT_EQ(cf.experts[i], int32_t(ref_experts[i])) << i;
      EXPECT_NEAR(cf.weights[i], ref_weights[i], 2e-6) << i;
    }
    EXPECT_NEAR(cf.aux_loss, ref_losses[0], 2e-6);
    EXPECT_NEAR(cf.z_loss, ref_losses[1], 2e-6 * ref_losses[1]);
    EXPECT_LT(testing::rel_l2(to<double>(dxf), ref_dlogits), 1e-5);
  }
}

TEST(MoeRouter, SigmoidIgnoresPreSoftmax) {
  const std::vector<double> x = to<double>(testing::random_vec(kT * kE, 51, -2.f, 2.f));
  const auto a = moe_router_forward(config({2, RouterScore::Sigmoid, false}), x.data(), kT);
  const auto b = moe_router_forward(config({2, RouterScore::Sigmoid, true}), x.data(), kT);
  EXPECT_EQ(a.experts, b.experts);
  EXPECT_EQ(a.weights, b.weights);
}

TEST(MoeRouter, CapacityFormula) {
  EXPECT_EQ(moe_expert_capacity(7, 2, 6, 1.0), 3);   // ceil(14/6)
  EXPECT_EQ(moe_expert_capacity(6, 1, 3, 1.0), 2);   // exact
  EXPECT_EQ(moe_expert_capacity(8, 2, 4, 0.5), 2);   // ceil(4·0.5)
  EXPECT_EQ(moe_expert_capacity(10, 1, 4, 1.5), 4);  // ceil(3.75)
  EXPECT_THROW(moe_expert_capacity(8, 2, 4, 0.0), UsageError);
}

TEST(MoeRouter, CapacityDropsLowestWeightsCountedExactly) {
  {
    // k = 1, E = 3, c = 1: capacity 2. Expert 0 gets four tokens and keeps its two heaviest.
    const std::vector<int32_t> ex = {0, 0, 0, 0, 1, 2};
    const std::vector<float> w = {0.5f, 0.9f, 0.7f, 0.6f, 0.8f, 0.8f};
    const CapacityDrop d = moe_capacity_drop(ex, w, 6, 1, 3, 1.0);
    EXPECT_EQ(d.capacity, 2);
    EXPECT_EQ(d.dropped, 2);
    EXPECT_EQ(d.keep, (std::vector<uint8_t>{0, 1, 1, 0, 1, 1}));
  }
  {
    // k = 2, E = 4, T = 4, c = 0.5: capacity ceil(8/4·0.5) = 1. Expert 0 holds slots of weight
    // .6 .5 .7 .45 (keeps token 2), expert 1 .4 .3 (keeps token 0); experts 2 and 3 one each.
    const std::vector<int32_t> ex = {0, 1, 0, 2, 0, 1, 3, 0};
    const std::vector<double> w = {0.6, 0.4, 0.5, 0.5, 0.7, 0.3, 0.55, 0.45};
    const CapacityDrop d = moe_capacity_drop(ex, w, 4, 2, 4, 0.5);
    EXPECT_EQ(d.capacity, 1);
    EXPECT_EQ(d.dropped, 4);
    EXPECT_EQ(d.keep, (std::vector<uint8_t>{0, 1, 0, 1, 1, 0, 1, 0}));
  }
  {
    // Equal weights: the lower token stays.
    const std::vector<int32_t> ex = {1, 1, 1, 0};
    const std::vector<float> w = {0.5f, 0.5f, 0.5f, 0.5f};
    const CapacityDrop d = moe_capacity_drop(ex, w, 4, 1, 2, 0.5);  // capacity 1
    EXPECT_EQ(d.capacity, 1);
    EXPECT_EQ(d.dropped, 2);
    EXPECT_EQ(d.keep, (std::vector<uint8_t>{1, 0, 0, 1}));
  }
  {
    // Capacity at or above every expert's load drops nothing.
    const std::vector<int32_t> ex = {0, 1, 2, 0, 1, 2};
    const std::vector<float> w(6, 0.3f);
    const CapacityDrop d = moe_capacity_drop(ex, w, 6, 1, 3, 1.0);
    EXPECT_EQ(d.dropped, 0);
    EXPECT_EQ(d.keep, std::vector<uint8_t>(6, 1));
  }
}

// --moe-token-drop-policy position: each expert keeps its first `capacity` tokens whatever
// their weights.
TEST(MoeRouter, CapacityByPositionKeepsTheFirstTokens) {
  // The first case above: expert 0's four tokens (weights .5 .9 .7 .6), capacity 2: tokens 0
  // and 1 stay (probs would keep 1 and 2).
  const std::vector<int32_t> ex = {0, 0, 0, 0, 1, 2};
  const std::vector<float> w = {0.5f, 0.9f, 0.7f, 0.6f, 0.8f, 0.8f};
  const CapacityDrop d = moe_capacity_drop(ex, w, 6, 1, 3, 1.0, /*by_position=*/true);
  EXPECT_EQ(d.dropped, 2);
  EXPECT_EQ(d.keep, (std::vector<uint8_t>{1, 1, 0, 0, 1, 1}));
}

// The full pipeline on routed weights: a token's dropped slots are exactly those whose expert
// overflowed, and kept + dropped = T·k.
TEST(MoeRouter, CapacityOnRoutedTokens) {
  const Case cs{2, RouterScore::Softmax, true};
  const MoeRouterConfig cfg = config(cs);
  const std::vector<float> x = testing::random_vec(kT * kE, 61, -2.f, 2.f);
  const auto c = moe_router_forward(cfg, x.data(), kT);
  const CapacityDrop d = moe_capacity_drop(c.experts, c.weights, kT, 2, kE, 0.5);
  ASSERT_EQ(d.capacity, 2);  // ceil(14/6 · 0.5)
  int64_t expect_dropped = 0;
  for (int64_t e = 0; e < kE; ++e) {
    std::vector<float> loads;
    int64_t kept = 0;
    for (size_t i = 0; i < c.experts.size(); ++i)
      if (c.experts[i] == e) {
        loads.push_back(c.weights[i]);
        kept += d.keep[i];
      }
    expect_dropped += std::max<int64_t>(0, int64_t(loads.size()) - d.capacity);
    EXPECT_EQ(kept, std::min<int64_t>(int64_t(loads.size()), d.capacity)) << "expert " << e;
    // Every kept weight is at least every dropped one.
    std::sort(loads.rbegin(), loads.rend());
    for (size_t i = 0; i < c.experts.size(); ++i)
      if (c.experts[i] == e && !d.keep[i]) {
        EXPECT_LE(c.weights[i], loads[size_t(d.capacity) - 1]);
      }
  }
  EXPECT_GT(expect_dropped, 0);
  EXPECT_EQ(d.dropped, expect_dropped);
}

}  // namespace
}  // namespace mg
