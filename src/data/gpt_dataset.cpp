#include "data/gpt_dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <climits>
#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "data/npy.h"
#include "data/numpy_random.h"

#include <filesystem>

namespace mg {

namespace {
constexpr int64_t kExtraToken = 1;  // X: a sample is S + 1 tokens

// Document ids repeated `epochs` times, epoch-major, shuffled once.
std::vector<int32_t> build_document_index(int64_t begin, int64_t end, int64_t epochs,
                                          LegacyRandomState& rng) {
  std::vector<int32_t> idx;
  idx.reserve(size_t((end - begin) * epochs));
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t d = begin; d < end; ++d) idx.push_back(int32_t(d));
  rng.shuffle(idx);
  return idx;
}

std::vector<int32_t> build_shuffle_index(int64_t first, int64_t total, LegacyRandomState& rng) {
  std::vector<int32_t> head(static_cast<size_t>(first));
  std::vector<int32_t> tail(static_cast<size_t>(total - first));
  std::iota(head.begin(), head.end(), 0);
  std::iota(tail.begin(), tail.end(), first);
  rng.shuffle(head);
  if (!tail.empty()) {
    rng.shuffle(tail);
    head.insert(head.end(), tail.begin(), tail.end());
  }
  return head;
}

// Whether cached indices can drive sample() over `source` without a read outside a sequence:
// documents inside [begin, end); (document position, offset) pairs inside the document index,
// non-decreasing, each a valid start (offset <= length) and end (offset + X <= length) of its
// sequence; shuffle entries inside [0, M).
bool cached_indices_valid(const TokenSource& source, int64_t begin, int64_t end,
                          const std::vector<int32_t>& documents,
                          const std::vector<int32_t>& samples,
                          const std::vector<int32_t>& shuffle) {
  const int64_t M = int64_t(shuffle.size()), D = int64_t(documents.size());
  if (samples.size() != size_t(2 * (M + 1))) return false;
  for (int32_t doc : documents)
    if (doc < begin || doc >= end) return false;
  for (int64_t k = 0; k <= M; ++k) {
    const int64_t d = samples[size_t(2 * k)], o = samples[size_t(2 * k + 1)];
    if (d < 0 || d >= D) return false;
    const int64_t len = source.sequence_length(documents[size_t(d)]);
    if (k > 0 && (d < samples[size_t(2 * k - 2)] ||
                  (d == samples[size_t(2 * k - 2)] && o < samples[size_t(2 * k - 1)])))
      return false;
    if (k < M && (o < 0 || o > len)) return false;                              // a start
    if (k > 0 && (o + kExtraToken < 0 || o + kExtraToken > len)) return false;  // an end
  }
  for (int32_t j : shuffle)
    if (j < 0 || j >= M) return false;
  return true;
}
}  // namespace

std::array<double, 3> split_weights(const std::string& split) {
  // Megatron reads every run of digits and dots as a number (parse_and_normalize_split), so
  // the forms bash passes through unchanged -- '99,1,0' with its quotes, "969, 30, 1" with
  // spaces -- mean what they say. Fields are separated by commas and/or spaces; quotes around
  // the whole value or a field are ignored.
  std::string text;
  for (char c : split) text += (c == '\'' || c == '"') ? ' ' : c == ',' ? ' ' : c;
  std::vector<double> w;
  std::stringstream ss(text);
  for (std::string field; ss >> field;) {
    char* end = nullptr;
    const double v = std::strtod(field.c_str(), &end);
    MG_USER_CHECK(end && *end == '\0' && v >= 0 && std::isfinite(v), "--split '", split, "': '",
                  field, "' is not a finite non-negative number");
    w.push_back(v);
  }
  MG_USER_CHECK(!w.empty() && w.size() <= 3, "--split '", split,
                "' must hold 1 to 3 comma-separated weights, e.g. 969,30,1");
  w.resize(3, 0.0);
  const double sum = w[0] + w[1] + w[2];
  MG_USER_CHECK(sum > 0.0, "--split '", split, "' has weights summing to 0");
  return {w[0] / sum, w[1] / sum, w[2] / sum};
}

std::array<std::pair<int64_t, int64_t>, 3> split_ranges(const std::string& split,
                                                        int64_t num_sequences) {
  const std::array<double, 3> w = split_weights(split);
  std::array<std::pair<int64_t, int64_t>, 3> out;
  double lo = 0.0;
  for (int s = 0; s < 3; ++s) {
    const double hi = lo + w[s];
    // Python's round() is round-half-even, as nearbyint under the default rounding mode.
    out[s] = {int64_t(std::nearbyint(lo * double(num_sequences))),
              int64_t(std::nearbyint(hi * double(num_sequences)))};
    lo = hi;
  }
  return out;
}

GPTDataset::GPTDataset(const TokenSource& source, int64_t begin, int64_t end,
                       const GPTDatasetConfig& cfg)
    : source_(source), cfg_(cfg) {
  const int64_t S = cfg.seq_length, X = kExtraToken;
  MG_CHECK(S > 0 && begin < end && end <= source.num_sequences(), "bad dataset range [", begin,
           ", ", end, ")");
  std::string description;
  if (!cfg.cache_dir.empty()) {
    description = str_cat("{\"class\": \"GPTDataset\", \"dataset\": \"", cfg.cache_key,
                          "\", \"split\": \"", cfg.split_name, "\", \"range\": [", begin, ", ", end,
                          "], \"num_samples\": ", cfg.num_samples, ", \"sequence_length\": ", S,
                          ", \"random_seed\": ", cfg.seed, "}");
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the description
    for (unsigned char c : description) h = (h ^ c) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
    cache_prefix_ = (std::filesystem::path(cfg.cache_dir) /
                     (std::string(hex) + "-GPTDataset-" + cfg.split_name + "-"))
                        .string();
    if (std::filesystem::exists(cache_prefix_ + "shuffle_index.npy")) {
      document_index_ = read_npy(cache_prefix_ + "document_index.npy").as<int32_t>();
      sample_index_ = read_npy(cache_prefix_ + "sample_index.npy").as<int32_t>();
      shuffle_index_ = read_npy(cache_prefix_ + "shuffle_index.npy").as<int32_t>();
      MG_USER_CHECK(cached_indices_valid(source, begin, end, document_index_, sample_index_,
                                         shuffle_index_),
                    "index cache '", cache_prefix_,
                    "*.npy' does not match the dataset; "
                    "delete it to rebuild");
      loaded_ = true;
      return;
    }
    MG_CHECK(cfg.write_cache, "index cache ", cache_prefix_, "* missing on a reading rank");
  }
  int64_t tokens_per_epoch = 0;
  for (int64_t d = begin; d < end; ++d) tokens_per_epoch += source.sequence_length(d);
  MG_USER_CHECK(tokens_per_epoch > S + X, "the dataset split holds only ", tokens_per_epoch,
                " tokens, fewer than one sample of --seq-length ", S, " + 1");

  int64_t tokens = tokens_per_epoch;
  while (tokens < cfg.num_samples * S + X) {
    ++num_epochs_;
    tokens += tokens_per_epoch;
  }
  bool separate_final_epoch = false;
  if (num_epochs_ > 1) {
    const int64_t before = ((num_epochs_ - 1) * tokens_per_epoch - X) / S;
    const int64_t last = cfg.num_samples - before;
    const int64_t per_epoch = (tokens_per_epoch - X) / S;
    separate_final_epoch = last < int64_t(0.80 * double(per_epoch));
  }

  LegacyRandomState rng(cfg.seed);
  if (separate_final_epoch) {
    document_index_ = build_document_index(begin, end, num_epochs_ - 1, rng);
    const auto last = build_document_index(begin, end, 1, rng);
    document_index_.insert(document_index_.end(), last.begin(), last.end());
  } else {
    document_index_ = build_document_index(begin, end, num_epochs_, rng);
  }

  // Sample index (helpers.cpp build_sample_idx).
  const int64_t M = (num_epochs_ * tokens_per_epoch - X) / S;
  MG_USER_CHECK(M < INT32_MAX && int64_t(document_index_.size()) < INT32_MAX,
                "the dataset split yields ", M, " samples; more than 2^31 is not supported");
  sample_index_.assign(size_t(2 * (M + 1)), 0);
  int64_t doc_pos = 0, offset = 0;
  const int64_t num_docs = int64_t(document_index_.size());
  for (int64_t k = 1; k <= M; ++k) {
    int64_t remaining = S + X;
    while (remaining != 0) {
      const int64_t doc_len = source.sequence_length(document_index_[doc_pos]) - offset;
      remaining -= doc_len;
      if (remaining <= 0) {
        offset += remaining + doc_len - X;
        remaining = 0;
      } else {
        if (doc_pos == num_docs - 1) {
          offset = source.sequence_length(document_index_[doc_pos]) - X;
          break;
        }
        ++doc_pos;
        offset = 0;
      }
    }
    sample_index_[2 * k] = int32_t(doc_pos);
    sample_index_[2 * k + 1] = int32_t(offset);
  }

  const int64_t first = separate_final_epoch ? ((num_epochs_ - 1) * tokens_per_epoch - X) / S : M;
  shuffle_index_ = build_shuffle_index(first, M, rng);

  if (!cache_prefix_.empty()) {  // Megatron's dtypes: int32 indices, uint32 shuffle
    std::error_code ec;
    std::filesystem::create_directories(cfg.cache_dir, ec);
    MG_USER_CHECK(!ec, "index cache directory '", cfg.cache_dir,
                  "' (--data-cache-path; default "
                  "<prefix>/cache/GPTDataset_indices, as Megatron) cannot be created: ",
                  ec.message(), "; pass --data-cache-path DIR");
    std::ofstream(cache_prefix_ + "description.txt") << description << "\n";
    write_npy(cache_prefix_ + "document_index.npy", "<i4", {int64_t(document_index_.size())},
              document_index_.data(), document_index_.size() * 4);
    write_npy(cache_prefix_ + "sample_index.npy", "<i4", {M + 1, 2}, sample_index_.data(),
              sample_index_.size() * 4);
    // Non-negative int32 values are their own uint32 bytes: Megatron's uint32 shuffle file.
    write_npy(cache_prefix_ + "shuffle_index.npy", "<u4", {M}, shuffle_index_.data(),
              shuffle_index_.size() * 4);
  }
}

int64_t GPTDataset::sample(int64_t i, int32_t* out) const {
  const int64_t X = kExtraToken, want = cfg_.seq_length + X;
  MG_CHECK(i >= 0 && i < size(), "sample ", i, " outside dataset of ", size());
  const int64_t j = shuffle_index_[i];
  const int64_t d0 = sample_index_[2 * j], o0 = sample_index_[2 * j + 1];
  const int64_t d1 = sample_index_[2 * j + 2], o1 = sample_index_[2 * j + 3];
  int64_t n = 0;
  for (int64_t d = d0; d <= d1; ++d) {
    const int64_t seq = document_index_[d];
    const int64_t from = d == d0 ? o0 : 0;
    const int64_t to = d == d1 ? o1 + X : source_.sequence_length(seq);
    const int64_t take = std::min(to - from, want - n);
    source_.get(seq, from, take, out + n);
    n += take;
  }
  for (int64_t k = n; k < want; ++k) out[k] = 0;
  return n;
}

}  // namespace mg
