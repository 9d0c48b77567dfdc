// Blends (docs/reference/megatron-reference.md §2.6). --data-path "w1 p1 w2 p2 ..." (weights normalized) or
// "p1 p2 ..." (unweighted). A weighted blend of N samples draws from dataset i
// ceil(ceil(N w_i) * 1.005) samples' worth (the 0.5% surplus) and interleaves them with
// Megatron's deterministic greedy rule: sample t comes from the dataset maximizing
// w_i * max(t, 1) - count_i (ties to the lowest index). Unweighted blends use every dataset
// once, exhaustively, with weights proportional to their sizes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace mg {

struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // normalized; empty when unweighted
};

// Throws UsageError naming `flag` for an odd weight/prefix list or non-positive weights.
Blend parse_blend(const std::vector<std::string>& tokens, const std::string& flag);

// Megatron's build_blending_indices (weights) and build_exhaustive_blending_indices (sizes).
void build_blending_indices(const std::vector<double>& weights, int64_t n,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);
void build_exhaustive_blending_indices(const std::vector<int64_t>& sizes,
                                       std::vector<int16_t>& dataset_index,
                                       std::vector<int64_t>& dataset_sample_index);

class BlendedDataset : public SampleDataset {
 public:
  // Weighted (weights non-empty, size n) or exhaustive (weights empty: every sample of every
  // part). Throws UsageError if a part is asked for more samples than it holds.
  BlendedDataset(std::vector<const SampleDataset*> parts, const std::vector<double>& weights,
                 int64_t n);
  int64_t size() const override { return int64_t(dataset_index_.size()); }
  int64_t sample(int64_t i, int32_t* out) const override;
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<const SampleDataset*> parts_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

// Samples per constituent of a weighted blend of n: ceil(ceil(n * w) * (1 + surplus)).
int64_t blend_part_samples(int64_t n, double weight, double surplus = 0.005);
// The size of a weighted blend asked for n samples, as Megatron's builder sizes it: the sum
// over datasets of ceil(n * w_i) (so at least n; e.g. 48 at 0.3/0.7 gives 15 + 34 = 49).
int64_t blend_size(int64_t n, const std::vector<double>& weights);

}  // namespace mg
