#include "inference/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/checked_math.h"
#include "core/error.h"
#include "model/gpt.h"
#include "tensor/device_runtime.h"

namespace mg {

NonFiniteLogits::NonFiniteLogits(int64_t request, int64_t token, float value)
    : std::runtime_error("non-finite logits"), request(request), token(token), value(value) {}

namespace {
// log softmax(logits)[token] over the vocabulary, in double.
float log_prob(const float* logits, int64_t V, int32_t token) {
  const float m = *std::max_element(logits, logits + V);
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[v]) - m);
  return float(double(logits[token]) - m - std::log(sum));
}
}  // namespace

void EngineConfig::validate() const {
  MG_USER_CHECK(max_seq_length > 1 && max_seq_length <= (int64_t(1) << 24),
                "--inference-max-seq-length must be in [2, 2^24] (got ", max_seq_length, ")");
  MG_USER_CHECK(max_requests > 0 && max_requests <= (int64_t(1) << 16),
                "--inference-max-requests must be in [1, 65536] (got ", max_requests, ")");
  MG_CHECK(block_size > 0 && block_size <= 4096, "KV-cache block size ", block_size);
}

int64_t EngineConfig::cache_blocks() const {
  return max_requests * ceil_div(max_seq_length, block_size);
}

void check_engine_fits(const GPTConfig& mc, const EngineConfig& ec, DType dtype,
                       const std::string& what, int tp, int pp, int ranks_on_host) {
  ec.validate();
  const char* bytes = "bytes of the inference engine";
  StageSpec stage;
  stage.shard.tp_size = tp;
  LayerDims d = stage_dims(mc, 1, stage);
  d.S = ec.step_rows();
  d.dtype = dtype;
  const int64_t es = int64_t(dtype_size(dtype));
  const int64_t kv = checked_product({ceil_div(mc.num_layers, int64_t(pp)), ec.cache_blocks(),
                                      ec.block_size, 2 * d.NG_local() * d.HD(), es},
                                     bytes);
  const int64_t params =
      checked_mul(ceil_div(shard_param_count(mc).elements, int64_t(tp) * pp), es, bytes);
  const int64_t buffers = checked_add(layer_cache_bytes(d), layer_scratch_bytes(d), bytes);
  const int64_t rank = checked_add(checked_add(params, kv, bytes), buffers, bytes);
  runtime::check_host_fits(checked_mul(rank, int64_t(ranks_on_host), bytes), what);
}

Engine::Engine(InferenceModel& model, const EngineConfig& cfg) : model_(model), cfg_(cfg) {
  const GPTConfig& mc = model.config();
  cfg.validate();
  MG_CHECK(cfg.vocab_limit <= mc.vocab_size, "a vocabulary limit of ", cfg.vocab_limit,
           " above the model's ", mc.vocab_size);
  MG_USER_CHECK(!mc.learned_positions() || cfg.max_seq_length <= mc.max_positions(),
                "--inference-max-seq-length ", cfg.max_seq_length, " exceeds the model's ",
                mc.max_positions(), " learned positions (--max-position-embeddings)");
  MG_CHECK(cfg.block_size > 0 && model.max_rows() >= cfg.step_rows(), "engine step of ",
           cfg.step_rows(), " rows on a model built for ", model.max_rows());
  cache_ = model.make_cache(cfg.cache_blocks(), cfg.block_size);
}

int64_t Engine::add(Request r) {
  const int64_t V = vocab(), P = int64_t(r.prompt.size());
  const Sampling& s = r.sampling;
  MG_USER_CHECK(P > 0, "a prompt must hold at least one token");
  MG_USER_CHECK(P < cfg_.max_seq_length, "a prompt of ", P,
                " tokens leaves no room to generate "
                "under --inference-max-seq-length ",
                cfg_.max_seq_length);
  for (int32_t t : r.prompt)
    MG_USER_CHECK(t >= 0 && t < V, "prompt token ", t, " is outside the vocabulary of ", V);
  for (int32_t t : s.stop_tokens)
    MG_USER_CHECK(t >= 0 && t < V, "stop token ", t, " is outside the vocabulary of ", V);
  MG_USER_CHECK(s.max_new_tokens >= 0, "tokens to generate must be >= 0 (got ", s.max_new_tokens,
                ")");
  MG_USER_CHECK(s.temperature >= 0 && std::isfinite(s.temperature),
                "temperature must be >= 0 (got ", s.temperature, ")");
  MG_USER_CHECK(s.top_k >= 0, "top_k must be >= 0 (got ", s.top_k, ")");
  MG_USER_CHECK(s.top_p >= 0 && s.top_p <= 1, "top_p must be in [0, 1] (got ", s.top_p, ")");
  const uint64_t seed = s.seed;
  Sequence q{next_id_++, std::move(r), {}, 0, {}, std::mt19937_64(seed), {}};
  q.tokens = q.req.prompt;
  q.out.id = q.id;
  q.out.prompt = q.req.prompt;
  waiting_.push_back(std::move(q));
  return waiting_.back().id;
}

bool Engine::admit(std::deque<Sequence>& waiting, int64_t& rows) {
  Sequence& w = waiting.front();
  const int64_t need = int64_t(w.tokens.size());
  if (int64_t(running_.size()) >= cfg_.max_requests || rows + need > cfg_.step_rows()) return false;
  const int64_t total =  // (max_new_tokens may be huge: no overflow)
      std::min(need + std::min(w.req.sampling.max_new_tokens, cfg_.max_seq_length),
               cfg_.max_seq_length);
  if (!cache_->allocate(ceil_div(total, cfg_.block_size), w.blocks)) return false;
  rows += need;
  running_.push_back(std::move(w));
  waiting.pop_front();
  return true;
}

int32_t Engine::sample(Sequence& s, const float* logits) {
  const int64_t V = vocab();
  for (int64_t v = 0; v < V; ++v)
    if (!std::isfinite(logits[v])) throw NonFiniteLogits(s.id, v, logits[v]);
  const Sampling& p = s.req.sampling;
  if (p.temperature == 0 || p.top_k == 1)
    return int32_t(std::max_element(logits, logits + V) - logits);
  // Candidates by descending logit: the top k, or all when top_p needs the order.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = p.top_k > 0 ? std::min(p.top_k, V) : V;
  auto higher = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k < V || p.top_p > 0)
    std::partial_sort(order.begin(), order.begin() + k, order.end(), higher);
  order.resize(size_t(k));
  std::vector<double> w(order.size());
  double top = logits[order[0]];  // the largest (order is unsorted without top-k and top-p)
  for (int32_t v : order) top = std::max(top, double(logits[v]));
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i)
    total += w[i] = std::exp((double(logits[order[i]]) - top) / p.temperature);
  if (p.top_p > 0) {  // the smallest head of the order whose probability reaches top_p
    double cum = 0;
    size_t keep = 0;
    while (keep < w.size() && cum < p.top_p * total) cum += w[keep++];
    w.resize(keep);
    order.resize(keep);
    total = cum;
  }
  double u = std::uniform_real_distribution<double>(0.0, total)(s.rng);
  for (size_t i = 0; i < w.size(); ++i) {
    if (u < w[i]) return order[i];
    u -= w[i];
  }
  return order.back();
}

std::vector<Completion> Engine::step() {
  int64_t rows = 0;
  for (const Sequence& s : running_) rows += int64_t(s.tokens.size()) - s.past;
  if (cfg_.continuous || running_.empty())
    while (!waiting_.empty() && admit(waiting_, rows)) {
    }
  generated_.clear();
  if (running_.empty()) return {};
  // The step's rows: each running request's uncached tokens (a newcomer's prompt, else its
  // last token), with the rows whose logits are needed.
  std::vector<int32_t> tokens, positions, logit_rows;
  std::vector<KvSequence> seqs;
  std::vector<int64_t> first_logit;  // per request: its first entry in logit_rows
  for (const Sequence& s : running_) {
    const int64_t n = int64_t(s.tokens.size()) - s.past, row0 = int64_t(tokens.size());
    seqs.push_back({row0, n, s.past, &s.blocks});
    first_logit.push_back(int64_t(logit_rows.size()));
    const bool all = s.req.sampling.logprobs && s.past == 0;
    for (int64_t i = 0; i < n; ++i) {
      tokens.push_back(s.tokens[size_t(s.past + i)]);
      positions.push_back(int32_t(s.past + i));
      if (all || i == n - 1) logit_rows.push_back(int32_t(row0 + i));
    }
  }
  const int64_t V = model_.config().padded_vocab_size();
  logits_.resize(logit_rows.size() * size_t(V));
  model_.step(KvStep(*cache_, std::move(seqs)), tokens.data(), positions.data(),
              int64_t(tokens.size()), logit_rows, logits_.data());
  ++steps_;
  std::vector<Completion> done;
  const int64_t vocab = this->vocab();
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = running_[i];
    const int64_t n = int64_t(s.tokens.size()) - s.past;
    const float* row = logits_.data() + first_logit[i] * V;
    if (s.req.sampling.logprobs && s.past == 0) {  // the prompt's tokens after the first
      for (int64_t j = 0; j + 1 < n; ++j)
        s.out.logprobs.push_back(log_prob(row + j * V, vocab, s.tokens[size_t(j + 1)]));
      row += (n - 1) * V;  // its last row samples
    }
    s.past += n;
    const Sampling& p = s.req.sampling;
    if (p.max_new_tokens == 0) {
      s.out.finish_reason = "length";
      continue;
    }
    const int32_t next = sample(s, row);
    if (std::find(p.stop_tokens.begin(), p.stop_tokens.end(), next) != p.stop_tokens.end()) {
      s.out.finish_reason = "stop";
      continue;
    }
    const float lp = p.logprobs ? log_prob(row, vocab, next) : 0.f;
    if (p.logprobs) s.out.logprobs.push_back(lp);
    generated_.push_back({s.id, next, lp});
    s.tokens.push_back(next);
    s.out.tokens.push_back(next);
    if (int64_t(s.out.tokens.size()) == p.max_new_tokens ||
        int64_t(s.tokens.size()) == cfg_.max_seq_length)
      s.out.finish_reason = "length";
  }
  for (size_t i = 0; i < running_.size();) {
    if (running_[i].out.finish_reason.empty()) {
      ++i;
      continue;
    }
    cache_->release(running_[i].blocks);
    done.push_back(std::move(running_[i].out));
    running_.erase(running_.begin() + std::ptrdiff_t(i));
  }
  return done;
}

void Engine::clear() {
  for (Sequence& s : running_) cache_->release(s.blocks);
  running_.clear();
  waiting_.clear();
}

bool Engine::cancel(int64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if (it->id == id) {
      waiting_.erase(it);
      return true;
    }
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (it->id == id) {
      cache_->release(it->blocks);
      running_.erase(it);
      return true;
    }
  return false;
}

std::vector<Completion> Engine::run_all() {
  std::vector<Completion> out;
  while (!idle()) {
    std::vector<Completion> d = step();
    MG_CHECK(!d.empty() || !running_.empty(), "the engine cannot admit a waiting request");
    for (Completion& c : d) out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(),
            [](const Completion& a, const Completion& b) { return a.id < b.id; });
  return out;
}

}  // namespace mg
