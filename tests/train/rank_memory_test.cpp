// The bytes a training rank will allocate, counted before anything is: params, grads and
// optimizer state against docs/reference/formulas.md's bytes per parameter (the parameter count from
// GPT-2's closed form), activations against GPTModel's own count, and the refusal of a run
// that cannot fit, which names the bytes and the flags and allocates nothing.
#include "train/rank_memory.h"

#include <gtest/gtest.h>

#include "testing/usage_error.h"

namespace mg {
namespace {

TrainConfig tiny_run() {
  TrainConfig c;
  c.model.num_layers = 4;
  c.model.hidden_size = 32;
  c.model.num_attention_heads = 4;
  c.model.seq_length = 16;
  c.model.vocab_size = 100;
  c.model.make_vocab_size_divisible_by = 8;
  c.micro_batch_size = 2;
  c.train_iters = 10;
  c.lr = 1e-3;
  c.mock_data = true;
  return c;
}

TrainConfig tiny_run_validated() {
  TrainConfig c = tiny_run();
  c.finalize_and_validate(1);
  return c;
}

// docs/reference/formulas.md: P = 12 l h^2 + 13 l h + V h + s h + 2h for a GPT-2 shape.
int64_t gpt2_params(const GPTConfig& m) {
  const int64_t l = m.num_layers, h = m.hidden_size, V = m.padded_vocab_size(),
                s = m.max_positions();
  return 12 * l * h * h + 13 * l * h + V * h + s * h + 2 * h;
}

TEST(RankMemory, SingleRankFp32AdamIsSixteenBytesPerParameterPlusActivations) {
  TrainConfig c = tiny_run();
  c.finalize_and_validate(1);
  const int64_t P = gpt2_params(c.model);
  const RankMemory m = rank_memory(c, 0);
  EXPECT_EQ(m.params, 4 * P);
  EXPECT_EQ(m.grads, 4 * P);
  EXPECT_EQ(m.optimizer, 8 * P);
  EXPECT_EQ(m.activations, GPTModel::activation_bytes(c.model, 2, train_chunk_specs(c, 0).front()));
  EXPECT_EQ(m.data, 12 * 10 * 2);  // 10 iterations x 2 samples, 12 index bytes each
  EXPECT_EQ(m.total(false), 16 * P + m.activations);
}

TEST(RankMemory, Bf16WithTheDistributedOptimizerShardsTheState) {
  TrainConfig c = tiny_run();
  c.bf16 = true;
  c.use_distributed_optimizer = true;
  c.global_batch_size = 8;
  c.finalize_and_validate(4);  // DP 4
  const int64_t P = gpt2_params(c.model);
  // 1-D params (per layer two LayerNorms, 4h; biases of QKV 3h, proj h, FC1 4h and FC2 h:
  // docs/reference/formulas.md's 13 l h; the final norm 2h) are also kept as f32 copies under mixed precision.
  const int64_t h = 32, vectors = 4 * 13 * h + 2 * h;
  const RankMemory m = rank_memory(c, 0);
  const int64_t shard = (P + 3) / 4;
  // The bucketed layout pads each parameter to 64 elements and the bucket to 128 x DP, and
  // the allocator rounds each tensor to 64 bytes: the exact figures (equal to what train
  // allocates: tests/plan/plan_memory_test.cpp) lie within 2% above docs/reference/formulas.md's.
  auto near = [](int64_t got, int64_t formula) {
    EXPECT_GE(got, formula);
    EXPECT_LE(double(got), 1.02 * double(formula));
  };
  near(m.params, 2 * P + 4 * vectors + 2 * shard);
  near(m.grads, 4 * P + 4 * shard);
  // fp32 main params + 2 moments of the parameters in the shard (not its padding), over 4 ranks
  EXPECT_LE(m.optimizer, (12 * P + 3) / 4 + 64);
  EXPECT_GE(double(m.optimizer), 0.98 * double((12 * P + 3) / 4));
}

TEST(RankMemory, PipelineStagesHoldTheirLayersAndInFlightMicroBatches) {
  TrainConfig c = tiny_run();
  c.parallel.pipeline_model_parallel_size = 2;
  c.global_batch_size = 8;  // 4 micro-batches
  c.finalize_and_validate(2);
  const StageSpec first = train_chunk_specs(c, 0).front(), last = train_chunk_specs(c, 1).front();
  EXPECT_EQ(first.num_slots, 2);  // 1F1B: PP - stage in flight
  EXPECT_EQ(last.num_slots, 1);
  EXPECT_EQ(first.shard.layer_begin, 0);
  EXPECT_EQ(first.shard.layer_end, 2);
  EXPECT_TRUE(last.shard.last_stage && !last.shard.first_stage);
  const int64_t l = 2, h = 32, V = c.model.padded_vocab_size();
  // Stage 0: word + position embeddings and 2 layers; stage 1: 2 layers, the final norm and
  // the tied copy of the word embedding.
  EXPECT_EQ(rank_memory(c, 0).params, 4 * (12 * l * h * h + 13 * l * h + V * h + 16 * h));
  EXPECT_EQ(rank_memory(c, 1).params, 4 * (12 * l * h * h + 13 * l * h + V * h + 2 * h));
  EXPECT_EQ(rank_memory(c, 1).data, 12 * 10 * 8);
}

std::string refusal(const TrainConfig& c, int64_t available) {
  return testing::usage_error_of([&] { check_rank_memory(c, 0, available, "host MemAvailable"); });
}

TEST(RankMemory, RefusesWhatCannotFitWithTheBytesAndTheFlags) {
  TrainConfig c = tiny_run();
  c.finalize_and_validate(1);
  const int64_t need = rank_memory(c, 0).total(true);
  EXPECT_EQ(refusal(c, need), "(no UsageError)");
  EXPECT_EQ(refusal(c, -1), "(no UsageError)");  // unknown: nothing to check against
  const std::string m = refusal(c, need - 1);
  EXPECT_EQ(m.substr(0, 6), "needs ") << m;
  for (const char* part :
       {" on rank 0 (params ", "driven by --num-layers 4, --hidden-size 32",
        "--seq-length 16, --micro-batch-size 2", "available (host MemAvailable)"})
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;

  // 8 TB (483 billion parameters: 1.76 TiB each of params and grads, twice that of Adam
  // state): refused, and nothing allocated on the way.
  TrainConfig big = tiny_run();
  big.model.num_layers = 96;
  big.model.hidden_size = 20480;
  big.model.num_attention_heads = 160;
  big.model.seq_length = 2048;
  big.finalize_and_validate(1);
  const int64_t live = tensor_bytes_live();
  const std::string b = refusal(big, int64_t(1) << 40);
  EXPECT_EQ(tensor_bytes_live(), live);
  EXPECT_NE(b.find(" TiB on rank 0 (params 1.76 TiB, grads 1.76 TiB, optimizer 3.52 TiB"),
            std::string::npos)
      << b;
  EXPECT_NE(b.find("only 1.00 TiB available"), std::string::npos) << b;
}

// Context parallelism: a CP rank's activations are those of the sequence S / CP on one rank
// (every per-token buffer follows the model's local sequence length).
TEST(RankMemory, ContextParallelActivationsAreThoseOfTheLocalSequence) {
  TrainConfig c = tiny_run();
  c.parallel.context_parallel_size = 2;
  c.finalize_and_validate(2);
  TrainConfig half = tiny_run();
  half.model.seq_length = 8;
  half.finalize_and_validate(1);
  for (int rank : {0, 1}) {
    const StageSpec spec = train_chunk_specs(c, rank).front();
    EXPECT_EQ(spec.cp_size, 2);
    EXPECT_EQ(spec.cp_rank, rank);
    EXPECT_EQ(rank_memory(c, rank).activations,
              GPTModel::activation_bytes(half.model, 2, train_chunk_specs(half, 0).front()));
  }
  EXPECT_LT(rank_memory(c, 0).activations, rank_memory(tiny_run_validated(), 0).activations);
}

TEST(RankMemory, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(int64_t(22) << 30), "22.0 GiB");
  EXPECT_EQ(format_bytes(int64_t(135) << 40), "135 TiB");
}

}  // namespace
}  // namespace mg
