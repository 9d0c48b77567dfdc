// GPT-2 model: exact parameter count against the published formula, Megatron-Core names,
// init statistics, and finite-difference checks of the whole model's gradient on a tiny config.
#include "model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/fd_check.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

GPTConfig tiny() {
  GPTConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.seq_length = 6;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;
  return c;
}

// The traits each block declares with its parameters agree with the rules Megatron applies by
// name and shape (its get_param_groups: no weight decay for biases and 1-D params; its
// is_embedding_or_output_parameter; the layer index in decoder.layers.<i>.; norms by name), on
// GPT-2, Llama (RMSNorm, SwiGLU, QK norms, untied) and MoE (shared experts, biases) shapes.
TEST(GPTParams, DeclaredTraitsAgreeWithMegatronsNameRules) {
  GPTConfig llama = tiny();
  llama.normalization = "RMSNorm";
  llama.swiglu = true;
  llama.qk_layernorm = true;
  llama.add_bias_linear = false;
  llama.untie_embeddings_and_output_weights = true;
  GPTConfig moe = tiny();
  moe.num_experts = 4;
  moe.moe_shared_expert_intermediate_size = 16;
  // Whole models, and shards: a PP 2 last stage (layer 1, the tied output-layer copy, the final
  // norm) and EP rank 1 of 2 (experts 2 and 3).
  ShardSpec last_stage;
  last_stage.layer_begin = 1;
  last_stage.first_stage = false;
  ShardSpec ep1;
  ep1.ep_size = 2;
  ep1.ep_rank = 1;
  int checked = 0, tied_copies = 0, experts = 0;
  for (const auto& [c, shard] : std::vector<std::pair<GPTConfig, ShardSpec>>{
           {tiny(), {}}, {llama, {}}, {moe, {}}, {tiny(), last_stage}, {moe, ep1}}) {
    const ParamLayout layout = gpt_param_layout(c, shard);
    for (const ParamSpec& p : layout.params()) {
      tied_copies += p.sharding.tied_copy;
      experts += p.sharding.expert >= 2;
      const std::string& n = p.name;
      const bool bias = n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
      EXPECT_EQ(p.traits.weight_decay, p.global_shape.size() > 1 && !bias) << n;
      EXPECT_EQ(p.traits.embedding_or_output,
                n == "embedding.word_embeddings.weight" || n == "output_layer.weight")
          << n;
      const bool norm = n.find("layernorm.weight") != std::string::npos &&
                        n.find("layernorm.weight") + 16 == n.size();
      EXPECT_EQ(p.traits.norm_weight, norm) << n;
      if (n.rfind("decoder.layers.", 0) == 0) {
        EXPECT_EQ(p.traits.part, ModelPart::Layer) << n;
        EXPECT_EQ(p.traits.layer, std::stoll(n.substr(15))) << n;
      } else {
        EXPECT_EQ(p.traits.part,
                  n.rfind("embedding.", 0) == 0 ? ModelPart::Embedding : ModelPart::Head)
            << n;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
  EXPECT_EQ(tied_copies, 1);
  EXPECT_GT(experts, 0);
}

TEST(GPTParams, CountEqualsFormula) {
  // docs/reference/formulas.md: P = 12 l h^2 + 13 l h + V h + s h, plus the final LayerNorm's 2h.
  GPTConfig c;  // GPT-2 124M shape
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.seq_length = 1024;
  c.vocab_size = 50257;
  const int64_t l = 12, h = 768, V = c.padded_vocab_size(), s = 1024;
  EXPECT_EQ(V, 50304);
  EXPECT_EQ(gpt_param_layout(c).total_numel(), 12 * l * h * h + 13 * l * h + V * h + s * h + 2 * h);
  EXPECT_EQ(c.num_parameters(), gpt_param_layout(c).total_numel());
  EXPECT_EQ(c.num_parameters(), 124475904);
}

TEST(GPTParams, MegatronNamesAndDecayRule) {
  ParamLayout l = gpt_param_layout(tiny());
  EXPECT_EQ(l.params().front().name, "embedding.word_embeddings.weight");
  const ParamSpec& qkv = l.get("decoder.layers.1.self_attention.linear_qkv.weight");
  EXPECT_EQ(qkv.shape, (Shape{24, 8}));
  EXPECT_TRUE(qkv.traits.weight_decay);
  EXPECT_FALSE(l.get("decoder.layers.0.mlp.linear_fc1.bias").traits.weight_decay);
  EXPECT_FALSE(l.get("decoder.final_layernorm.weight").traits.weight_decay);
  EXPECT_EQ(l.get("decoder.layers.0.mlp.linear_fc2.weight").shape, (Shape{8, 32}));
}

TEST(GPTParams, InitFollowsMegatron) {
  GPTConfig c = tiny();
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_layers = 8;
  GPTModel m(c, 1);
  m.init(1234);
  auto stdev = [&](const std::string& name) {
    const ParamSpec& p = m.layout().get(name);
    double s = 0;
    for (int64_t i = 0; i < p.numel(); ++i)
      s += double(m.params()[p.offset + i]) * m.params()[p.offset + i];
    return std::sqrt(s / double(p.numel()));
  };
  EXPECT_NEAR(stdev("decoder.layers.3.mlp.linear_fc1.weight"), 0.02, 0.001);
  EXPECT_NEAR(stdev("decoder.layers.3.mlp.linear_fc2.weight"), 0.02 / std::sqrt(16.0), 0.0003);
  EXPECT_EQ(m.params()[m.layout().get("decoder.layers.0.input_layernorm.weight").offset], 1.f);
  EXPECT_EQ(m.params()[m.layout().get("decoder.layers.0.self_attention.linear_qkv.bias").offset],
            0.f);
}

TEST(GPTModel, WholeModelGradientMatchesFiniteDifferences) {
  GPTConfig c = tiny();
  c.init_method_std = 0.3f;  // large weights so every gradient path is well above FD noise
  const int64_t B = 2, S = c.seq_length, N = B * S;
  GPTModel m(c, B);
  m.init(7);
  // Non-trivial LayerNorm and bias values so their gradients are exercised too.
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
  mask[3] = 0.f;
  const MicroBatch mb{tok.data(), pos.data(), lab.data(), mask.data()};
  m.zero_grads();
  m.forward(0, mb);
  m.backward(0, nullptr, 1.0f);
  std::vector<float> params(m.params(), m.params() + m.num_params());
  std::vector<float> grads(m.grads(), m.grads() + m.num_params());
  for (const ParamSpec& p : m.layout().params()) {
    std::vector<float> x(params.begin() + p.offset, params.begin() + p.offset + p.numel());
    std::vector<float> g(grads.begin() + p.offset, grads.begin() + p.offset + p.numel());
    auto loss = [&] {
      std::copy(x.begin(), x.end(), m.params() + p.offset);
      return m.forward(0, mb);
    };
    testing::fd_check(p.name, x, g, loss, 1e-2f, 2e-2, 24);
    std::copy(x.begin(), x.end(), m.params() + p.offset);
  }
}

TEST(GPTModel, GradientsAccumulateAcrossMicroBatches) {
  GPTConfig c = tiny();
  const int64_t B = 1, N = c.seq_length;
  GPTModel m(c, B);
  m.init(3);
  std::vector<int32_t> tok(N, 2), pos(N), lab(N, 5);
  std::vector<float> mask(N, 1.f);
  for (int64_t i = 0; i < N; ++i) pos[i] = int32_t(i);
  const MicroBatch mb{tok.data(), pos.data(), lab.data(), mask.data()};
  m.zero_grads();
  m.forward(0, mb);
  m.backward(0, nullptr, 1.f);
  std::vector<float> once(m.grads(), m.grads() + m.num_params());
  m.forward(0, mb);
  m.backward(0, nullptr, 1.f);
  for (int64_t i = 0; i < m.num_params(); i += 7)
    EXPECT_NEAR(m.grads()[i], 2 * once[i], 1e-6 + 1e-5 * std::fabs(once[i]));
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

TEST(GPTParams, DistributedOptimizerBucketLayout) {
  GPTConfig c = tiny();  // V = 12 padded, H = 8
  ParamLayout l = gpt_param_layout(c);
  const int64_t dp = 3;
  l.assign_buckets(/*bucket_size=*/600, dp);
  const int64_t pad = 384;  // lcm(3, 128)
  // Reverse registration order: the final LayerNorm bias comes first, at 0.
  EXPECT_EQ(l.get("decoder.final_layernorm.bias").offset, 0);
  EXPECT_EQ(l.get("decoder.final_layernorm.weight").offset, 64);  // starts aligned to 64
  int64_t prev_end = 0;
  for (const auto& [b, e] : l.buckets()) {
    EXPECT_EQ(b, prev_end);
    EXPECT_EQ(b % pad, 0);
    EXPECT_EQ(e % pad, 0);
    prev_end = e;
  }
  EXPECT_EQ(prev_end, l.total_numel());
  for (const ParamSpec& p : l.params()) EXPECT_EQ(p.offset % 64, 0) << p.name;
  // The word embedding (tied to the output layer) sits in a bucket of its own.
  const ParamSpec& wte = l.get("embedding.word_embeddings.weight");
  int owners = 0;
  for (const auto& [b, e] : l.buckets())
    if (wte.offset >= b && wte.offset < e) {
      ++owners;
      for (const ParamSpec& p : l.params())
        if (p.name != wte.name) {
          EXPECT_FALSE(p.offset >= b && p.offset < e) << p.name;
        }
    }
  EXPECT_EQ(owners, 1);
}

}  // namespace
}  // namespace mg

namespace mg {
namespace {

// A 16-bit model against the f32 model holding the same (rounded) parameters: the only
// differences are the rounded activations, so the loss agrees to ~1e-5 relative and every
// parameter's gradient to a few 16-bit ulps (measured: bf16 <= 4e-3, f16 <= 8e-4 relative L2).
// A model that mixed up a layout, dropped a bias or misread a 16-bit buffer would be off by O(1).
TEST(GPTModel, SixteenBitModelTracksTheF32ModelOnTheSameParams) {
  GPTConfig c = tiny();
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 64;
  const int64_t B = 2, N = B * c.seq_length;
  std::vector<int32_t> tok(N), pos(N), lab(N);
  std::vector<float> mask(N, 1.f);
  for (int64_t i = 0; i < N; ++i) {
    tok[i] = int32_t((i * 5 + 1) % c.vocab_size);
    lab[i] = int32_t((i * 3 + 2) % c.vocab_size);
    pos[i] = int32_t(i % c.seq_length);
  }
  const MicroBatch mb{tok.data(), pos.data(), lab.data(), mask.data()};
  for (DType t : {DType::BF16, DType::F16}) {
    StageSpec spec;
    spec.dtype = t;
    GPTModel lp(c, B, spec), ref(c, B);
    lp.init(5);
    for (const ParamSpec& p : lp.layout().params())  // the f32 model gets the rounded values
      lp.read_param(p, ref.params() + p.offset);
    lp.zero_grads();
    ref.zero_grads();
    const double l16 = lp.forward(0, mb), l32 = ref.forward(0, mb);
    EXPECT_NEAR(l16, l32, 1e-4 * l32) << dtype_name(t);
    lp.backward(0, nullptr, 1.f);
    ref.backward(0, nullptr, 1.f);
    for (const ParamSpec& p : lp.layout().params()) {
      std::vector<double> a(lp.grads() + p.offset, lp.grads() + p.offset + p.numel());
      std::vector<double> b(ref.grads() + p.offset, ref.grads() + p.offset + p.numel());
      EXPECT_LT(testing::rel_l2(a, b), t == DType::BF16 ? 1e-2 : 2e-3)
          << dtype_name(t) << " " << p.name;
    }
  }
}

// The memory check before allocation (train/rank_memory.h) counts activations with
// GPTModel::activation_bytes; here that count is compared with what models of many shapes
// really allocate: precisions, norms, RoPE, QK-norm, SwiGLU, pipeline stages and slots, and
// both recompute methods.
TEST(GPTMemory, ActivationBytesAreWhatTheModelAllocates) {
  GPTConfig llama = tiny();
  llama.normalization = "RMSNorm";
  llama.position_embedding_type = "rope";
  llama.swiglu = true;
  llama.qk_layernorm = true;
  llama.add_bias_linear = false;
  llama.untie_embeddings_and_output_weights = true;
  llama.group_query_attention = true;
  llama.num_query_groups = 1;
  struct Case {
    GPTConfig cfg;
    int64_t B;
    StageSpec spec;
  };
  std::vector<Case> cases;
  for (const GPTConfig& c : {tiny(), llama}) {
    StageSpec plain;
    cases.push_back({c, 3, plain});
    StageSpec bf16 = plain;
    bf16.dtype = DType::BF16;
    cases.push_back({c, 2, bf16});
    StageSpec first = plain;  // pipeline stage 0 of 2 with 2 in-flight micro-batches
    first.shard = {1, 0, 0, 1, true, false};
    first.num_slots = 2;
    cases.push_back({c, 2, first});
    StageSpec last = plain;
    last.shard = {1, 0, 1, 2, false, true};
    cases.push_back({c, 1, last});
    StageSpec uniform = plain;
    uniform.recompute_method = "uniform";
    uniform.recompute_num_layers = 1;
    uniform.num_slots = 3;
    cases.push_back({c, 2, uniform});
    StageSpec block = uniform;
    block.recompute_method = "block";
    cases.push_back({c, 2, block});
  }
  for (const Case& k : cases) {
    SCOPED_TRACE(k.cfg.normalization + " slots " + std::to_string(k.spec.num_slots) + " " +
                 k.spec.recompute_method + " " + dtype_name(k.spec.dtype));
    const int64_t before = tensor_bytes_live();
    const int64_t estimate = GPTModel::activation_bytes(k.cfg, k.B, k.spec);
    EXPECT_EQ(tensor_bytes_live(), before) << "the estimate allocates nothing";
    const GPTModel m(k.cfg, k.B, k.spec);
    EXPECT_EQ(estimate, int64_t(m.allocated_activation_bytes()));
  }
}

TEST(GPTMemory, ActivationOverflowNamesTheFlags) {
  GPTConfig c = tiny();
  c.seq_length = int64_t(1) << 40;
  EXPECT_EQ(testing::usage_error_of(
                [&] { GPTModel::activation_bytes(c, int64_t(1) << 20, StageSpec{}); }),
            "elements of one layer's activations (--seq-length x --micro-batch-size x "
            "--hidden-size): 1152921504606846976 x 8 overflows a 64-bit integer; lower the "
            "sizes that drive it");
}

}  // namespace
}  // namespace mg
