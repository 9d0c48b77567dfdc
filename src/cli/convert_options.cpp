// `megatron convert` flags.
#include "cli/commands.h"

namespace mg {

#define MG_FIELD(expr) [](ConvertConfig& c) -> auto& { return c.expr; }

const std::vector<Option<ConvertConfig>>& convert_options() {
  using C = ConvertConfig;
  static const std::vector<Option<C>> table = {
      valued<C>("--direction", "NAME", "hf-to-megatron | megatron-to-hf", MG_FIELD(direction)),
      valued<C>("--load", "DIR",
                "source: a Hugging Face GPT-2 directory (config.json, model.safetensors) or a "
                "checkpoint directory (its latest checkpoint)",
                MG_FIELD(load)),
      valued<C>("--save", "DIR", "destination directory (new or empty, unless --overwrite)",
                MG_FIELD(save)),
      on_off<C>("--overwrite",
                "write into a non-empty --save directory; into a training checkpoint directory "
                "this makes the converted checkpoint (iteration 0) its latest",
                MG_FIELD(overwrite)),
      valued<C>("--make-vocab-size-divisible-by", "K",
                "hf-to-megatron: pad the vocabulary (zero rows) to a multiple of K",
                MG_FIELD(make_vocab_size_divisible_by)),
      on_off<C>("--allow-unused-tensors",
                "hf-to-megatron: skip tensors of model.safetensors that the config does not use "
                "(default: an error naming them)",
                MG_FIELD(allow_unused_tensors)),
  };
  return table;
}

#undef MG_FIELD

}  // namespace mg
