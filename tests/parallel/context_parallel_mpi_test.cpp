// The model's context-parallel bookkeeping on two MPI ranks (run under mpirun -np 2, label
// `parallel`), each CP rank against the 1-rank model on the same tokens, for the stages whose
// math does not involve attention (CP attention is tested with its own kernels):
//  * the head alone (a last stage holding no layer: final norm -> output layer -> cross
//    entropy): every CP rank reports the whole-sequence loss and token count, its input
//    gradient is the 1-rank gradient's rows of its tokens, and its parameter gradients SUM over
//    CP to the 1-rank gradients (mean and --calculate-per-token-loss modes);
//  * the embedding alone (a first stage holding no layer), with dropout: each CP rank's rows
//    are the 1-rank rows of its tokens, dropout masks included (keyed by global position).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "comm/mpi_communicator.h"
#include "data/batch.h"
#include "model/gpt.h"
#include "parallel/process_groups.h"
#include "testing/mpi_main.h"

namespace mg {
namespace {

constexpr int64_t B = 2, S = 8;

GPTConfig tiny() {
  GPTConfig c;
  c.num_layers = 1;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.seq_length = S;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 4;
  return c;
}

// Tokens, labels and a loss mask whose count differs between the CP ranks' halves.
Batch full_batch() {
  Batch b;
  b.B = B;
  b.S = S;
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < S; ++t) {
      b.tokens.push_back(int32_t((3 * t + 5 * r) % 11));
      b.labels.push_back(int32_t((7 * t + r + 1) % 11));
      b.position_ids.push_back(int32_t(t));
      // Sample 0 masks positions 2, 3, 4 (all on CP rank 1), sample 1 position 7 (rank 0).
      b.loss_mask.push_back((r == 0 && t >= 2 && t <= 4) || (r == 1 && t == 7) ? 0.f : 1.f);
    }
  return b;
}

MicroBatch micro_batch(const Batch& b, int64_t first_sample = -1) {
  return {b.tokens.data(), b.position_ids.data(), b.labels.data(), b.loss_mask.data(),
          nullptr,         first_sample};
}

// A stage with no transformer layer: the head (last) or the embedding (first).
StageSpec stage(bool head, int64_t cp_size, int64_t cp_rank) {
  StageSpec s;
  s.shard = {1, 0, head ? 1 : 0, head ? 1 : 0, !head, head};
  s.cp_size = cp_size;
  s.cp_rank = cp_rank;
  return s;
}

std::vector<float> copy_of(const float* p, int64_t n) { return {p, p + n}; }

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5f * scale + 1e-7f) << what << " [" << i << "]";
}

class ContextParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (mpi_world()->size() != 2) GTEST_SKIP() << "needs 2 ranks";
    g_ = make_mpi_process_groups(RankGrid{1, 1, 1, 2});
    cp_ = {2, g_.coord.cp, S};
  }
  ProcessGroups g_;
  CpLayout cp_;
};

TEST_F(ContextParallel, GroupsOfTheGrid) {
  EXPECT_EQ(g_.cp->size(), 2);
  EXPECT_EQ(g_.cp->rank(), g_.world_rank);
  EXPECT_EQ(g_.dp_cp->size(), 2);
  EXPECT_EQ(g_.dp->size(), 1);  // CP ranks are not the loader's replicas
  double r = double(g_.world_rank + 1);
  EXPECT_EQ(all_reduce_sum(*g_.cp, r), 3.0);
}

TEST_F(ContextParallel, HeadLossAndGradientsSumToTheOneRankRun) {
  const GPTConfig c = tiny();
  const Batch full = full_batch();
  const Batch mine = slice_for_context_parallel(full, cp_);
  for (bool per_token : {false, true}) {
    GPTModel ref(c, B, stage(true, 1, 0)), m(c, B, stage(true, 2, cp_.rank), nullptr, g_.cp.get());
    ref.init(5);
    m.init(5);
    ref.set_per_token_loss(per_token);
    m.set_per_token_loss(per_token);
    ref.zero_grads();
    m.zero_grads();
    // The residual stream entering the head: row t*B + b, global rows for ref, the CP rank's
    // tokens' rows for m.
    const int64_t H = c.hidden_size, R = S / 2 * B;
    ASSERT_EQ(m.activation_numel(), R * H);
    float* x_ref = ref.input_activation(0);
    for (int64_t i = 0; i < S * B * H; ++i) x_ref[i] = float(std::sin(0.37 * double(i) + 1.0));
    float* x = m.input_activation(0);
    for (int64_t t = 0; t < S / 2; ++t)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          x[(t * B + b) * H + h] = x_ref[(cp_.position(t) * B + b) * H + h];

    const double loss_ref = ref.forward(0, micro_batch(full));
    const double loss = m.forward(0, micro_batch(mine));
    EXPECT_NEAR(loss, loss_ref, 1e-6 * std::fabs(loss_ref)) << "per-token " << per_token;
    EXPECT_EQ(m.take_tokens(), 12.0);  // 16 tokens, 4 masked: the whole sequences' count
    EXPECT_EQ(ref.take_tokens(), 12.0);

    ref.backward(0, nullptr, 1.f);
    m.backward(0, nullptr, 1.f);
    // Each token's input gradient lives on its CP rank only: the 1-rank rows.
    std::vector<float> d_ref(size_t(R * H));
    for (int64_t t = 0; t < S / 2; ++t)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          d_ref[size_t((t * B + b) * H + h)] = ref.input_grad()[(cp_.position(t) * B + b) * H + h];
    expect_close(copy_of(m.input_grad(), R * H), d_ref, "input grad");
    // Parameter gradients: the SUM over CP ranks is the 1-rank gradient.
    std::vector<float> grads = copy_of(m.grads(), m.num_params());
    g_.cp->all_reduce(grads.data(), int64_t(grads.size()));
    expect_close(grads, copy_of(ref.grads(), ref.num_params()), "param grads");
  }
}

TEST_F(ContextParallel, EmbeddingRowsAndDropoutFollowTheGlobalPositions) {
  GPTConfig c = tiny();
  c.hidden_dropout = 0.5f;
  const Batch full = full_batch();
  const Batch mine = slice_for_context_parallel(full, cp_);
  GPTModel ref(c, B, stage(false, 1, 0)), m(c, B, stage(false, 2, cp_.rank), nullptr, g_.cp.get());
  ref.init(9);
  m.init(9);
  ref.dropout_on(11, 3);
  m.dropout_on(11, 3);
  ref.forward_step(0, micro_batch(full, 40));
  m.forward_step(0, micro_batch(mine, 40));
  const int64_t H = c.hidden_size;
  const float* y_ref = ref.output_activation(0);
  const float* y = m.output_activation(0);
  int64_t dropped = 0;
  for (int64_t t = 0; t < S / 2; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const float want = y_ref[(cp_.position(t) * B + b) * H + h];
        EXPECT_EQ(y[(t * B + b) * H + h], want) << t << " " << b << " " << h;
        dropped += want == 0.f;
      }
  EXPECT_GT(dropped, 0);  // the masks were on
}

}  // namespace
}  // namespace mg

int main(int argc, char** argv) {
  mg::MpiSession mpi(&argc, &argv);
  return mg::testing::run_tests_on_every_rank(&argc, argv, mpi.world_rank());
}
