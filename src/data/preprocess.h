// `megatron preprocess`: JSON lines -> Megatron's <prefix>_<key>_document.bin/.idx, tokenized by
// --workers threads in input order, streaming (bounded memory), written under temporary names
// and renamed only when complete. Megatron's document rules: a key's value is one text (or a
// list of sentence texts); empty sentences are dropped; --append-eod adds EOD to the last
// sentence of a non-empty document. --partitions N tokenizes N slices of the input at once and
// merges them, as Megatron does. Also `megatron merge-datasets` (Megatron's add_index).
#pragma once
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mg {

struct PreprocessConfig {
  std::string input;                              // --input: a .jsonl file
  std::vector<std::string> json_keys = {"text"};  // --json-keys
  std::string output_prefix;                      // --output-prefix
  TokenizerConfig tokenizer;    // --tokenizer-type, --vocab-file, --merge-file, --vocab-size
  bool append_eod = false;      // --append-eod
  int workers = 1;              // --workers: tokenizer threads
  bool skip_bad_lines = false;  // --skip-bad-lines: skip malformed JSON (counted)
  int partitions = 1;           // --partitions: input slices tokenized at once
  bool keep_sequential_samples = false;  // --keep-sequential-samples: slices of consecutive lines
  bool keep_newlines = false;    // --keep-newlines: accepted; no effect (no sentence splitting)
  bool split_sentences = false;  // --split-sentences: refused (needs NLTK's punkt)
  int64_t log_interval = 1000;   // --log-interval: a progress line every N documents
  void validate() const;
};

struct PreprocessSummary {
  int64_t documents = 0, bad_lines = 0, tokens = 0, bytes = 0;
  double seconds = 0;          // tokenizing and writing (after the tokenizer is loaded)
  double startup_seconds = 0;  // loading the tokenizer (Megatron's "Time to startup")
};

PreprocessSummary run_preprocess(const PreprocessConfig& cfg);

struct MergeConfig {
  std::string input;          // --input: directory of .bin/.idx pairs (merged in name order)
  std::string output_prefix;  // --output-prefix
};
// Returns the number of datasets merged.
int run_merge_datasets(const MergeConfig& cfg);

}  // namespace mg
