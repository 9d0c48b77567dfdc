#include "distributed/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

#include "backend/dispatch.h"
#include "core/timers.h"

namespace mg {

std::pair<int64_t, int64_t> bucket_shard(std::pair<int64_t, int64_t> bucket, int64_t dp,
                                         int64_t d) {
  const auto [begin, end] = bucket;
  MG_CHECK((end - begin) % dp == 0, "bucket not divisible by DP");
  const int64_t lo = begin + d * (end - begin) / dp;
  return {lo, lo + (end - begin) / dp};
}

int64_t owned_param_elements(const ParamLayout& layout, std::pair<int64_t, int64_t> shard) {
  int64_t owned = 0;
  for (const ParamSpec& p : layout.params())
    owned += std::max<int64_t>(0, std::min(shard.second, p.offset + p.numel()) -
                                      std::max(shard.first, p.offset));
  return owned;
}

DistributedOptimizer::DistributedOptimizer(ParamStore& store, ProcessGroups& g,
                                           const OptimizerConfig& cfg, bool overlap_grad_reduce,
                                           bool overlap_param_gather, DType grad_reduce_dtype)
    : store_(store), g_(g), tracker_(store.layout()), overlap_grad_(overlap_grad_reduce),
      overlap_params_(overlap_param_gather), grad_dtype_(grad_reduce_dtype) {
  check_reducible(grad_dtype_);
  const ParamLayout& layout = store.layout();
  for (size_t bi = 0; bi < layout.buckets().size(); ++bi) {
    const auto [lo, hi] = bucket_shard(layout.buckets()[bi], group(bi).size(), group(bi).rank());
    for (const ParamSpec& p : layout.params()) {
      const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel());
      if (a >= b) continue;
      owned_runs_.push_back({a, b - a, p.traits.weight_decay, p.traits.embedding_or_output});
      owned_ += b - a;
      if (counted_once(p)) counted_.push_back({a, b - a});
    }
  }
  std::sort(owned_runs_.begin(), owned_runs_.end(),
            [](const ParamRun& x, const ParamRun& y) { return x.offset < y.offset; });
  optim_ = std::make_unique<Optimizer>(owned_runs_, cfg, store.dtype(), store.param_data());
  const auto& buckets = layout.buckets();
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    const auto [begin, end] = buckets[bi];
    const int64_t dp = group(bi).size();
    grad_shard_.emplace_back(Shape{(end - begin) / dp}, grad_dtype_, ops::device());
    param_shard_.emplace_back(Shape{(end - begin) / dp}, store.dtype(), ops::device());
    if (grad_dtype_ == DType::BF16)
      grad_bf16_.emplace_back(Shape{end - begin}, DType::BF16, ops::device());
  }
  grad_req_.resize(buckets.size());
  param_req_.resize(buckets.size());
  if (overlap_grad_)
    store_.set_grad_ready_hook([this](const std::vector<int>& params) {
      for (size_t b : tracker_.ready(params)) {
        launch_reduce_scatter(b);
        ++early_;
      }
      for (auto& r : grad_req_)
        if (r) r->test();
    });
  if (overlap_params_)
    store_.set_params_needed_hook([this](const std::vector<int>& params) {
      for (size_t b : tracker_.buckets_of(params))
        if (param_req_[b]) {
          param_req_[b]->wait();
          param_req_[b].reset();
        }
    });
}

DistributedOptimizer::~DistributedOptimizer() {
  store_.set_grad_ready_hook(nullptr);
  store_.set_params_needed_hook(nullptr);
}

void DistributedOptimizer::launch_reduce_scatter(size_t b) {
  const auto [begin, end] = store_.layout().buckets()[b];
  float* G = store_.grads() + begin;
  ops::scale_inplace(G, 1.0f / float(g_.grid.dp), end - begin);  // a sum over CP
  const void* in = G;
  if (grad_dtype_ == DType::BF16) {
    ops::cast_from_f32(grad_bf16_[b].raw(), DType::BF16, G, end - begin);
    in = grad_bf16_[b].raw();
  }
  grad_req_[b] =
      group(b).ireduce_scatter(in, grad_shard_[b].raw(), grad_shard_[b].numel(), grad_dtype_);
}

// Every bucket goes through the same non-blocking collective whether or not it started early,
// so overlapping does not change a bit of the result.
void DistributedOptimizer::reduce_grads() {
  float* G = store_.grads();
  const auto& buckets = store_.layout().buckets();
  for (size_t b = 0; b < buckets.size(); ++b)
    if (!grad_req_[b]) launch_reduce_scatter(b);
  for (size_t b = 0; b < buckets.size(); ++b) {
    grad_req_[b]->wait();
    grad_req_[b].reset();
    const Tensor& shard = grad_shard_[b];
    float* owned = G + buckets[b].first + group(b).rank() * shard.numel();
    if (grad_dtype_ == DType::BF16)
      ops::cast_to_f32(owned, shard.raw(), DType::BF16, shard.numel());
    else ops::copy(owned, ops::device(), shard.raw(), ops::device(), shard.nbytes());
  }
  tracker_.disarm();
}

void DistributedOptimizer::wait_params() {
  timers::Scope timer(timers::kParamsAllGather);
  for (auto& r : param_req_)
    if (r) {
      r->wait();
      r.reset();
    }
}

double DistributedOptimizer::grad_norm() {
  const double local =
      ops::sum_squares_ranges(store_.grads(), counted_.data(), int64_t(counted_.size()));
  return std::sqrt(all_reduce_sum(*g_.world, local));
}

void DistributedOptimizer::step(float lr, float wd, double grad_norm, float decoupled_lr) {
  optim_->step(store_.param_data(), store_.grads(), lr, wd, grad_norm, decoupled_lr);
  char* P = static_cast<char*>(store_.param_data());
  const DType t = store_.dtype();
  const int64_t esize = int64_t(dtype_size(t));
  const auto& buckets = store_.layout().buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Tensor& shard = param_shard_[b];
    const int64_t n = shard.numel(), d = group(b).rank();
    char* bucket = P + buckets[b].first * esize;
    ops::copy(shard.raw(), ops::device(), bucket + d * n * esize, ops::device(), shard.nbytes());
    param_req_[b] = group(b).iall_gather(shard.raw(), bucket, n, t);
  }
  if (!overlap_params_) wait_params();
}

}  // namespace mg
