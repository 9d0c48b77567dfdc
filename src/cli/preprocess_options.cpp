// `megatron preprocess` and `megatron merge-datasets` flags (Megatron's tools/preprocess_data.py
// and tools/merge_datasets.py names).
// The option table keeps its hand layout: clang-format 14 takes the accessors' `C& c` for a
// product and breaks the rows apart.
// clang-format off
#include "cli/commands.h"
#include "cli/compat_flags.h"
#include "cli/tokenizer_options.h"

namespace mg {

const std::vector<Option<PreprocessConfig>>& preprocess_options() {
  using C = PreprocessConfig;
  static const std::vector<Option<C>> table = [] {
    std::vector<Option<C>> t = {
      valued<C>("--input", "FILE", "JSON-lines input, one document per line",
                [](C& c) -> auto& { return c.input; }),
      valued<C>("--json-keys", "KEY...", "keys to extract (one output pair per key)",
                [](C& c) -> auto& { return c.json_keys; }),
      valued<C>("--output-prefix", "P", "writes P_<key>_document.bin/.idx",
                [](C& c) -> auto& { return c.output_prefix; }),
      valued<C>("--vocab-size", "V",
                "NullTokenizer: the vocabulary size; TikTokenizer: the cap (default 2^17)",
                [](C& c) -> auto& { return c.tokenizer.vocab_size; }),
      on_off<C>("--append-eod", "append the end-of-document token to every document",
                [](C& c) -> auto& { return c.append_eod; }),
      valued<C>("--workers", "N", "tokenizer threads", [](C& c) -> auto& { return c.workers; }),
      on_off<C>("--skip-bad-lines", "skip malformed JSON lines (counted) instead of stopping",
                [](C& c) -> auto& { return c.skip_bad_lines; }),
      valued<C>("--partitions", "N",
                "tokenize N slices of the input at once (--workers / N threads each), writing "
                "P_<i>_<key>_document.bin/.idx, merged into P_<key>_document.bin/.idx",
                [](C& c) -> auto& { return c.partitions; }),
      on_off<C>("--keep-sequential-samples",
                "with --partitions: slices of consecutive lines (the merged output then equals "
                "--partitions 1), not lines dealt round-robin",
                [](C& c) -> auto& { return c.keep_sequential_samples; }),
      on_off<C>("--split-sentences", "Megatron's NLTK sentence splitting: not implemented (refused)",
                [](C& c) -> auto& { return c.split_sentences; }),
      on_off<C>("--keep-newlines",
                "Megatron's flag for --split-sentences, which is not implemented: accepted, no "
                "effect (newlines inside a document are always kept and tokenized)",
                [](C& c) -> auto& { return c.keep_newlines; }),
      valued<C>("--log-interval", "N",
                "print 'Processed N documents (X docs/s, Y MB/s).' to stderr every N documents",
                [](C& c) -> auto& { return c.log_interval; }),
    };
    const auto tok = tokenizer_options<C>([](C& c) -> auto& { return c.tokenizer; });
    t.insert(t.end(), tok.begin(), tok.end());
    // tools/preprocess_data.py's other flags, as data.
    const auto compat = compat_options<C>("preprocess");
    t.insert(t.end(), compat.begin(), compat.end());
    return t;
  }();
  return table;
}

const std::vector<Option<MergeConfig>>& merge_options() {
  using C = MergeConfig;
  static const std::vector<Option<C>> table = {
      valued<C>("--input", "DIR", "directory of .bin/.idx pairs, merged in name order",
                [](C& c) -> auto& { return c.input; }),
      valued<C>("--output-prefix", "P", "writes P.bin/.idx",
                [](C& c) -> auto& { return c.output_prefix; }),
  };
  return table;
}

}  // namespace mg
// clang-format on
