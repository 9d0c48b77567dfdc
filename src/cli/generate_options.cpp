// `megatron generate` flags: the model shape it was trained with, its tokenizer, the
// parameters file and the sampling settings.
#include "cli/commands.h"

namespace mg {

#define MG_FIELD(expr) [](GenerateConfig& c) -> auto& { return c.expr; }

const std::vector<Option<GenerateConfig>>& generate_options() {
  using C = GenerateConfig;
  static const std::vector<Option<C>> table = {
      valued<C>("--num-layers", "L", "transformer layers", MG_FIELD(model.num_layers)),
      valued<C>("--hidden-size", "H", "hidden size", MG_FIELD(model.hidden_size)),
      valued<C>("--num-attention-heads", "NH", "attention heads", MG_FIELD(model.num_attention_heads)),
      valued<C>("--ffn-hidden-size", "F", "MLP width (0: 4 x hidden size)",
                MG_FIELD(model.ffn_hidden_size)),
      valued<C>("--seq-length", "S", "context length", MG_FIELD(model.seq_length)),
      valued<C>("--max-position-embeddings", "P", "rows of the position table (0: --seq-length)",
                MG_FIELD(model.max_position_embeddings)),
      valued<C>("--vocab-size", "V", "vocabulary size (NullTokenizer)", MG_FIELD(model.vocab_size)),
      valued<C>("--make-vocab-size-divisible-by", "K", "vocabulary padding multiple",
                MG_FIELD(model.make_vocab_size_divisible_by)),
      valued<C>("--tokenizer-type", "NAME", "GPT2BPETokenizer | NullTokenizer",
                MG_FIELD(tokenizer.tokenizer_type)),
      valued<C>("--vocab-file", "PATH", "GPT-2 vocab.json / encoder.json", MG_FIELD(tokenizer.vocab_file)),
      valued<C>("--merge-file", "PATH", "GPT-2 merges.txt / vocab.bpe", MG_FIELD(tokenizer.merge_file)),
      valued<C>("--load", "DIR", "a checkpoint directory (train --save); the model shape comes "
                "from it", MG_FIELD(load)),
      valued<C>("--load-params", "PATH", "parameters written by train --dump-final-params",
                MG_FIELD(load_params)),
      valued<C>("--prompt", "TEXT...", "prompts to continue", MG_FIELD(prompts)),
      valued<C>("--max-new-tokens", "N", "tokens to generate per prompt", MG_FIELD(max_new_tokens)),
      valued<C>("--top-k", "K", "sample from the K most likely tokens (1: greedy)", MG_FIELD(top_k)),
      valued<C>("--temperature", "T", "softmax temperature for sampling", MG_FIELD(temperature)),
      valued<C>("--seed", "N", "sampling seed", MG_FIELD(seed)),
  };
  return table;
}

#undef MG_FIELD

}  // namespace mg
