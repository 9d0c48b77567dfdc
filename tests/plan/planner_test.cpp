// The step-time model against closed forms: the schedule simulation gives docs/reference/formulas.md's
// pipeline lengths, the GEMM and attention work it times is docs/reference/formulas.md's FLOP count, and
// device profiles are parsed with errors naming the field.
#include "plan/planner.h"

#include <gtest/gtest.h>

#include "pipeline/schedule.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

using Times = std::vector<std::vector<std::pair<double, double>>>;

TEST(PlanPipeline, OneFOneBTakesMicroBatchesPlusStagesMinusOneSlots) {
  // docs/reference/formulas.md: batch time (m + p - 1)(t_f + t_b) for uniform stages.
  for (int P : {1, 2, 4})
    for (int64_t M : {int64_t(P), int64_t(8)}) {
      const Times t(size_t(P), {{1.0, 2.0}});
      const PipelineRun r = simulate_pipeline({P, 1, M}, t, 0.0);
      EXPECT_DOUBLE_EQ(r.seconds, double(M + P - 1) * 3.0) << "P " << P << " M " << M;
      for (double busy : r.busy) EXPECT_DOUBLE_EQ(busy, double(M) * 3.0);
    }
}

TEST(PlanPipeline, InterleavingDividesTheBubbleByTheVirtualStages) {
  // docs/reference/formulas.md: interleaved with v chunks, bubble (1/v)(p-1)/m: each chunk 1/v of the stage.
  for (int v : {2, 4}) {
    const int P = 4;
    const int64_t M = 8;
    const Times t(size_t(P), std::vector<std::pair<double, double>>(size_t(v), {1.0 / v, 2.0 / v}));
    const PipelineRun r = simulate_pipeline({P, v, M}, t, 0.0);
    EXPECT_NEAR(r.seconds, double(M) * 3.0 + double(P - 1) * 3.0 / v, 1e-9) << "v " << v;
  }
}

TEST(PlanPipeline, TransfersDelayTheNextStage) {
  // Two stages, one micro-batch: forward, send, forward, backward, send, backward.
  const PipelineRun r = simulate_pipeline({2, 1, 1}, Times(2, {{1.0, 2.0}}), 0.5);
  EXPECT_DOUBLE_EQ(r.seconds, 1.0 + 0.5 + 1.0 + 2.0 + 0.5 + 2.0);
}

TEST(PlanPipeline, CappedTablesKeepTheInFlightCountsAndExtrapolateExactly) {
  // Memory estimates build tables of at most capped_microbatches micro-batches: every chunk's
  // activations in flight must be those of the full table.
  for (int P : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int64_t group : {int64_t(P), int64_t(P + 1)}) {
        if (v == 1 && group != P) continue;
        ScheduleShape capped{P, v, 0, v > 1 ? group : 0};
        const int64_t cap = capped_microbatches(capped);
        capped.microbatches = cap;
        for (int64_t M = cap; M <= cap + 3 * capped.group(); M += capped.group()) {
          const ScheduleShape full{P, v, M, capped.group_size};
          for (int r = 0; r < P; ++r)
            for (int c = 0; c < v; ++c)
              EXPECT_EQ(in_flight(schedule_table(capped, r), c),
                        in_flight(schedule_table(full, r), c))
                  << "P " << P << " v " << v << " group " << group << " M " << M;
          // Past the cap each group of micro-batches adds the same time (what the planner's
          // extrapolation relies on), with uneven stages (the first and last slower).
          Times t(size_t(P), std::vector<std::pair<double, double>>(size_t(v), {1.0, 2.0}));
          t[0][0] = {1.5, 2.5};
          t[size_t(P - 1)][size_t(v - 1)] = {2.0, 4.5};
          ScheduleShape next = full;
          next.microbatches += capped.group();
          const double step =
              simulate_pipeline(next, t, 0.25).seconds - simulate_pipeline(full, t, 0.25).seconds;
          ScheduleShape one_more = capped;
          one_more.microbatches += capped.group();
          EXPECT_NEAR(step,
                      simulate_pipeline(one_more, t, 0.25).seconds -
                          simulate_pipeline(capped, t, 0.25).seconds,
                      1e-9)
              << "P " << P << " v " << v << " M " << M;
        }
      }
}

DeviceProfile ideal_profile() {
  DeviceProfile p = load_device_profile("h100-sxm");
  p.gemm_max_efficiency = 1;
  p.gemm_half_dim = 0;
  p.attention_efficiency = 1;
  p.attention_causal_fraction = 1;
  return p;
}

// A GPT-2 shape of L layers, hidden 256, 8 heads, seq S, batch 8 in micro-batches of mbs.
TrainConfig gpt(int64_t L, int64_t S, int64_t vocab, int64_t mbs) {
  TrainConfig c;
  c.model.num_layers = L;
  c.model.hidden_size = 256;
  c.model.num_attention_heads = 8;
  c.model.seq_length = S;
  c.model.max_position_embeddings = S;
  c.model.vocab_size = vocab;
  c.micro_batch_size = mbs;
  c.global_batch_size = 8;
  c.train_iters = 1;
  c.mock_data = true;
  c.lr = 1e-3;
  return c;
}

TEST(PlanStep, GemmAndAttentionWorkIsFormulasFlopCount) {
  TrainConfig c = gpt(4, 128, 1000, 2);
  c.bf16 = true;
  c.finalize_and_validate(1);
  const DeviceProfile p = ideal_profile();
  const StepEstimate e = estimate_step(c, p);
  const double B = 8, s = 128, l = 4, h = 256, V = double(c.model.padded_vocab_size());
  // docs/reference/formulas.md: forward 24 B s h^2 per layer (GEMMs) + 2 B s h V (logits), backward twice.
  EXPECT_NEAR(e.parts.gemm * p.peak_bf16, 3 * (24 * B * s * h * h * l + 2 * B * s * h * V),
              1e-6 * e.parts.gemm * p.peak_bf16);
  // and 4 B s^2 h per layer in the attention core (the full s^2, as docs/reference/formulas.md counts it).
  EXPECT_NEAR(e.parts.attention * p.peak_bf16, 3 * 4 * B * s * s * h * l,
              1e-6 * e.parts.attention * p.peak_bf16);
  // Model TFLOP/s is train's own FLOPs per token over the predicted step.
  EXPECT_NEAR(e.model_tflops_per_gpu * 1e12 * e.iteration_seconds,
              c.model.train_flops_per_token() * B * s,
              1e-6 * c.model.train_flops_per_token() * B * s);
}

// Attention dropout draws its mask over every computed score (B NH s^2 x causal fraction per
// layer) forward and again backward, at the profile's seconds per element.
TEST(PlanStep, AttentionDropoutDrawsEachScoreForwardAndBackward) {
  TrainConfig c = gpt(4, 128, 1000, 2);
  c.finalize_and_validate(1);
  TrainConfig none = c;
  none.model.attention_dropout = 0.f;
  DeviceProfile p = ideal_profile();
  p.attention_causal_fraction = 0.5;
  p.attention_dropout_seconds = 3e-9;
  const StepEstimate e = estimate_step(c, p), e0 = estimate_step(none, p);
  const double B = 8, s = 128, l = 4, NH = 8, drawn = B * NH * s * s * 0.5 * l;
  EXPECT_NEAR(e.parts.attention - e0.parts.attention, 2 * drawn * 3e-9, 1e-9);
  EXPECT_NEAR(e.iteration_seconds - e0.iteration_seconds, 2 * drawn * 3e-9, 1e-9);
  // A kernel computing the causal keys per block of 64 query rows (the CPU's): 2 blocks of
  // 128 rows compute (1 + 2) / 4 of the square.
  p.attention_causal_block = 64;
  const StepEstimate blocked = estimate_step(c, p);
  none.model.attention_dropout = 0.f;
  EXPECT_NEAR(blocked.parts.attention - estimate_step(none, p).parts.attention,
              2 * drawn * 1.5 * 3e-9, 1e-9);
  EXPECT_NEAR(blocked.parts.attention / e.parts.attention, 1.5, 1e-9);
  p.attention_causal_block = 0;
  p.attention_dropout_seconds = 0;  // a GPU profile: inside the kernel's efficiency
  EXPECT_DOUBLE_EQ(estimate_step(c, p).iteration_seconds, e0.iteration_seconds);
}

TEST(PlanStep, TensorParallelismSplitsTheGemmWork) {
  TrainConfig c = gpt(2, 64, 1024, 1);
  TrainConfig tp2 = c;
  tp2.parallel.tensor_model_parallel_size = 2;
  c.finalize_and_validate(1);
  tp2.finalize_and_validate(2);
  const DeviceProfile p = ideal_profile();
  EXPECT_NEAR(estimate_step(tp2, p).parts.gemm, estimate_step(c, p).parts.gemm / 2, 1e-12);
}

TEST(PlanProfile, BuiltinsParseAndErrorsNameTheField) {
  for (const std::string& name : builtin_profile_names()) {
    if (name == "cpu") continue;
    EXPECT_GT(load_device_profile(name).peak_bf16, 0) << name;
  }
  const DeviceProfile h100 = load_device_profile("h100-sxm");
  EXPECT_DOUBLE_EQ(h100.peak_bf16, 989e12);  // docs/reference/formulas.md's quoted peak
  EXPECT_EQ(h100.memory_bytes, int64_t(80) << 30);
  // A profile round-trips through its JSON.
  const DeviceProfile again = parse_device_profile(device_profile_json(h100), "x");
  EXPECT_DOUBLE_EQ(again.inter_node.bandwidth, h100.inter_node.bandwidth);
  EXPECT_DOUBLE_EQ(again.gemm_half_dim, h100.gemm_half_dim);
  EXPECT_NE(testing::usage_error_of([] {
              parse_device_profile("{}", "f.json");
            }).find("f.json: missing field \"peak_tflops\""),
            std::string::npos);
  EXPECT_NE(testing::usage_error_of([] {
              load_device_profile("/nonexistent/p.json");
            }).find("neither a built-in profile"),
            std::string::npos);
}

}  // namespace
}  // namespace mg
