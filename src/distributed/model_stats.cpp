#include "distributed/model_stats.h"

#include <cmath>

#include "comm/communicator.h"

namespace mg {

double params_l2_norm(ParamStore& store, ProcessGroups& g) {
  double local = 0;
  std::vector<float> v;
  for (const ParamSpec& p : store.layout().params()) {
    if (!counted_once(p, g.coord.tp)) continue;
    v.resize(size_t(p.numel()));
    store.read_param(p, v.data());
    for (float x : v) local += double(x) * double(x);
  }
  return std::sqrt(all_reduce_sum(*g.model_parallel, local));
}

int64_t count_zero_grads(ParamStore& store, ProcessGroups& g,
                         const std::vector<ops::Range>* shard) {
  std::vector<ops::Range> ranges;
  if (shard) {
    ranges = *shard;
  } else {
    for (const ParamSpec& p : store.layout().params())
      if (counted_once(p, g.coord.tp)) ranges.push_back({p.offset, p.numel()});
  }
  int64_t zeros = 0;
  std::vector<float> v;
  for (const ops::Range& r : ranges) {
    v.resize(size_t(r.n));
    ops::copy(v.data(), Device::CPU, store.grads() + r.offset, ops::device(),
              size_t(r.n) * sizeof(float));
    for (float x : v) zeros += x == 0.f;
  }
  // A double holds counts up to 2^53 exactly.
  return int64_t(all_reduce_sum(shard ? *g.world : *g.model_parallel, double(zeros)));
}

}  // namespace mg
