// A whole transformer layer (RMSNorm, GQA with RoPE, SwiGLU, attention dropout, two documents
// per sample) under context parallelism (LayerInputs::cp) against the same layer over the whole
// sequence on one rank: each CP rank's y and dx rows, and the parameter grads summed over the CP
// ranks (what the dp-cp reduction does), equal the reference within 1e-5 (fp32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "comm/mpi_communicator.h"
#include "context_parallel/cp_attention.h"
#include "layers/transformer_layer.h"

namespace mg {
namespace {

constexpr int64_t B = 2, H = 32, NH = 8, NG = 4, HD = 8, F = 16;

double rel_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// One layer's parameters (or grads) in separate buffers.
struct Params {
  std::vector<float> ln1, qkv, proj, ln2, fc1, fc2;
  explicit Params(const LayerSpec& s)
      : ln1(H), qkv(size_t(s.qkv_rows() * H)), proj(size_t(H * NH * HD)), ln2(H),
        fc1(size_t(s.fc1_rows() * H)), fc2(size_t(H * F)) {}
  std::vector<std::vector<float>*> all() { return {&ln1, &qkv, &proj, &ln2, &fc1, &fc2}; }
  LayerWeights weights() {
    return {ln1.data(), nullptr, qkv.data(), nullptr, proj.data(), nullptr, nullptr,    nullptr,
            nullptr,    nullptr, ln2.data(), nullptr, fc1.data(),  nullptr, fc2.data(), nullptr};
  }
};

// Rows of a (S*B, W) buffer at this rank's positions.
std::vector<float> local_rows(const std::vector<float>& x, const CpLayout& l, int64_t W) {
  std::vector<float> out;
  for (int64_t t = 0; t < l.local_length(); ++t)
    for (int64_t b = 0; b < B; ++b) {
      const auto row = x.begin() + (l.position(t) * B + b) * W;
      out.insert(out.end(), row, row + W);
    }
  return out;
}

class CpLayerTest : public ::testing::TestWithParam<cp::CpCommType> {};

TEST_P(CpLayerTest, ForwardAndBackwardMatchOneRank) {
  auto world = mpi_world();
  auto self = make_self_communicator();
  const int N = world->size();
  const cp::CpAttention cpa{world.get(), GetParam()};
  const int64_t S = 8 * N, S_local = S / N;
  const CpLayout l = cp::cp_layout(cpa, S_local);
  LayerSpec spec;
  spec.norm = NormKind::RMSNorm;
  spec.heads = NH;
  spec.query_groups = NG;
  spec.kv_channels = HD;
  spec.rope = true;
  spec.qkv_bias = false;
  spec.mlp = MlpKind::SwiGLU;
  spec.ffn = F;
  spec.linear_bias = false;
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.f, 1.f);
  Params w(spec), g_ref(spec), g_cp(spec);
  for (auto* p : w.all())
    for (float& x : *p) x = 0.2f * nd(rng);
  for (float* norm : {w.ln1.data(), w.ln2.data()})
    for (int64_t i = 0; i < H; ++i) norm[i] += 1.f;
  std::vector<float> x(size_t(S * B * H)), dy(x.size());
  for (float& v : x) v = nd(rng);
  for (float& v : dy) v = nd(rng);
  std::vector<float> inv_freq(HD / 2);
  for (int64_t j = 0; j < HD / 2; ++j) inv_freq[j] = std::pow(10000.f, -2.f * j / HD);
  std::vector<int32_t> pos(size_t(S * B)), seg(size_t(B * S));
  for (int64_t p = 0; p < S; ++p)
    for (int64_t b = 0; b < B; ++b) {
      pos[size_t(p * B + b)] = int32_t(p);
      seg[size_t(b * S + p)] = p < S / 2 + b ? 0 : int32_t(S / 2 + b);
    }
  DropoutStep drop;
  drop.attention = 0.25f;
  drop.seed = 5;
  drop.iteration = 3;
  drop.sample0 = 4;

  // The reference: the whole sequence on this rank.
  const tp::TPGroup tp{self.get(), false};
  LayerDims d{B, S, H, spec};
  d.rotary_dim = HD;
  LayerInputs in{seg.data(), pos.data(), inv_freq.data(), &drop, 1};
  std::vector<float> y_ref(x.size()), dx_ref = dy;
  {
    LayerCache c(d);
    LayerScratch s(d);
    transformer_layer_forward(tp, y_ref.data(), x.data(), w.weights(), c, s, d, in);
    transformer_layer_backward(tp, dx_ref.data(), x.data(), w.weights(), g_ref.weights(), c, s, d,
                               in);
  }
  // This rank's rows under CP.
  LayerDims dl = d;
  dl.S = S_local;
  const std::vector<float> x_l = local_rows(x, l, H);
  std::vector<float> dx_l = local_rows(dy, l, H), y_l(x_l.size());
  std::vector<int32_t> pos_l(size_t(S_local * B)), seg_l(size_t(B * S_local));
  for (int64_t t = 0; t < S_local; ++t)
    for (int64_t b = 0; b < B; ++b) {
      pos_l[size_t(t * B + b)] = int32_t(l.position(t));
      seg_l[size_t(b * S_local + t)] = seg[size_t(b * S + l.position(t))];
    }
  LayerInputs in_l{seg_l.data(), pos_l.data(), inv_freq.data(), &drop, 1, &cpa};
  {
    LayerCache c(dl);
    LayerScratch s(dl);
    transformer_layer_forward(tp, y_l.data(), x_l.data(), w.weights(), c, s, dl, in_l);
    transformer_layer_backward(tp, dx_l.data(), x_l.data(), w.weights(), g_cp.weights(), c, s, dl,
                               in_l);
  }
  const std::vector<float> y_exp = local_rows(y_ref, l, H), dx_exp = local_rows(dx_ref, l, H);
  EXPECT_LE(rel_error(y_l.data(), y_exp.data(), int64_t(y_l.size())), 1e-5);
  EXPECT_LE(rel_error(dx_l.data(), dx_exp.data(), int64_t(dx_l.size())), 1e-5);
  const auto cp_grads = g_cp.all(), ref_grads = g_ref.all();
  for (size_t i = 0; i < cp_grads.size(); ++i) {
    world->all_reduce(cp_grads[i]->data(), int64_t(cp_grads[i]->size()));
    EXPECT_LE(rel_error(cp_grads[i]->data(), ref_grads[i]->data(), int64_t(cp_grads[i]->size())),
              1e-5)
        << "parameter " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(CommType, CpLayerTest,
                         ::testing::Values(cp::CpCommType::P2P, cp::CpCommType::A2A),
                         [](const auto& info) { return cp::cp_comm_type_name(info.param); });

}  // namespace
}  // namespace mg
