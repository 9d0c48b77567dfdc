#include "data/dataset_builder.h"

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/mock_dataset.h"

namespace mg {

namespace {

const char* kSplitNames[3] = {"train", "valid", "test"};
const char* kSplitFlags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};

const SampleDataset* add(BuiltData& out, std::unique_ptr<SampleDataset> d) {
  out.owned.push_back(std::move(d));
  return out.owned.back().get();
}

// One split drawn from `parts` (source, [begin, end)) with the blend's weights.
const SampleDataset* build_split(
    BuiltData& out, const DataSpec& spec, int s,
    const std::vector<std::pair<const TokenSource*, std::string>>& srcs,
    const std::vector<std::pair<int64_t, int64_t>>& ranges, const std::vector<double>& weights) {
  const int64_t n = spec.num_samples[s];
  auto cfg = [&](size_t i, int64_t samples) {
    GPTDatasetConfig c;
    c.seq_length = spec.seq_length;
    c.num_samples = samples;
    c.seed = spec.seed;
    c.cache_dir = spec.cache_dir.empty() && srcs[i].second != "mock"
                      ? default_cache_dir(srcs[i].second)
                      : spec.cache_dir;
    c.cache_key = srcs[i].second;
    c.split_name = kSplitNames[s];
    c.write_cache = spec.write_cache;
    return c;
  };
  std::vector<const SampleDataset*> parts;
  for (size_t i = 0; i < srcs.size(); ++i) {
    MG_USER_CHECK(ranges[i].second > ranges[i].first, "'", srcs[i].second, "' has no ",
                  kSplitNames[s], " sequences under --split '", spec.split, "'");
    const int64_t samples = srcs.size() == 1  ? n
                            : weights.empty() ? 0
                                              : blend_part_samples(n, weights[i]);
    parts.push_back(add(out, std::make_unique<GPTDataset>(*srcs[i].first, ranges[i].first,
                                                          ranges[i].second, cfg(i, samples))));
  }
  if (parts.size() == 1) return parts[0];
  auto blend = std::make_unique<BlendedDataset>(parts, weights,
                                                weights.empty() ? n : blend_size(n, weights));
  MG_USER_CHECK(blend->size() >= n, "the unweighted blend holds ", blend->size(), " ",
                kSplitNames[s], " samples, fewer than the ", n,
                " needed; add data, weight the blend, or lower --train-iters");
  return add(out, std::move(blend));
}

}  // namespace

std::string default_cache_dir(const std::string& prefix) {
  return prefix + "/cache/GPTDataset_indices";
}

bool split_built(const DataSpec& spec, int s) {
  if (spec.num_samples[size_t(s)] == 0) return false;
  if (spec.mock || !spec.data_path.empty()) return split_weights(spec.split)[size_t(s)] > 0.0;
  return s != 2 || !spec.split_paths[2].empty();
}

BuiltData build_datasets(const DataSpec& spec) {
  BuiltData out;
  if (spec.mock || !spec.data_path.empty()) {
    std::vector<std::pair<const TokenSource*, std::string>> srcs;
    std::vector<double> weights;
    if (spec.mock) {
      out.sources.push_back(std::make_unique<MockTokenSource>(spec.mock_vocab_size, spec.mock_eod));
      srcs.push_back({out.sources.back().get(), "mock"});
    } else {
      const Blend b = parse_blend(spec.data_path, "--data-path");
      weights = b.weights;
      for (const std::string& p : b.prefixes) {
        out.sources.push_back(std::make_unique<IndexedDataset>(p, spec.vocab_size));
        srcs.push_back({out.sources.back().get(), p});
      }
    }
    for (int s = 0; s < 3; ++s) {
      if (!split_built(spec, s)) continue;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      for (auto& src : srcs)
        ranges.push_back(split_ranges(spec.split, src.first->num_sequences())[s]);
      out.split[s] = build_split(out, spec, s, srcs, ranges, weights);
    }
    return out;
  }
  for (int s = 0; s < 3; ++s) {
    if (!split_built(spec, s)) continue;
    MG_USER_CHECK(!spec.split_paths[s].empty(), kSplitFlags[s], " is needed (the run uses the ",
                  kSplitNames[s], " split)");
    const Blend b = parse_blend(spec.split_paths[s], kSplitFlags[s]);
    std::vector<std::pair<const TokenSource*, std::string>> srcs;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const std::string& p : b.prefixes) {
      out.sources.push_back(std::make_unique<IndexedDataset>(p, spec.vocab_size));
      srcs.push_back({out.sources.back().get(), p});
      ranges.push_back({0, out.sources.back()->num_sequences()});
    }
    out.split[s] = build_split(out, spec, s, srcs, ranges, b.weights);
  }
  return out;
}

}  // namespace mg
