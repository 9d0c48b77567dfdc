// Builds the train / valid / test sample datasets of a run from Megatron's data flags:
// --mock-data, --data-path (split per dataset by --split, blended), or
// --train-data-path / --valid-data-path / --test-data-path (whole datasets per split).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "data/blended_dataset.h"
#include "data/token_source.h"

namespace mg {

struct DataSpec {
  bool mock = false;
  int64_t mock_vocab_size = 0;
  int32_t mock_eod = 0;
  int64_t vocab_size = 0;  // token ids must lie in [0, vocab_size) (0: in the int32 range)
  std::vector<std::string> data_path;                   // blend split by `split`
  std::array<std::vector<std::string>, 3> split_paths;  // per-split blends
  std::string split = "969,30,1";
  int64_t seq_length = 0;
  uint32_t seed = 1234;
  std::array<int64_t, 3> num_samples = {0, 0, 0};  // requested per split (0: not built)
  std::string cache_dir;  // --data-cache-path; empty: each dataset's default_cache_dir
  bool write_cache = true;
};

struct BuiltData {
  std::vector<std::unique_ptr<TokenSource>> sources;
  std::vector<std::unique_ptr<SampleDataset>> owned;
  std::array<const SampleDataset*, 3> split = {nullptr, nullptr, nullptr};  // train, valid, test
};

// Whether build_datasets builds split s (0 train, 1 valid, 2 test): it is requested (samples
// > 0) and, as Megatron, its --split weight is not 0 (--mock-data, --data-path) or, for the
// test split in per-split mode, --test-data-path is given.
bool split_built(const DataSpec& spec, int s);

// The requested splits (split_built); the others stay nullptr.
BuiltData build_datasets(const DataSpec& spec);

// Where a dataset's index cache goes without --data-cache-path: Megatron's default,
// <prefix>/cache/GPTDataset_indices (a directory named after the dataset's prefix).
std::string default_cache_dir(const std::string& prefix);

}  // namespace mg
