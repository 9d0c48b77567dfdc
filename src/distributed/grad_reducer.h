// Data-parallel gradient averaging for the plain (non-sharded) optimizer, bucket by bucket:
// each bucket (ParamLayout::assign_buckets) is pre-scaled by 1/DP and summed with a
// non-blocking all-reduce. With --overlap-grad-reduce a bucket is launched during the last
// micro-batch's backward as soon as all its parameters' grads are final (the model's
// grad-ready hook), so the reduction overlaps the rest of the backward; otherwise all buckets
// are launched after the backward. Either way the same buckets go through the same collective,
// so the results are bitwise identical.
#pragma once
#include <memory>
#include <vector>

#include "model/gpt.h"
#include "parallel/process_groups.h"

namespace mg {

class GradReducer {
 public:
  GradReducer(GPTModel& model, ProcessGroups& g, bool overlap);
  ~GradReducer();
  // Called right before the last micro-batch's backward: start tracking readiness.
  void arm();
  // Launches what is left, waits for every bucket; grads then hold the DP mean.
  void finish();
  int64_t buckets_launched_early() const { return early_; }

 private:
  void ready(const std::vector<int>& params);
  void launch(size_t bucket);

  GPTModel& model_;
  ProcessGroups& g_;
  bool overlap_, armed_ = false;
  std::vector<int> bucket_of_param_;
  std::vector<int> remaining_, total_;  // per bucket: params whose grads are not final yet
  std::vector<std::unique_ptr<CommRequest>> requests_;
  int64_t early_ = 0;
};

}  // namespace mg
