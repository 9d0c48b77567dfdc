// Text generation from a trained model on one process, through the KV-cache inference engine
// (inference/engine.h): the prompts are served together, each continued until the end-of-text
// token, --max-new-tokens or the model's context (--seq-length) ends it; greedy with top_k = 1,
// otherwise top-k with temperature. Parameters come from a checkpoint (--load, any layout) or
// a --dump-final-params file.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "model/config.h"

namespace mg {

struct GenerateConfig {
  GPTConfig model;
  TokenizerConfig tokenizer;
  std::string load_params;           // --load-params: a --dump-final-params file
  std::string load;                  // --load: a checkpoint directory (model shape from it)
  std::vector<std::string> prompts;  // --prompt TEXT...
  std::string sample_input_file;     // --sample-input-file: more prompts, one per line
  int64_t max_new_tokens = 32;       // --max-new-tokens
  int64_t top_k = 1;                 // --top-k (1: greedy)
  double temperature = 1.0;          // --temperature
  uint32_t seed = 1234;              // --seed
  void validate() const;
};

// Returns prompt + generated text for every prompt.
std::vector<std::string> generate(const GenerateConfig& cfg);

}  // namespace mg
