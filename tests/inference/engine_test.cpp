// The KV-cache inference engine against the training model's full forward (an independent
// path: no cache, the whole sequence at once): prefill then token-by-token decode give the same
// logits at every position (GPT-2 and Llama shapes, f32, and a MoE layer), sequences batched in
// one step give what each gives alone, and a continuously batched run gives every request the
// tokens it gets when served alone (greedy and seeded sampling, requests joining mid-run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <map>
#include <numeric>

#include "core/error.h"
#include "inference/engine.h"
#include "inference/inference_model.h"
#include "inference/kv_cache.h"
#include "inference/engine_models.h"
#include "model/gpt.h"

namespace mg {
namespace {

using namespace testing;  // engine_models.h

void expect_rows_near(const float* got, const float* want, int64_t n, const std::string& what) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) /
                                std::max(1.0, std::fabs(double(want[i]))));
  EXPECT_LT(worst, 1e-5) << what;
}

// Prefill `prefill` tokens in one step, then decode the rest one per step: every position's
// logits equal the full forward's.
void expect_decode_matches_full_forward(const GPTConfig& cfg, int64_t prefill) {
  const int64_t S = cfg.seq_length, V = cfg.padded_vocab_size();
  const std::vector<int32_t> tokens = sequence(S, cfg.vocab_size, 3);
  const std::vector<float> want = full_forward(cfg, tokens);
  const auto owned = model(cfg, S);
  InferenceModel& m = *owned;
  std::unique_ptr<KvCache> cache = m.make_cache(4, 8);  // 32 rows: S = 24 fits in 3 blocks
  std::vector<int32_t> blocks;
  ASSERT_TRUE(cache->allocate(3, blocks));
  std::vector<int32_t> pos(static_cast<size_t>(S));
  std::iota(pos.begin(), pos.end(), 0);
  int64_t past = 0;
  while (past < S) {
    const int64_t n = past == 0 ? prefill : 1;
    std::vector<int32_t> rows(static_cast<size_t>(n));
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> got(static_cast<size_t>(n * V));
    m.step(KvStep(*cache, {{0, n, past, &blocks}}), tokens.data() + past, pos.data() + past, n,
           rows, got.data());
    expect_rows_near(got.data(), want.data() + past * V, n * V,
                     "positions " + std::to_string(past) + ".." + std::to_string(past + n - 1));
    past += n;
  }
}

TEST(KvCache, DecodeMatchesTheFullForwardGpt2) { expect_decode_matches_full_forward(gpt2(), 5); }
TEST(KvCache, DecodeMatchesTheFullForwardLlama) { expect_decode_matches_full_forward(llama(), 9); }
TEST(KvCache, DecodeMatchesTheFullForwardMoe) { expect_decode_matches_full_forward(mixtral(), 1); }

// Two sequences in one step (one decoding after 10 cached tokens, one prefilling 6), their
// blocks interleaved in the pool: each row's logits equal those of the sequence run alone.
TEST(KvCache, BatchedSequencesEqualEachAlone) {
  const GPTConfig cfg = llama();
  const int64_t V = cfg.padded_vocab_size();
  const auto owned = model(cfg, 24);
  InferenceModel& m = *owned;
  const std::vector<int32_t> a = sequence(11, cfg.vocab_size, 1),
                             b = sequence(6, cfg.vocab_size, 2);
  std::vector<int32_t> pos(24);
  std::iota(pos.begin(), pos.end(), 0);
  auto alone = [&](const std::vector<int32_t>& t) {  // the last row's logits
    std::unique_ptr<KvCache> c = m.make_cache(4, 4);
    std::vector<int32_t> blocks;
    EXPECT_TRUE(c->allocate(3, blocks));
    const int64_t n = int64_t(t.size());
    std::vector<float> out(static_cast<size_t>(V));
    m.step(KvStep(*c, {{0, n, 0, &blocks}}), t.data(), pos.data(), n, {int32_t(n - 1)}, out.data());
    return out;
  };
  const std::vector<float> want_a = alone(a), want_b = alone(b);
  std::unique_ptr<KvCache> c = m.make_cache(8, 4);
  std::vector<int32_t> blocks_a, blocks_b;
  ASSERT_TRUE(c->allocate(1, blocks_b));  // b's first block before a's: interleaved
  ASSERT_TRUE(c->allocate(3, blocks_a));
  ASSERT_TRUE(c->allocate(1, blocks_b));
  std::vector<float> scratch(static_cast<size_t>(V));
  m.step(KvStep(*c, {{0, 10, 0, &blocks_a}}), a.data(), pos.data(), 10, {9}, scratch.data());
  std::vector<int32_t> tokens = {a[10]};
  tokens.insert(tokens.end(), b.begin(), b.end());
  std::vector<int32_t> positions = {10, 0, 1, 2, 3, 4, 5};
  std::vector<float> got(static_cast<size_t>(2 * V));
  m.step(KvStep(*c, {{0, 1, 10, &blocks_a}, {1, 6, 0, &blocks_b}}), tokens.data(), positions.data(),
         7, {0, 6}, got.data());
  expect_rows_near(got.data(), want_a.data(), V, "a (decoding)");
  expect_rows_near(got.data() + V, want_b.data(), V, "b (prefilling)");
}

std::vector<Request> requests(const GPTConfig& cfg) {
  std::vector<Request> r;
  for (int i = 0; i < 5; ++i) {
    Request q;
    q.prompt = sequence(3 + 2 * i, cfg.vocab_size, i + 10);
    q.sampling.max_new_tokens = 4 + i;
    q.sampling.temperature = i % 2 ? 0.8 : 0.0;  // greedy and sampled
    q.sampling.top_k = i == 3 ? 5 : 0;
    q.sampling.top_p = i == 1 ? 0.9 : 0.0;
    q.sampling.seed = uint64_t(100 + i);
    q.sampling.logprobs = i == 2;
    r.push_back(q);
  }
  return r;
}

// Continuous batching: two requests start, three join after two steps; each gets the tokens
// (and log-probabilities) it gets alone, and the static schedule gives the same in more steps.
TEST(Engine, ContinuousBatchingGivesEachRequestItsTokensAlone) {
  for (const GPTConfig& cfg : {gpt2(), llama()}) {
    EngineConfig ec;
    ec.max_seq_length = 20;
    ec.max_requests = 4;
    ec.block_size = 4;
    const auto owned = model(cfg, ec.step_rows());
    InferenceModel& m = *owned;
    const std::vector<Request> reqs = requests(cfg);
    std::vector<Completion> alone;
    for (const Request& r : reqs) {
      Engine e(m, ec);
      e.add(r);
      alone.push_back(e.run_all().at(0));
    }
    int64_t steps[2] = {0, 0};
    for (const bool continuous : {true, false}) {
      EngineConfig c = ec;
      c.continuous = continuous;
      Engine e(m, c);
      e.add(reqs[0]);
      e.add(reqs[1]);
      std::vector<Completion> done = e.step();
      for (Completion& d : e.step()) done.push_back(d);
      for (size_t i = 2; i < reqs.size(); ++i) e.add(reqs[i]);
      for (Completion& d : e.run_all()) done.push_back(d);
      std::sort(done.begin(), done.end(),
                [](const Completion& x, const Completion& y) { return x.id < y.id; });
      ASSERT_EQ(done.size(), reqs.size());
      for (size_t i = 0; i < reqs.size(); ++i) {
        SCOPED_TRACE("request " + std::to_string(i) + (continuous ? " continuous" : " static"));
        EXPECT_EQ(done[i].tokens, alone[i].tokens);
        EXPECT_EQ(done[i].finish_reason, alone[i].finish_reason);
        ASSERT_EQ(done[i].logprobs.size(), alone[i].logprobs.size());
        for (size_t j = 0; j < done[i].logprobs.size(); ++j)
          EXPECT_NEAR(done[i].logprobs[j], alone[i].logprobs[j], 1e-5);
      }
      steps[continuous ? 0 : 1] = e.steps();
    }
    // Request 4 joins as soon as request 0 leaves instead of after the whole first batch.
    EXPECT_LT(steps[0], steps[1]);
    EXPECT_EQ(alone[4].tokens.size(), 8u);
    EXPECT_EQ(alone[4].finish_reason, "length");
  }
}

// Greedy decoding is the argmax of the full forward's logits at each step, and the prompt's
// log-probabilities are its log-softmax at the next token.
TEST(Engine, GreedyTokensAndLogprobsFollowTheFullForward) {
  const GPTConfig cfg = llama();
  const int64_t V = cfg.padded_vocab_size(), S = cfg.seq_length;
  EngineConfig ec;
  ec.max_seq_length = S;
  ec.max_requests = 1;
  const auto owned = model(cfg, ec.step_rows());
  InferenceModel& m = *owned;
  Engine e(m, ec);
  Request r;
  r.prompt = sequence(6, cfg.vocab_size, 4);
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = S - 6;
  r.sampling.logprobs = true;
  e.add(r);
  const Completion c = e.run_all().at(0);
  ASSERT_EQ(int64_t(c.tokens.size()), S - 6);
  EXPECT_EQ(c.finish_reason, "length");
  std::vector<int32_t> all = c.prompt;
  all.insert(all.end(), c.tokens.begin(), c.tokens.end());
  const std::vector<float> logits = full_forward(cfg, all);
  ASSERT_EQ(int64_t(c.logprobs.size()), S - 1);
  for (int64_t t = 0; t + 1 < S; ++t) {
    const float* row = logits.data() + t * V;
    const float* top = std::max_element(row, row + cfg.vocab_size);
    if (t >= 5) {
      EXPECT_EQ(all[size_t(t + 1)], int32_t(top - row)) << "position " << t + 1;
    }
    double sum = 0;
    for (int64_t v = 0; v < cfg.vocab_size; ++v) sum += std::exp(double(row[v]) - *top);
    EXPECT_NEAR(c.logprobs[size_t(t)], row[all[size_t(t + 1)]] - *top - std::log(sum), 1e-5)
        << "position " << t + 1;
  }
}

// Sampling limits: with top_k = 3 every sampled token is one of the 3 likeliest; a stop token
// ends the request ("stop") without being returned.
TEST(Engine, TopKAndStopTokens) {
  const GPTConfig cfg = gpt2();
  const int64_t V = cfg.padded_vocab_size();
  EngineConfig ec;
  ec.max_seq_length = cfg.seq_length;
  ec.max_requests = 1;
  const auto owned = model(cfg, ec.step_rows());
  InferenceModel& m = *owned;
  Request r;
  r.prompt = sequence(4, cfg.vocab_size, 8);
  r.sampling.top_k = 3;
  r.sampling.temperature = 2.0;
  r.sampling.seed = 9;
  r.sampling.max_new_tokens = 12;
  Engine e(m, ec);
  e.add(r);
  const Completion c = e.run_all().at(0);
  std::vector<int32_t> all = c.prompt;
  all.insert(all.end(), c.tokens.begin(), c.tokens.end());
  all.resize(size_t(cfg.seq_length), 0);
  const std::vector<float> logits = full_forward(cfg, all);
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    const float* row = logits.data() + (3 + int64_t(i)) * V;
    int better = 0;
    for (int64_t v = 0; v < cfg.vocab_size; ++v) better += row[v] > row[c.tokens[i]];
    EXPECT_LT(better, 3) << "token " << i;
  }
  // The same request told to stop at its third token: two tokens, "stop".
  ASSERT_GE(c.tokens.size(), 3u);
  r.sampling.stop_tokens = {c.tokens[2]};
  Engine s(m, ec);
  s.add(r);
  const Completion stopped = s.run_all().at(0);
  EXPECT_EQ(stopped.finish_reason, "stop");
  const auto first = std::find(c.tokens.begin(), c.tokens.end(), c.tokens[2]);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(c.tokens.begin(), first));
}

// Sampling over the whole vocabulary (no top-k, no top-p) at a temperature near 0 is greedy: the
// weights are scaled by the largest logit, so nothing overflows however cold.
TEST(Engine, ColdSamplingIsGreedy) {
  const GPTConfig cfg = llama();
  EngineConfig ec;
  ec.max_seq_length = cfg.seq_length;
  ec.max_requests = 2;
  const auto owned = model(cfg, ec.step_rows());
  InferenceModel& m = *owned;
  Request r;
  r.prompt = sequence(5, cfg.vocab_size, 6);
  r.sampling.max_new_tokens = 10;
  r.sampling.temperature = 0;
  Engine e(m, ec);
  e.add(r);
  r.sampling.temperature = 1e-4;
  r.sampling.seed = 77;
  e.add(r);
  const std::vector<Completion> c = e.run_all();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].tokens, c[0].tokens);
  EXPECT_EQ(c[0].tokens.size(), 10u);
}

TEST(Engine, BadRequestsNameTheLimit) {
  const GPTConfig cfg = gpt2();
  EngineConfig ec;
  ec.max_seq_length = 8;
  ec.max_requests = 1;
  InferenceModel m(cfg, DType::F32, ec.step_rows());
  Engine e(m, ec);
  auto error = [&](Request r) {
    try {
      e.add(std::move(r));
    } catch (const UsageError& x) {
      return std::string(x.what());
    }
    return std::string();
  };
  EXPECT_NE(error({sequence(8, cfg.vocab_size, 1), {}}).find("--inference-max-seq-length 8"),
            std::string::npos);
  EXPECT_NE(error({{}, {}}).find("at least one token"), std::string::npos);
  EXPECT_NE(error({{61}, {}}).find("outside the vocabulary of 61"), std::string::npos);
  Request r{{1, 2}, {}};
  r.sampling.top_p = 1.5;
  EXPECT_NE(error(r).find("top_p must be in [0, 1]"), std::string::npos);
  EXPECT_TRUE(e.idle());
  // No limit on the tokens to generate but the context: it ends there ("length").
  r.sampling.top_p = 0;
  r.sampling.max_new_tokens = std::numeric_limits<int64_t>::max();
  m.store().init(5);
  m.prepare();
  e.add(r);
  const Completion c = e.run_all().at(0);
  EXPECT_EQ(c.tokens.size(), 6u);
  EXPECT_EQ(c.finish_reason, "length");
}

// What streaming reads: each step's generated tokens (one per running request, the first with
// its prefill), adding up to each completion; and cancelling: a request leaves at once, its
// blocks go back to the pool, and the others get what they get alone.
TEST(Engine, GeneratedTokensAndCancel) {
  const GPTConfig cfg = gpt2();
  EngineConfig ec;
  ec.max_seq_length = 20;
  ec.max_requests = 4;
  ec.block_size = 4;
  const auto owned = model(cfg, ec.step_rows());
  const std::vector<Request> reqs = requests(cfg);
  Engine alone(*owned, ec);
  alone.add(reqs[0]);
  const Completion want = alone.run_all().at(0);
  Engine e(*owned, ec);
  const int64_t free = e.free_blocks();
  const int64_t a = e.add(reqs[0]), b = e.add(reqs[4]);
  std::map<int64_t, std::vector<int32_t>> streamed;
  std::vector<Completion> done = e.step();
  for (const Engine::Generated& g : e.generated()) streamed[g.id].push_back(g.token);
  EXPECT_EQ(e.generated().size(), 2u);  // both prompts prefilled, each first token sampled
  EXPECT_LT(e.free_blocks(), free);
  EXPECT_TRUE(e.cancel(b));
  EXPECT_FALSE(e.cancel(b));
  EXPECT_FALSE(e.cancel(12345));
  while (!e.idle()) {
    for (Completion& c : e.step()) done.push_back(c);
    for (const Engine::Generated& g : e.generated()) {
      EXPECT_EQ(g.id, a);
      streamed[g.id].push_back(g.token);
    }
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tokens, want.tokens);
  EXPECT_EQ(streamed[a], want.tokens);
  EXPECT_EQ(e.free_blocks(), free);  // the cancelled request's blocks too
}

}  // namespace
}  // namespace mg
