#include "distributed/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/ops.h"

namespace mg {

DistributedOptimizer::DistributedOptimizer(GPTModel& model, ProcessGroups& g,
                                           const OptimizerConfig& cfg)
    : model_(model), g_(g) {
  const ParamLayout& layout = model.layout();
  const int64_t dp = g.dp->size(), d = g.dp->rank();
  for (const auto& [begin, end] : layout.buckets()) {
    MG_CHECK((end - begin) % dp == 0, "bucket not divisible by DP");
    const int64_t lo = begin + d * (end - begin) / dp, hi = lo + (end - begin) / dp;
    for (const ParamSpec& p : layout.params()) {
      const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel());
      if (a >= b) continue;
      owned_runs_.push_back({a, b - a, p.weight_decay});
      owned_ += b - a;
      if (!p.tied_copy && (p.tp_split_dim >= 0 || g.coord.tp == 0))
        counted_runs_.push_back({a, b - a, p.weight_decay});
    }
  }
  std::sort(owned_runs_.begin(), owned_runs_.end(),
            [](const ParamRun& x, const ParamRun& y) { return x.offset < y.offset; });
  optim_ = std::make_unique<Optimizer>(owned_runs_, cfg);
}

void DistributedOptimizer::reduce_scatter_grads() {
  float* G = model_.grads();
  const int64_t dp = g_.dp->size(), d = g_.dp->rank();
  for (const auto& [begin, end] : model_.layout().buckets()) {
    const int64_t n = (end - begin) / dp;
    if (dp == 1) continue;
    cpu::scale_inplace(G + begin, 1.0f / float(dp), end - begin);
    shard_.resize(size_t(n));
    g_.dp->reduce_scatter(G + begin, shard_.data(), n);
    std::memcpy(G + begin + d * n, shard_.data(), size_t(n) * sizeof(float));
  }
}

double DistributedOptimizer::grad_norm() {
  double local = 0;
  for (const ParamRun& r : counted_runs_) local += cpu::sum_squares(model_.grads() + r.offset, r.numel);
  float parts[2] = {float(local), float(local - double(float(local)))};
  g_.world->all_reduce(parts, 2);
  return std::sqrt(double(parts[0]) + double(parts[1]));
}

void DistributedOptimizer::step(float lr, float wd, double grad_norm) {
  optim_->step(model_.params(), model_.grads(), lr, wd, grad_norm);
  float* P = model_.params();
  const int64_t dp = g_.dp->size(), d = g_.dp->rank();
  if (dp == 1) return;
  for (const auto& [begin, end] : model_.layout().buckets()) {
    const int64_t n = (end - begin) / dp;
    shard_.assign(P + begin + d * n, P + begin + (d + 1) * n);
    g_.dp->all_gather(shard_.data(), P + begin, n);
  }
}

}  // namespace mg
