#include "inference/generate.h"

#include <algorithm>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "checkpoint/params_file.h"
#include "core/error.h"
#include "inference/engine.h"

namespace mg {

void GenerateConfig::validate() const {
  model.validate();
  MG_USER_CHECK(load_params.empty() != load.empty(),
                "pass one of --load DIR (a checkpoint) and --load-params FILE (a "
                "--dump-final-params file)");
  MG_USER_CHECK(!prompts.empty() || !sample_input_file.empty(),
                "--prompt TEXT... or --sample-input-file PATH is required");
  MG_USER_CHECK(max_new_tokens >= 0, "--max-new-tokens must be >= 0");
  MG_USER_CHECK(top_k >= 1, "--top-k must be >= 1 (1 is greedy)");
  MG_USER_CHECK(temperature > 0, "--temperature must be positive");
}

// A thin client of the inference engine (inference/engine.h): every prompt is a request of the
// same sampling, served together; the context is the model's --seq-length.
std::vector<std::string> generate(const GenerateConfig& config) {
  config.validate();
  GenerateConfig cfg = config;
  if (!cfg.sample_input_file.empty()) {
    std::ifstream in(cfg.sample_input_file);
    MG_USER_CHECK(in.good(), "--sample-input-file '", cfg.sample_input_file, "' cannot be read");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) cfg.prompts.push_back(line);
    }
    MG_USER_CHECK(!cfg.prompts.empty(), "--sample-input-file '", cfg.sample_input_file,
                  "' holds no prompt (one per line)");
  }
  auto tok = make_tokenizer(cfg.tokenizer);
  GPTConfig mc = cfg.model;
  if (!cfg.load.empty()) mc = checkpoint_model_config(cfg.load);
  const std::string source =
      cfg.load.empty() ? "--load-params '" + cfg.load_params + "'" : "--load '" + cfg.load + "'";
  MG_USER_CHECK(tok->vocab_size() <= mc.padded_vocab_size(), source, ": the tokenizer has ",
                tok->vocab_size(), " tokens but the model only ", mc.padded_vocab_size());
  EngineConfig ec;
  ec.max_seq_length = mc.seq_length;
  ec.max_requests = std::min<int64_t>(int64_t(cfg.prompts.size()), 8);  // the rest queue
  ec.vocab_limit = std::min(tok->vocab_size(), mc.vocab_size);
  check_engine_fits(mc, ec, DType::F32,
                    str_cat("generation with a model of ", mc.num_parameters(),
                            " parameters (--num-layers ", mc.num_layers, ", --hidden-size ",
                            mc.hidden_size, ", --seq-length ", mc.seq_length, ", --vocab-size ",
                            mc.vocab_size, ")"));
  InferenceModel model(mc, DType::F32, ec.step_rows());
  if (cfg.load.empty()) read_params_file(cfg.load_params, model.config(), model.store().params());
  else load_checkpoint_weights(cfg.load, model.store());
  model.prepare();
  Engine engine(model, ec);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < cfg.prompts.size(); ++i) {
    const std::string& prompt = cfg.prompts[i];
    prompts.push_back(tok->encode(prompt));
    const int64_t n = int64_t(prompts.back().size());
    MG_USER_CHECK(n > 0, "--prompt '", prompt, "' encodes to no tokens");
    MG_USER_CHECK(n < mc.seq_length, "--prompt '", prompt, "' is ", n,
                  " tokens, which leaves no "
                  "room to generate in the model's context of ",
                  mc.seq_length, " (--seq-length)");
    Sampling s;
    s.temperature = cfg.top_k == 1 ? 0.0 : cfg.temperature;
    s.top_k = cfg.top_k;
    s.seed = cfg.seed + i;
    s.max_new_tokens = cfg.max_new_tokens;
    s.stop_tokens = {tok->eod()};
    engine.add({prompts.back(), s});
  }
  std::vector<Completion> done;
  try {
    done = engine.run_all();
  } catch (const NonFiniteLogits& e) {
    throw UsageError(str_cat("the model from ", source, " gives non-finite logits (", e.value,
                             " for token ", e.token, ") on --prompt '",
                             cfg.prompts[size_t(e.request)],
                             "': its parameters are corrupt or diverged; refusing to sample"));
  }
  std::vector<std::string> out;
  for (const Completion& c : done) {
    std::vector<int32_t> ids = c.prompt;  // decode(all) == prompt + continuation
    ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
    out.push_back(tok->decode(ids));
  }
  return out;
}

}  // namespace mg
