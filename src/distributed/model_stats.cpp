#include "distributed/model_stats.h"

#include <cmath>

#include "comm/communicator.h"

namespace mg {

// Experts differ across EP ranks (and expert-TP shards): their part of a sum is summed over
// their own model-parallel ranks (ProcessGroups::model_sum).
double params_l2_norm(ParamStore& store, ProcessGroups& g) {
  double dense = 0, experts = 0;
  std::vector<float> v;
  for (const ParamSpec& p : store.layout().params()) {
    if (!counted_once(p)) continue;
    v.resize(size_t(p.numel()));
    store.read_param(p, v.data());
    double& sum = p.sharding.expert >= 0 ? experts : dense;
    for (float x : v) sum += double(x) * double(x);
  }
  return std::sqrt(g.model_sum(dense, experts));
}

int64_t count_zero_grads(ParamStore& store, ProcessGroups& g,
                         const std::vector<ops::Range>* shard) {
  std::vector<ops::Range> ranges, expert_ranges;
  if (shard) {
    ranges = *shard;
  } else {
    for (const ParamSpec& p : store.layout().params())
      if (counted_once(p))
        (p.sharding.expert >= 0 ? expert_ranges : ranges).push_back({p.offset, p.numel()});
  }
  auto zeros_in = [&](const std::vector<ops::Range>& rs) {
    int64_t zeros = 0;
    std::vector<float> v;
    for (const ops::Range& r : rs) {
      v.resize(size_t(r.n));
      ops::copy(v.data(), Device::CPU, store.grads() + r.offset, ops::device(),
                size_t(r.n) * sizeof(float));
      for (float x : v) zeros += x == 0.f;
    }
    return double(zeros);
  };
  // A double holds counts up to 2^53 exactly. A shard of the distributed optimizer counts
  // each element once over the world.
  if (shard) return int64_t(all_reduce_sum(*g.world, zeros_in(ranges)));
  return int64_t(g.model_sum(zeros_in(ranges), zeros_in(expert_ranges)));
}

}  // namespace mg
