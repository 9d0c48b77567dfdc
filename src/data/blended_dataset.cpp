#include "data/blended_dataset.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace mg {

Blend parse_blend(const std::vector<std::string>& tokens, const std::string& flag) {
  Blend b;
  MG_USER_CHECK(!tokens.empty(), flag, " needs at least one dataset prefix");
  auto is_number = [](const std::string& s) {
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    return !s.empty() && end && *end == '\0';
  };
  bool weighted = tokens.size() % 2 == 0;
  for (size_t i = 0; weighted && i < tokens.size(); i += 2) weighted = is_number(tokens[i]);
  const size_t datasets = weighted ? tokens.size() / 2 : tokens.size();
  MG_USER_CHECK(datasets < 32768, flag, " blends ", datasets,
                " datasets; at most 32767 are supported (Megatron's int16 blend index)");
  if (!weighted) {
    b.prefixes = tokens;
    return b;
  }
  double sum = 0;
  for (size_t i = 0; i < tokens.size(); i += 2) {
    const double w = std::strtod(tokens[i].c_str(), nullptr);
    // NaN fails `w > 0`; "inf" or "1e999" (strtod's HUGE_VAL) would make every weight NaN.
    MG_USER_CHECK(w > 0 && std::isfinite(w), flag, ": weight ", tokens[i], " for '", tokens[i + 1],
                  "' must be a finite positive number");
    b.weights.push_back(w);
    b.prefixes.push_back(tokens[i + 1]);
    sum += w;
  }
  MG_USER_CHECK(std::isfinite(sum), flag, ": the weights sum past the double range; scale them");
  for (double& w : b.weights) w /= sum;
  return b;
}

void build_blending_indices(const std::vector<double>& weights, int64_t n,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  std::vector<int64_t> count(weights.size(), 0);
  dataset_index.resize(size_t(n));
  dataset_sample_index.resize(size_t(n));
  for (int64_t t = 0; t < n; ++t) {
    const double steps = std::max(double(t), 1.0);
    size_t best = 0;
    double best_err = weights[0] * steps - double(count[0]);
    for (size_t i = 1; i < weights.size(); ++i) {
      const double err = weights[i] * steps - double(count[i]);
      if (err > best_err) {
        best_err = err;
        best = i;
      }
    }
    dataset_index[size_t(t)] = int16_t(best);
    dataset_sample_index[size_t(t)] = count[best]++;
  }
}

void build_exhaustive_blending_indices(const std::vector<int64_t>& sizes,
                                       std::vector<int16_t>& dataset_index,
                                       std::vector<int64_t>& dataset_sample_index) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<double> weights;
  for (int64_t s : sizes) weights.push_back(double(s) / double(total));
  std::vector<int64_t> count(sizes.size(), 0);
  dataset_index.clear();
  dataset_sample_index.clear();
  for (int64_t t = 0; t < total; ++t) {
    const double steps = std::max(double(t), 1.0);
    int best = -1;
    double best_err = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (count[i] >= sizes[i]) continue;
      const double err = weights[i] * steps - double(count[i]);
      if (best < 0 || err > best_err) {
        best_err = err;
        best = int(i);
      }
    }
    dataset_index.push_back(int16_t(best));
    dataset_sample_index.push_back(count[size_t(best)]++);
  }
}

int64_t blend_part_samples(int64_t n, double weight, double surplus) {
  return int64_t(std::ceil(std::ceil(double(n) * weight) * (1.0 + surplus)));
}

int64_t blend_size(int64_t n, const std::vector<double>& weights) {
  int64_t total = 0;
  for (double w : weights) total += blend_part_samples(n, w, 0.0);
  return total;
}

BlendedDataset::BlendedDataset(std::vector<const SampleDataset*> parts,
                               const std::vector<double>& weights, int64_t n)
    : parts_(std::move(parts)) {
  MG_CHECK(parts_.size() < 32768, "too many datasets in a blend");
  if (weights.empty()) {
    std::vector<int64_t> sizes;
    for (const SampleDataset* p : parts_) sizes.push_back(p->size());
    build_exhaustive_blending_indices(sizes, dataset_index_, dataset_sample_index_);
  } else {
    MG_CHECK(weights.size() == parts_.size(), "one weight per dataset");
    build_blending_indices(weights, n, dataset_index_, dataset_sample_index_);
    std::vector<int64_t> need(parts_.size(), 0);
    for (size_t t = 0; t < dataset_index_.size(); ++t)
      need[size_t(dataset_index_[t])] = dataset_sample_index_[t] + 1;
    for (size_t i = 0; i < parts_.size(); ++i)
      MG_USER_CHECK(need[i] <= parts_[i]->size(), "the blend needs ", need[i],
                    " samples from dataset ", i, " but it holds ", parts_[i]->size(),
                    "; raise the dataset size or lower --train-iters");
  }
}

int64_t BlendedDataset::sample(int64_t i, int32_t* out) const {
  MG_CHECK(i >= 0 && i < size(), "blended sample ", i, " outside ", size());
  return parts_[size_t(dataset_index_[size_t(i)])]->sample(dataset_sample_index_[size_t(i)], out);
}

}  // namespace mg
