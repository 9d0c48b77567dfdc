// The tokenizer flags of `megatron preprocess`, `train` and `generate` (Megatron's names), listed
// once. --vocab-size is not among them: train and generate take it as a model field, preprocess
// as its own flag.
// The option table keeps its hand layout: clang-format 14 takes the accessors' `C& c` for a
// product and breaks the rows apart.
// clang-format off
#pragma once
#include <vector>

#include "cli/option_table.h"
#include "tokenizer/tokenizer.h"

namespace mg {

template <typename Config, typename TokenizerOf>
std::vector<Option<Config>> tokenizer_options(TokenizerOf tok) {
  using C = Config;
  return {
      valued<C>("--tokenizer-type", "NAME", kTokenizerTypesHelp,
                [tok](C& c) -> auto& { return tok(c).tokenizer_type; }),
      valued<C>("--vocab-file", "PATH", "GPT2BPETokenizer: vocab.json / encoder.json",
                [tok](C& c) -> auto& { return tok(c).vocab_file; }),
      valued<C>("--merge-file", "PATH", "GPT2BPETokenizer: merges.txt / vocab.bpe",
                [tok](C& c) -> auto& { return tok(c).merge_file; }),
      valued<C>("--tokenizer-model", "PATH",
                "HuggingFaceTokenizer: the directory with tokenizer.json; TikTokenizer: the "
                "vocabulary file; SentencePiece types: tokenizer.model",
                [tok](C& c) -> auto& { return tok(c).tokenizer_model; }),
      valued<C>("--vocab-extra-ids", "N",
                "SentencePieceTokenizer: add N <extra_id_i> special tokens (T5's sentinels)",
                [tok](C& c) -> auto& { return tok(c).vocab_extra_ids; }),
      valued<C>("--tiktoken-pattern", "v1|v2", "TikTokenizer: the pre-tokenizer pattern",
                [tok](C& c) -> auto& { return tok(c).tiktoken_pattern; }),
      valued<C>("--tiktoken-num-special-tokens", "N",
                "TikTokenizer: ids reserved for special tokens before the vocabulary",
                [tok](C& c) -> auto& { return tok(c).tiktoken_num_special_tokens; }),
      valued<C>("--tiktoken-special-tokens", "TOKEN...",
                "TikTokenizer: the named special tokens (first ids)",
                [tok](C& c) -> auto& { return tok(c).tiktoken_special_tokens; }),
  };
}

}  // namespace mg
// clang-format on
