// `megatron generate` flags: the model shape it was trained with, its tokenizer, the
// parameters file and the sampling settings.
// The option table keeps its hand layout: clang-format 14 takes the accessors' `C& c` for a
// product and breaks the rows apart.
// clang-format off
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/tokenizer_options.h"

namespace mg {

#define MG_FIELD(expr) [](GenerateConfig& c) -> auto& { return c.expr; }

const std::vector<Option<GenerateConfig>>& generate_options() {
  using C = GenerateConfig;
  static const std::vector<Option<C>> table = [] {
    std::vector<Option<C>> t = model_options<C>(MG_FIELD(model));
    std::vector<Option<C>> rest = {
      valued<C>("--load", "DIR", "a checkpoint directory (train --save); the model shape comes "
                "from it", MG_FIELD(load)),
      valued<C>("--load-params", "PATH", "parameters written by train --dump-final-params",
                MG_FIELD(load_params)),
      valued<C>("--prompt", "TEXT...", "prompts to continue", MG_FIELD(prompts)),
      valued<C>("--sample-input-file", "PATH", "prompts to continue, one per line (Megatron's "
                "generate_samples_gpt.py flag; empty lines skipped), after any --prompt",
                MG_FIELD(sample_input_file)),
      valued<C>("--max-new-tokens", "N", "tokens to generate per prompt", MG_FIELD(max_new_tokens)),
      valued<C>("--top-k", "K", "sample from the K most likely tokens (1: greedy)", MG_FIELD(top_k)),
      valued<C>("--temperature", "T", "softmax temperature for sampling", MG_FIELD(temperature)),
      valued<C>("--seed", "N", "sampling seed", MG_FIELD(seed)),
    };
    t.insert(t.end(), rest.begin(), rest.end());
    const auto tok = tokenizer_options<C>(MG_FIELD(tokenizer));
    t.insert(t.end(), tok.begin(), tok.end());
    return t;
  }();
  return table;
}

#undef MG_FIELD

}  // namespace mg
// clang-format on
