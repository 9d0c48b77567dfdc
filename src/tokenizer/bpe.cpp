#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <queue>

namespace mg {

namespace {

struct Candidate {
  int32_t rank;
  int32_t left;               // position of the left symbol (merged symbols keep the left position)
  int32_t left_id, right_id;  // the pair as it was when queued
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

void BpeMerges::add(int32_t left, int32_t right, int32_t rank, int32_t result) {
  if (2 * (size_ + 1) > slots_.size()) {  // keep the table at most half full
    std::vector<Slot> old(std::max<size_t>(16, 2 * slots_.size()), Slot{kEmpty, {}});
    old.swap(slots_);
    shift_ = 64 - std::countr_zero(slots_.size());
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != kEmpty)
        add(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.merge.rank, s.merge.result);
  }
  const uint64_t k = key(left, right);
  size_t i = slot_of(k);
  while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & (slots_.size() - 1);
  if (slots_[i].key == kEmpty) ++size_;
  slots_[i] = Slot{k, Merge{rank, result}};
}

void BpeMerges::apply(std::vector<int32_t>& symbols) const {
  const int32_t n = int32_t(symbols.size());
  if (n < 2) return;
  if (n == 2) {  // the common short case without the heap
    if (const Merge* m = find(symbols[0], symbols[1])) symbols = {m->result};
    return;
  }
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = next[size_t(left)];
    if (right < 0) return;
    if (const Merge* m = find(symbols[size_t(left)], symbols[size_t(right)]))
      heap.push({m->rank, left, symbols[size_t(left)], symbols[size_t(right)]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  constexpr int32_t kGone = -1;
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[size_t(c.left)];
    // Stale: one side was merged away or changed since the pair was queued.
    if (symbols[size_t(c.left)] != c.left_id || right < 0 || symbols[size_t(right)] != c.right_id)
      continue;
    symbols[size_t(c.left)] = find(c.left_id, c.right_id)->result;
    symbols[size_t(right)] = kGone;
    next[size_t(c.left)] = next[size_t(right)];
    if (next[size_t(right)] >= 0) prev[size_t(next[size_t(right)])] = c.left;
    push(prev[size_t(c.left)]);
    push(c.left);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) symbols[out++] = symbols[size_t(i)];
  symbols.resize(out);
}

}  // namespace mg
