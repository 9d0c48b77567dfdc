// Mixture-of-experts layers in the model: finite-difference gradients of the whole model (LM
// loss + load-balancing loss + z-loss) for GELU and SwiGLU experts, biases, shared experts,
// softmax / pre-softmax / sigmoid routers and top-1/2/4; capacity dropping counted exactly; the
// parameter count against a closed form; --moe-layer-freq parsed as Megatron's scripts write it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/gpt.h"
#include "testing/fd_check.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

GPTConfig tiny_moe() {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.seq_length = 6;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;
  c.num_experts = 4;
  c.moe_ffn_hidden_size = 6;
  c.moe_router_topk = 2;
  c.moe_aux_loss_coeff = 0.1f;
  c.moe_z_loss_coeff = 0.01f;
  return c;
}

struct Variant {
  const char* name;
  void (*apply)(GPTConfig&);
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

// The objective backward differentiates: the LM loss plus each MoE layer's coefficient-scaled
// aux and z losses (take_moe_losses gives them without their coefficients).
double objective(GPTModel& m, const MicroBatch& mb) {
  const double lm = m.forward(0, mb);
  const MoeLosses moe = m.take_moe_losses();
  return lm + m.config().moe_aux_loss_coeff * moe.load_balancing +
         m.config().moe_z_loss_coeff * moe.z;
}

class MoeGradient : public ::testing::TestWithParam<Variant> {};

TEST_P(MoeGradient, WholeModelMatchesFiniteDifferences) {
  GPTConfig c = tiny_moe();
  GetParam().apply(c);
  c.validate();
  c.init_method_std = 0.3f;  // large weights: every path well above FD noise, clear top-k gaps
  const int64_t B = 2, S = c.seq_length, N = B * S;
  GPTModel m(c, B);
  m.init(7);
  auto noise = testing::random_vec(m.num_params(), 99, -0.2f, 0.2f);
  for (const ParamSpec& p : m.layout().params())
    if (p.init != InitKind::Normal)
      for (int64_t i = 0; i < p.numel(); ++i) m.params()[p.offset + i] += noise[p.offset + i];
  std::vector<int32_t> tok(N), pos(N), lab(N);
  std::vector<float> mask(N, 1.f);
  for (int64_t i = 0; i < N; ++i) {
    tok[i] = int32_t((i * 5 + 1) % c.vocab_size);
    lab[i] = int32_t((i * 3 + 2) % c.vocab_size);
    pos[i] = int32_t(i % S);
  }
  const MicroBatch mb{tok.data(), pos.data(), lab.data(), mask.data()};
  m.zero_grads();
  m.forward(0, mb);
  const MoeLosses once = m.take_moe_losses();
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) moe_layers += c.is_moe_layer(l) ? 1 : 0;
  EXPECT_EQ(once.layer_microbatches, double(moe_layers));
  m.backward(0, nullptr, 1.0f);
  std::vector<float> params(m.params(), m.params() + m.num_params());
  std::vector<float> grads(m.grads(), m.grads() + m.num_params());
  int checked = 0, idle = 0;
  for (const ParamSpec& p : m.layout().params()) {
    if (p.name.find(".mlp.") == std::string::npos) continue;  // the dense parts: gpt_test.cpp
    std::vector<float> x(params.begin() + p.offset, params.begin() + p.offset + p.numel());
    std::vector<float> g(grads.begin() + p.offset, grads.begin() + p.offset + p.numel());
    // An expert no token chose has no gradient (and fd_check refuses a zero gradient): its
    // loss must not move with it either.
    if (std::all_of(g.begin(), g.end(), [](float v) { return v == 0.f; })) {
      ++idle;
      const double before = objective(m, mb);
      for (int64_t i = 0; i < p.numel(); ++i) m.params()[p.offset + i] += 0.1f;
      EXPECT_EQ(objective(m, mb), before) << p.name << " has no gradient but moves the loss";
      std::copy(x.begin(), x.end(), m.params() + p.offset);
      continue;
    }
    ++checked;
    auto loss = [&] {
      std::copy(x.begin(), x.end(), m.params() + p.offset);
      return objective(m, mb);
    };
    testing::fd_check(p.name, x, g, loss, 2e-3f, 3e-2, 16);
    std::copy(x.begin(), x.end(), m.params() + p.offset);
  }
  EXPECT_GT(checked, 4 * idle) << "most experts should take tokens";
  EXPECT_GE(checked, 1 + 2 * c.moe_router_topk);
}

INSTANTIATE_TEST_SUITE_P(Routers, MoeGradient,
                         ::testing::Values(Variant{"gelu_softmax_top2_bias", [](GPTConfig&) {}},
                                           Variant{"swiglu_pre_softmax_top1",
                                                   [](GPTConfig& c) {
                                                     c.swiglu = true;
                                                     c.add_bias_linear = false;
                                                     c.moe_router_topk = 1;
                                                     c.moe_router_pre_softmax = true;
                                                   }},
                                           Variant{"swiglu_sigmoid_top2_scaled_shared",
                                                   [](GPTConfig& c) {
                                                     c.swiglu = true;
                                                     c.moe_router_score_function = "sigmoid";
                                                     c.moe_router_topk_scaling_factor = 2.5f;
                                                     c.moe_shared_expert_intermediate_size = 10;
                                                   }},
                                           Variant{"gelu_softmax_top4_every_other_layer",
                                                   [](GPTConfig& c) {
                                                     c.moe_router_topk = 4;
                                                     c.moe_layer_freq = "[0,1]";
                                                   }}),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.name);
                         });

// With capacity factor 0.5 each of E experts takes at most cap = ceil(T k / E x 0.5) of the
// T k assignments (the exact choice: moe_router_test.cpp): the model drops between
// T k - E cap and T k - cap of them, and none without a capacity.
TEST(MoeCapacity, DropsTheAssignmentsAboveCapacity) {
  GPTConfig c = tiny_moe();
  c.moe_expert_capacity_factor = 0.5f;
  c.num_layers = 1;
  const int64_t B = 2, S = c.seq_length, N = B * S, k = c.moe_router_topk, E = c.num_experts;
  GPTModel m(c, B);
  m.init(11);
  std::vector<int32_t> tok(N), pos(N), lab(N, 1);
  std::vector<float> mask(N, 1.f);
  for (int64_t i = 0; i < N; ++i) tok[i] = int32_t(i % 5), pos[i] = int32_t(i % S);
  const MicroBatch mb{tok.data(), pos.data(), lab.data(), mask.data()};
  m.forward(0, mb);
  const double dropped = m.take_moe_losses().dropped;
  const int64_t cap = int64_t(std::ceil(double(N * k) / double(E) * 0.5));
  EXPECT_GE(dropped, double(N * k - E * cap));
  EXPECT_LE(dropped, double(N * k - cap));
  GPTConfig free = c;
  free.moe_expert_capacity_factor = 0;
  GPTModel f(free, B);
  std::copy(m.params(), m.params() + m.num_params(), f.params());
  f.forward(0, mb);
  EXPECT_EQ(f.take_moe_losses().dropped, 0.0);
}

// Parameters: per MoE layer a router [E, H] and E experts (fc1 [F1, H], fc2 [H, F], biases),
// plus shared experts; dense layers as GPT-2's.
TEST(MoeParams, CountEqualsClosedForm) {
  GPTConfig c = tiny_moe();
  c.num_layers = 4;
  c.moe_layer_freq = "2";  // layers 0 and 2
  c.moe_shared_expert_intermediate_size = 10;
  c.swiglu = true;
  const int64_t H = c.hidden_size, E = c.num_experts, Fe = c.moe_ffn(), Fs = 10, F = c.ffn();
  const int64_t attn = 2 * H /*ln1*/ + 3 * H * H + 3 * H /*qkv*/ + H * H + H /*proj*/ + 2 * H;
  const int64_t expert = 2 * Fe * H + 2 * Fe + H * Fe + H;
  const int64_t moe_layer = attn + E * H + E * expert + (2 * Fs * H + 2 * Fs + H * Fs + H);
  const int64_t dense_layer = attn + 2 * F * H + 2 * F + H * F + H;
  const int64_t V = c.padded_vocab_size();
  const int64_t want = V * H + c.seq_length * H + 2 * moe_layer + 2 * dense_layer + 2 * H;
  EXPECT_EQ(c.num_parameters(), want);
  // FLOPs: a token skips E - k experts in each of the 2 MoE layers (tied output: no lookup).
  const int64_t k = c.moe_router_topk, L = 4, NH = 2, HD = 4, S = c.seq_length;
  EXPECT_EQ(c.train_flops_per_token(),
            6.0 * double(want - 2 * (E - k) * expert) + 12.0 * double(L * NH * HD * S));
  EXPECT_EQ(gpt_param_layout(c).total_numel(), want);
  EXPECT_TRUE(
      gpt_param_layout(c).has("decoder.layers.2.mlp.experts.local_experts.3.linear_fc2.weight"));
  EXPECT_TRUE(gpt_param_layout(c).has("decoder.layers.0.mlp.shared_experts.linear_fc1.weight"));
  EXPECT_TRUE(gpt_param_layout(c).has("decoder.layers.1.mlp.linear_fc1.weight"));
}

TEST(MoeConfig, LayerFreqReadsMegatronsExpressions) {
  GPTConfig c = tiny_moe();
  c.num_layers = 8;
  auto layers = [&](const std::string& f) {
    c.moe_layer_freq = f;
    c.validate();
    std::string s;
    for (int64_t l = 0; l < c.num_layers; ++l) s += c.is_moe_layer(l) ? '1' : '0';
    return s;
  };
  EXPECT_EQ(layers("1"), "11111111");
  EXPECT_EQ(layers("3"), "10010010");
  EXPECT_EQ(layers("([1]*3+[0]*1)*2"), "11101110");
  EXPECT_EQ(layers("[0]+[1]*7"), "01111111");
  EXPECT_EQ(layers("[1, 0, 1, 0, 1, 0, 1, 0]"), "10101010");
  for (const char* bad : {"[1,0]", "[1,2]*4", "([1]*4", "1.5", "[1]*8+", "0"}) {
    c.moe_layer_freq = bad;
    EXPECT_NE(testing::usage_error_of([&] { c.validate(); }).find("--moe-layer-freq"),
              std::string::npos)
        << bad;
  }
}

TEST(MoeConfig, RefusesUnknownRouterSettingsNamingTheFlag) {
  struct Bad {
    void (*apply)(GPTConfig&);
    const char* flag;
  };
  for (const Bad& b :
       {Bad{[](GPTConfig& c) { c.moe_router_score_function = "relu"; },
            "--moe-router-score-function"},
        Bad{[](GPTConfig& c) { c.moe_router_topk = 5; }, "--moe-router-topk"},
        Bad{[](GPTConfig& c) { c.moe_router_load_balancing_type = "global_aux_loss"; },
            "--moe-router-load-balancing-type"},
        Bad{[](GPTConfig& c) { c.moe_router_dtype = "fp64"; }, "--moe-router-dtype"},
        Bad{[](GPTConfig& c) { c.num_experts = -2; }, "--num-experts"},
        Bad{[](GPTConfig& c) { c.moe_router_topk = 1; }, "--moe-router-pre-softmax"}}) {
    GPTConfig c = tiny_moe();
    b.apply(c);
    EXPECT_NE(testing::usage_error_of([&] { c.validate(); }).find(b.flag), std::string::npos)
        << b.flag;
  }
}

}  // namespace
}  // namespace mg
