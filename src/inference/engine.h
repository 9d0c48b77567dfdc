// The inference engine: requests (token prompts with their sampling settings) are prefilled and
// then decoded one token per step over a paged KV cache (inference/kv_cache.h), with continuous
// batching: between two steps finished requests leave the running batch and waiting ones join
// it (their whole prompt in the step they join), so one step runs the prompts of the newcomers
// and one token of every other running request. With continuous batching off, a batch runs to
// its end before the next one starts (Megatron's static server). Each request samples from its
// own random stream, so its tokens do not depend on what it was batched with.
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "inference/inference_model.h"
#include "inference/kv_cache.h"

namespace mg {

// How one request samples (Megatron's fields): temperature 0 (or top_k 1) is greedy; top_k 0
// and top_p 0 are off.
struct Sampling {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 0.0;
  uint64_t seed = 0;
  int64_t max_new_tokens = 64;
  std::vector<int32_t> stop_tokens;  // generation ends on one (not included in the output)
  bool logprobs = false;             // log-probabilities of the prompt's tokens (after the
                                     // first) and of the generated ones
};

struct Request {
  std::vector<int32_t> prompt;
  Sampling sampling;
};

struct Completion {
  int64_t id = 0;
  std::vector<int32_t> prompt, tokens;  // tokens: the generated ones
  std::vector<float> logprobs;          // prompt (from its second token) then generated
  std::string finish_reason;            // "stop" (a stop token) or "length"
};

struct EngineConfig {
  int64_t max_seq_length = 2048;  // --inference-max-seq-length: prompt + generated tokens
  int64_t max_requests = 8;       // --inference-max-requests: requests in the running batch
  int64_t block_size = 16;        // tokens per KV-cache block
  bool continuous = true;         // false: a batch finishes before others join
  // Rows (tokens) one step may run; 0: max_seq_length + max_requests (any prompt fits).
  int64_t max_step_rows = 0;
  // Tokens are sampled below this (the tokenizer's vocabulary, when the model's rows are more);
  // 0: the model's vocabulary.
  int64_t vocab_limit = 0;
  int64_t step_rows() const {
    return max_step_rows > 0 ? max_step_rows : max_seq_length + max_requests;
  }
  int64_t cache_blocks() const;  // a full context for every request
  void validate() const;         // UsageError naming the flag
};

// The model's logits were NaN or infinite for a request: its parameters are corrupt.
struct NonFiniteLogits : std::runtime_error {
  NonFiniteLogits(int64_t request, int64_t token, float value);
  int64_t request, token;
  float value;
};

// What an engine of ec over a model of mc allocates in dtype on each of tp x pp ranks
// (parameters, the KV cache, one step's buffers; the model split evenly), times the ranks on
// this host, checked against the host's available memory before anything is built (UsageError
// naming `what` when it does not fit).
void check_engine_fits(const GPTConfig& mc, const EngineConfig& ec, DType dtype,
                       const std::string& what, int tp = 1, int pp = 1, int ranks_on_host = 1);

class Engine {
 public:
  // model must have been built with max_rows >= cfg.step_rows().
  Engine(InferenceModel& model, const EngineConfig& cfg);
  // Queues a request; returns its id. A prompt that is empty, holds a token outside the
  // vocabulary or leaves no room to generate (prompt >= max_seq_length) is refused
  // (UsageError naming the limit).
  int64_t add(Request r);
  // One scheduler iteration and model step; returns the requests that finished in it.
  std::vector<Completion> step();
  bool idle() const { return waiting_.empty() && running_.empty(); }
  // Drops every waiting and running request (their blocks given back): after a failed step.
  void clear();
  // Drops one request (a client gone): false if it already finished (or never was).
  bool cancel(int64_t id);
  // The tokens the last step() generated, per request, in order (for streaming).
  struct Generated {
    int64_t id;
    int32_t token;
    float logprob;  // log-probability of the token (requests with logprobs; else 0)
  };
  const std::vector<Generated>& generated() const { return generated_; }
  // Steps until every request added so far has finished; their completions in id order.
  std::vector<Completion> run_all();
  const EngineConfig& config() const { return cfg_; }
  int64_t running() const { return int64_t(running_.size()); }
  int64_t steps() const { return steps_; }
  int64_t free_blocks() const { return cache_->free_blocks(); }

 private:
  struct Sequence {
    int64_t id;
    Request req;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t past = 0;             // tokens whose keys and values are cached
    std::vector<int32_t> blocks;
    std::mt19937_64 rng;
    Completion out;
  };
  bool admit(std::deque<Sequence>& waiting, int64_t& rows);
  int64_t vocab() const {
    return cfg_.vocab_limit > 0 ? cfg_.vocab_limit : model_.config().vocab_size;
  }
  int32_t sample(Sequence& s, const float* logits);

  InferenceModel& model_;
  EngineConfig cfg_;
  std::unique_ptr<KvCache> cache_;
  std::deque<Sequence> waiting_;
  std::vector<Sequence> running_;
  int64_t next_id_ = 0, steps_ = 0;
  std::vector<float> logits_;
  std::vector<Generated> generated_;
};

}  // namespace mg
