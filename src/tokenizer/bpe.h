// The byte-pair-encoding merge loop shared by HuggingFaceTokenizer and TikTokenizer (Sennrich et
// al. 2016): repeatedly merge the adjacent pair of lowest rank, the leftmost among equals, until
// no pair has a rank. A min-heap of candidate pairs over a linked list of symbols makes a word of
// n symbols O(n log n) (a whole SentencePiece-style document is one word), where rescanning all
// pairs after each merge would be O(n^2).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mg {

class BpeMerges {
 public:
  struct Merge {
    int32_t rank;    // lower merges first
    int32_t result;  // the id of the merged symbol
  };
  // Registers (left, right) -> result; a pair given again keeps the later rank and result.
  void add(int32_t left, int32_t right, int32_t rank, int32_t result);
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(left, right);
    for (size_t i = slot_of(k);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

  // Merges `symbols` (ids) in place.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  // An open-addressing table (one cache line per lookup, where a node-based map takes two or
  // three): the lookups are most of the time of encoding a new word.
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // ids are >= 0, so no pair has this key
  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  size_t slot_of(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Slot> slots_;
  size_t size_ = 0;
  int shift_ = 64;
};

// The ids of pre-tokens seen before: words repeat, so most pieces skip the merge loop. Bounded
// (it stops growing at kMaxEntries); one per tokenizer instance (not thread-safe).
class BpeCache {
 public:
  const std::vector<int32_t>* find(std::string_view piece) const {
    auto it = map_.find(piece);
    return it == map_.end() ? nullptr : &it->second;
  }
  void insert(std::string_view piece, const std::vector<int32_t>& ids) {
    if (map_.size() < kMaxEntries) map_.emplace(std::string(piece), ids);
  }

 private:
  static constexpr size_t kMaxEntries = size_t(1) << 20;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map_;
};

}  // namespace mg
