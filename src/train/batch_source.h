// The trainer's data: the train/valid/test datasets of a run, sized as Megatron sizes its
// splits (train = iters x G; valid = (iters / eval_interval + 1) x eval_iters x G), and the
// micro-batches of one iteration on this DP rank (a prefetching loader for training, direct
// reads for validation), each cut to this CP rank's part of the sequence.
#pragma once
#include <cstdint>
#include <memory>

#include "data/batch.h"
#include "data/dataset_builder.h"
#include "data/loader.h"
#include "parallel/process_groups.h"
#include "pipeline/schedule.h"
#include "train/train_config.h"

namespace mg {

// Only the first and last pipeline stages read data (every stage with --reset-attention-mask,
// whose per-token attention starts every stage's attention needs). With --data-cache-path,
// world rank 0 builds and writes the indices first; the other ranks then load them. Sets eod
// to the tokenizer's end-of-document token.
BuiltData load_data(const TrainConfig& cfg, const ProcessGroups& g, int32_t& eod);

// Whether the run has split s (0 train, 1 valid, 2 test), alike on every rank, whether or not
// it reads data (data/dataset_builder.h).
bool split_built(const TrainConfig& cfg, int s);

// Micro-batch m of an iteration: the training loader's next batch, or a validation batch.
class BatchSource {
 public:
  // ds: this rank's split (nullptr on a middle pipeline stage). prefetch: read ahead with a
  // BatchLoader starting after `consumed` samples.
  BatchSource(const SampleDataset* ds, const TrainConfig& cfg, const ProcessGroups& g,
              const BatchOptions& opt, bool prefetch, int64_t consumed = 0);
  // The batches of the iteration that starts after `consumed` samples.
  BatchFn at(int64_t consumed);

 private:
  const SampleDataset* ds_;
  const TrainConfig& cfg_;
  int64_t dp_size_, dp_rank_;
  CpLayout cp_;  // this rank's tokens of each sequence (CP ranks read the same samples)
  BatchOptions opt_;
  std::unique_ptr<BatchLoader> loader_;
  std::vector<Batch> batches_;  // the micro-batches of the iteration at batches_consumed_
  int64_t batches_consumed_ = -1;
};

}  // namespace mg
