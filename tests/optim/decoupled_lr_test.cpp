// --decoupled-lr / --decoupled-min-lr (Megatron's is_embedding_or_output_parameter param group):
// the word embeddings and output layer step with their own peak and floor on the shared warmup
// and decay; everything else with --lr.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace mg {
namespace {

TEST(DecoupledLR, SameShapeOwnPeakAndFloor) {
  LRSchedule s;
  s.lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup_steps = 100;
  s.decay_steps = 1100;
  s.style = "cosine";
  EXPECT_TRUE(std::isnan(s.decoupled_at(50)));  // unset
  s.decoupled_lr = 5e-3;
  EXPECT_DOUBLE_EQ(s.decoupled_at(50), 2.5e-3);  // warmup from lr_warmup_init = 0
  EXPECT_DOUBLE_EQ(s.decoupled_at(100), 5e-3);
  EXPECT_DOUBLE_EQ(s.decoupled_at(2000), 1e-4);  // no decoupled floor: --min-lr
  s.decoupled_min_lr = 4e-4;
  EXPECT_NEAR(s.decoupled_at(350), 4e-4 + 0.5 * (std::cos(M_PI * 0.25) + 1) * 4.6e-3, 1e-15);
  EXPECT_DOUBLE_EQ(s.decoupled_at(2000), 4e-4);
  EXPECT_DOUBLE_EQ(s.at(350), 1e-4 + 0.5 * (std::cos(M_PI * 0.25) + 1) * 9e-4);  // unchanged
}

TEST(DecoupledLR, RunsOfTheEmbeddingAndOutputLayerOnly) {
  GPTConfig c;
  c.num_layers = 1;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.seq_length = 4;
  c.vocab_size = 16;
  c.untie_embeddings_and_output_weights = true;
  GPTModel m(c, 1);
  int64_t decoupled = 0;
  for (const ParamRun& r : param_runs(m.layout())) {
    if (!r.decoupled) continue;
    decoupled += r.numel;
    for (const ParamSpec& p : m.layout().params()) {
      if (p.offset >= r.offset && p.offset < r.offset + r.numel) {
        EXPECT_TRUE(p.name == "embedding.word_embeddings.weight" || p.name == "output_layer.weight")
            << p.name;
      }
    }
  }
  EXPECT_EQ(decoupled, 2 * m.layout().get("output_layer.weight").numel());
}

// AdamW's first step moves each element by lr * g / (|g| + eps) ~ lr (no decay, no clipping).
TEST(DecoupledLR, OptimizerStepsDecoupledRunsWithTheirRate) {
  OptimizerConfig cfg;
  cfg.clip_grad = 0.f;
  std::vector<ParamRun> runs = {{0, 4, false, false}, {4, 4, true, true}};
  std::vector<float> p(8, 1.f), g(8, 0.5f);
  Optimizer opt(runs, cfg);
  opt.step(p.data(), g.data(), 1e-2f, 0.f, 1.0, 1e-1f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p[i], 1.f - 1e-2f, 1e-6f) << i;
  for (int i = 4; i < 8; ++i) EXPECT_NEAR(p[i], 1.f - 1e-1f, 1e-6f) << i;
  opt.step(p.data(), g.data(), 1e-2f, 0.f, 1.0);  // no decoupled rate: everything at lr
  EXPECT_NEAR(p[7], 1.f - 1e-1f - 1e-2f, 1e-6f);
}

}  // namespace
}  // namespace mg
