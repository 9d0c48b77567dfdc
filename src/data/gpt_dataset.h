// Megatron's GPTDataset sample order (megatron/core/datasets/gpt_dataset.py + helpers.cpp):
// a document index (the split's sequence ids repeated per epoch, shuffled with NumPy's legacy
// RandomState(seed); a thin final epoch shuffled separately), a sample index of
// (document-index position, token offset) pairs for samples of S+1 tokens overlapping by one,
// and a shuffled sample permutation. See docs/reference/megatron-reference.md §2.4-2.5.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace mg {

// Megatron's --split "a,b,c": the normalized train/valid/test weights (fewer than three are
// padded with zeros), and those weights turned into [begin, end) sequence ranges.
std::array<double, 3> split_weights(const std::string& split);
std::array<std::pair<int64_t, int64_t>, 3> split_ranges(const std::string& split,
                                                        int64_t num_sequences);

struct GPTDatasetConfig {
  int64_t seq_length = 0;   // S
  int64_t num_samples = 0;  // samples requested from this split (0: one epoch)
  uint32_t seed = 1234;     // --seed
  std::string cache_dir;    // --data-cache-path (empty: no cache)
  std::string cache_key;    // identifies the source and split in the cache description
  std::string split_name = "train";
  bool write_cache = true;  // false: only read (ranks other than 0)
};

// Anything that yields samples of S+1 tokens by index (a GPT dataset or a blend of them).
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;
  // Writes S+1 tokens of sample i into out; returns how many are real (the rest are padding,
  // which only the very last sample of a dataset can need).
  virtual int64_t sample(int64_t i, int32_t* out) const = 0;
};

class GPTDataset : public SampleDataset {
 public:
  // Uses sequences [begin, end) of source. With a cache directory, the three indices are read
  // from <hash>-GPTDataset-<split>-*.npy when present, else built (and written).
  GPTDataset(const TokenSource& source, int64_t begin, int64_t end, const GPTDatasetConfig& cfg);

  int64_t size() const override { return int64_t(shuffle_index_.size()); }
  int64_t num_epochs() const { return num_epochs_; }
  int64_t sample(int64_t i, int32_t* out) const override;
  bool loaded_from_cache() const { return loaded_; }
  // Cache file prefix "<dir>/<hash>-GPTDataset-<split>-" (empty without a cache dir).
  const std::string& cache_prefix() const { return cache_prefix_; }

  const std::vector<int32_t>& document_index() const { return document_index_; }
  const std::vector<int32_t>& sample_index() const { return sample_index_; }  // (M+1) x 2
  const std::vector<int32_t>& shuffle_index() const { return shuffle_index_; }

 private:
  const TokenSource& source_;
  GPTDatasetConfig cfg_;
  int64_t num_epochs_ = 1;
  std::vector<int32_t> document_index_;
  // int32 as Megatron stores them (a split of more than 2^31 samples or sequences is refused).
  std::vector<int32_t> sample_index_;
  std::vector<int32_t> shuffle_index_;
  std::string cache_prefix_;
  bool loaded_ = false;
};

}  // namespace mg
