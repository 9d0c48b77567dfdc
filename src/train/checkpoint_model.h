// `train --load DIR` needs no model flags: when DIR holds a checkpoint, each model field whose
// flag the command line did not give comes from the checkpoint's model record (flags that were
// given are still checked against it when the checkpoint loads). A converted Hugging Face model
// therefore trains with `--load DIR` and the data, optimizer and layout flags alone.
#pragma once
#include <set>
#include <string>

#include "train/train_config.h"

namespace mg {

// Fills cfg.model from cfg.load's latest checkpoint for the fields whose flags are not in
// `given`. Returns whether there was a checkpoint to read.
bool model_from_checkpoint(TrainConfig& cfg, const std::set<std::string>& given);

// The vocabulary size to train with when a tokenizer of `tokenizer_vocab` tokens is given:
// the tokenizer's, except for a model taken from a checkpoint (and no --vocab-size), which
// keeps the checkpoint's when the tokenizer's is not larger (Qwen2's config.json has 151936
// rows for a 151646-token tokenizer); a larger tokenizer is a UsageError.
int64_t train_vocab_size(const TrainConfig& cfg, int64_t tokenizer_vocab, bool model_from_ckpt,
                         const std::set<std::string>& given);

}  // namespace mg
