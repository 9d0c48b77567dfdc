// Turns dataset samples into model micro-batches the way Megatron's get_batch does: tokens are
// the first S of the S+1 sample tokens, labels the last S; the loss mask drops padded labels
// and, with --eod-mask-loss, positions whose input token is EOD (as Megatron); position ids
// count from 0 (restarting after each EOD with --reset-position-ids).
// Megatron's sampler walks global sample ids from consumed_samples in micro-steps of
// micro_batch x DP samples; DP rank r takes slice r of each micro-step.
#pragma once
#include <vector>

#include "core/cp_layout.h"
#include "data/gpt_dataset.h"

namespace mg {

struct BatchOptions {
  int32_t eod = 0;                    // the tokenizer's end-of-document id
  bool eod_mask_loss = false;         // --eod-mask-loss
  bool reset_position_ids = false;    // --reset-position-ids
  bool reset_attention_mask = false;  // --reset-attention-mask
};

struct Batch {
  int64_t B = 0, S = 0;
  std::vector<int32_t> tokens, labels, position_ids;  // (B, S)
  std::vector<float> loss_mask;                       // (B, S)
  // With --reset-attention-mask: the first position each token may attend to (just after the
  // last EOD before it); empty otherwise.
  std::vector<int32_t> attention_start;  // (B, S)
};

// Samples [first, first + B) of the dataset (wrapping at its end, as a cyclic iterator does).
Batch make_batch(const SampleDataset& ds, int64_t first, int64_t B, int64_t S,
                 const BatchOptions& opt);

// Context parallelism: the CP rank's tokens of every (B, S) array of b, (B, S / CP) in
// cp.position order (chunks r and 2 CP - 1 - r). Values are unchanged: position ids and
// attention starts stay global positions. Every CP rank of a DP replica slices the same batch.
Batch slice_for_context_parallel(const Batch& b, const CpLayout& cp);

// Global sample id of the first sample this DP rank reads in micro-step `micro` of the
// iteration that starts at `consumed` samples.
inline int64_t micro_batch_start(int64_t consumed, int64_t micro, int64_t micro_batch_size,
                                 int64_t dp_size, int64_t dp_rank) {
  return consumed + micro * micro_batch_size * dp_size + dp_rank * micro_batch_size;
}

}  // namespace mg
