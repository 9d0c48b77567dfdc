#include "distributed/grad_reducer.h"

#include <algorithm>

#include "backend/dispatch.h"

namespace mg {

BucketTracker::BucketTracker(const ParamLayout& layout) {
  const auto& buckets = layout.buckets();
  MG_CHECK(!buckets.empty(), "bucket tracking needs the bucketed buffer layout");
  total_.assign(buckets.size(), 0);
  for (const ParamSpec& p : layout.params()) {
    int b = 0;
    while (!(p.offset >= buckets[size_t(b)].first && p.offset < buckets[size_t(b)].second)) ++b;
    bucket_of_param_.push_back(b);
    ++total_[size_t(b)];
  }
}

std::vector<size_t> BucketTracker::ready(const std::vector<int>& params) {
  std::vector<size_t> done;
  if (!armed_) return done;
  for (int p : params) {
    const size_t b = size_t(bucket_of_param_[size_t(p)]);
    if (--remaining_[b] == 0) done.push_back(b);
  }
  return done;
}

std::vector<size_t> BucketTracker::buckets_of(const std::vector<int>& params) const {
  std::vector<size_t> out;
  for (int p : params) {
    const size_t b = size_t(bucket_of_param_[size_t(p)]);
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  }
  return out;
}

GradReducer::GradReducer(ParamStore& store, ProcessGroups& g, bool overlap, DType reduce_dtype)
    : store_(store), g_(g), overlap_(overlap), reduce_dtype_(reduce_dtype),
      tracker_(store.layout()) {
  check_reducible(reduce_dtype);
  requests_.resize(store.layout().buckets().size());
  if (reduce_dtype_ == DType::BF16)
    for (const auto& [begin, end] : store.layout().buckets())
      bf16_.emplace_back(Shape{end - begin}, DType::BF16, ops::device());
  if (overlap_) store_.set_grad_ready_hook([this](const std::vector<int>& p) { ready(p); });
}

GradReducer::~GradReducer() { store_.set_grad_ready_hook(nullptr); }

void GradReducer::arm() { tracker_.arm(); }

void GradReducer::ready(const std::vector<int>& params) {
  for (size_t b : tracker_.ready(params)) {
    launch(b);
    ++early_;
  }
  for (auto& r : requests_)  // let launched transfers progress while backward goes on
    if (r) r->test();
}

void GradReducer::launch(size_t b) {
  const auto [begin, end] = store_.layout().buckets()[b];
  float* G = store_.grads() + begin;
  ops::scale_inplace(G, 1.0f / float(g_.grid.dp), end - begin);  // a sum over CP
  if (reduce_dtype_ == DType::BF16) {
    ops::cast_from_f32(bf16_[b].raw(), DType::BF16, G, end - begin);
    requests_[b] = group(b).iall_reduce(bf16_[b].raw(), end - begin, DType::BF16);
  } else {
    requests_[b] = group(b).iall_reduce(G, end - begin);
  }
}

void GradReducer::finish() {
  for (size_t b = 0; b < requests_.size(); ++b)
    if (!requests_[b]) launch(b);
  const auto& buckets = store_.layout().buckets();
  for (size_t b = 0; b < requests_.size(); ++b) {
    requests_[b]->wait();
    requests_[b].reset();
    if (reduce_dtype_ == DType::BF16)
      ops::cast_to_f32(store_.grads() + buckets[b].first, bf16_[b].raw(), DType::BF16,
                       buckets[b].second - buckets[b].first);
  }
  tracker_.disarm();
}

}  // namespace mg
