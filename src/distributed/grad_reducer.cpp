#include "distributed/grad_reducer.h"

#include "backend/ops.h"

namespace mg {

GradReducer::GradReducer(GPTModel& model, ProcessGroups& g, bool overlap)
    : model_(model), g_(g), overlap_(overlap) {
  const auto& buckets = model.layout().buckets();
  MG_CHECK(!buckets.empty(), "the grad reducer needs the bucketed buffer layout");
  total_.assign(buckets.size(), 0);
  for (const ParamSpec& p : model.layout().params()) {
    int b = 0;
    while (!(p.offset >= buckets[size_t(b)].first && p.offset < buckets[size_t(b)].second)) ++b;
    bucket_of_param_.push_back(b);
    ++total_[size_t(b)];
  }
  requests_.resize(buckets.size());
  if (overlap_) model_.set_grad_ready_hook([this](const std::vector<int>& p) { ready(p); });
}

GradReducer::~GradReducer() { model_.set_grad_ready_hook(nullptr); }

void GradReducer::arm() {
  armed_ = true;
  remaining_ = total_;
}

void GradReducer::ready(const std::vector<int>& params) {
  if (!armed_) return;
  for (int p : params) {
    const size_t b = size_t(bucket_of_param_[size_t(p)]);
    if (--remaining_[b] == 0) {
      launch(b);
      ++early_;
    }
  }
  for (auto& r : requests_)  // let launched transfers progress while backward goes on
    if (r) r->test();
}

void GradReducer::launch(size_t b) {
  const auto [begin, end] = model_.layout().buckets()[b];
  float* G = model_.grads() + begin;
  cpu::scale_inplace(G, 1.0f / float(g_.dp->size()), end - begin);
  requests_[b] = g_.dp->iall_reduce(G, end - begin);
}

void GradReducer::finish() {
  for (size_t b = 0; b < requests_.size(); ++b)
    if (!requests_[b]) launch(b);
  for (auto& r : requests_) {
    r->wait();
    r.reset();
  }
  armed_ = false;
}

}  // namespace mg
