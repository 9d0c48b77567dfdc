#include "inference/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "checkpoint/params_file.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "model/gpt.h"
#include "tensor/device_runtime.h"

namespace mg {

void GenerateConfig::validate() const {
  model.validate();
  MG_USER_CHECK(load_params.empty() != load.empty(),
                "pass one of --load DIR (a checkpoint) and --load-params FILE (a "
                "--dump-final-params file)");
  MG_USER_CHECK(!prompts.empty(), "--prompt is required");
  MG_USER_CHECK(max_new_tokens >= 0, "--max-new-tokens must be >= 0");
  MG_USER_CHECK(top_k >= 1, "--top-k must be >= 1 (1 is greedy)");
  MG_USER_CHECK(temperature > 0, "--temperature must be positive");
}

namespace {

// What generation allocates — params and grads in f32 and one sample's activations — checked
// against the host's available memory before the model is built.
void check_fits(const GPTConfig& mc) {
  const char* what = "bytes of the model for generation";
  const int64_t need = checked_add(checked_mul(shard_param_count(mc).elements, 8, what),
                                   GPTModel::activation_bytes(mc, 1, StageSpec{}), what);
  runtime::check_host_fits(need, str_cat("generation with a model of ", mc.num_parameters(),
                                         " parameters (--num-layers ", mc.num_layers,
                                         ", --hidden-size ", mc.hidden_size, ", --seq-length ",
                                         mc.seq_length, ", --vocab-size ", mc.vocab_size, ")"));
}

}  // namespace

std::vector<std::string> generate(const GenerateConfig& cfg) {
  cfg.validate();
  auto tok = make_tokenizer(cfg.tokenizer);
  GPTConfig mc = cfg.model;
  if (!cfg.load.empty()) mc = checkpoint_model_config(cfg.load);
  const std::string source = cfg.load.empty() ? "--load-params '" + cfg.load_params + "'"
                                              : "--load '" + cfg.load + "'";
  MG_USER_CHECK(tok->vocab_size() <= mc.padded_vocab_size(), source, ": the tokenizer has ",
                tok->vocab_size(), " tokens but the model only ", mc.padded_vocab_size());
  check_fits(mc);
  GPTModel model(mc, 1);
  if (cfg.load.empty())
    read_params_file(cfg.load_params, model.config(), model.params());
  else
    load_checkpoint_weights(cfg.load, model);
  const int64_t S = mc.seq_length, V = mc.padded_vocab_size();
  std::mt19937_64 rng(cfg.seed);
  std::vector<int32_t> tokens(S), positions(S), labels(S, 0);
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> mask(S, 0.f);
  std::vector<std::string> out;
  for (const std::string& prompt : cfg.prompts) {
    std::vector<int32_t> ids = tok->encode(prompt);
    MG_USER_CHECK(!ids.empty(), "--prompt '", prompt, "' encodes to no tokens");
    const size_t prompt_len = ids.size();  // decode(all) == prompt + continuation
    for (int64_t n = 0; n < cfg.max_new_tokens; ++n) {
      // The last S tokens (causal attention: positions past the context do not matter).
      const size_t start = ids.size() > size_t(S) ? ids.size() - size_t(S) : 0;
      const int64_t len = int64_t(ids.size() - start);
      std::fill(tokens.begin(), tokens.end(), 0);
      std::copy(ids.begin() + std::ptrdiff_t(start), ids.end(), tokens.begin());
      model.forward(0, {tokens.data(), positions.data(), labels.data(), mask.data()});
      const float* logits = model.logits(0) + (len - 1) * V;  // (S, B=1, V)
      // NaN or inf logits (diverged or corrupt parameters) have no ranking to sample from.
      for (int64_t v = 0; v < tok->vocab_size(); ++v)
        MG_USER_CHECK(std::isfinite(logits[v]), "the model from ", source,
                      " gives non-finite logits (", logits[v], " for token ", v, ") on --prompt '",
                      prompt, "': its parameters are corrupt or diverged; refusing to sample");
      std::vector<int32_t> order(size_t(tok->vocab_size()));
      std::iota(order.begin(), order.end(), 0);
      const size_t k = size_t(std::min<int64_t>(cfg.top_k, int64_t(order.size())));
      std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(),
                        [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      int32_t next = order[0];
      if (k > 1) {
        std::vector<double> p(k);
        for (size_t i = 0; i < k; ++i)
          p[i] = std::exp((logits[order[i]] - logits[order[0]]) / cfg.temperature);
        next = order[std::discrete_distribution<size_t>(p.begin(), p.end())(rng)];
      }
      if (next == tok->eod()) break;
      ids.push_back(next);
    }
    (void)prompt_len;
    out.push_back(tok->decode(ids));
  }
  return out;
}

}  // namespace mg
