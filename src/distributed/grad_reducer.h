// Data-parallel gradient averaging for the plain (non-sharded) optimizer, bucket by bucket:
// each bucket (ParamLayout::assign_buckets) is pre-scaled by 1/DP and summed with a
// non-blocking all-reduce. With --overlap-grad-reduce a bucket is launched during the last
// micro-batch's backward as soon as all its parameters' grads are final (the model's
// grad-ready hook), so the reduction overlaps the rest of the backward; otherwise all buckets
// are launched after the backward. Either way the same buckets go through the same collective,
// so the results are bitwise identical. With --grad-reduce-in-bf16 each bucket is rounded to
// bf16 (nearest even) after the pre-scaling, summed in bf16 (half the bytes; partial sums
// rounded, comm/communicator.h) and widened back into the fp32 grads once reduced.
#pragma once
#include <memory>
#include <vector>

#include "model/param_store.h"
#include "parallel/process_groups.h"

namespace mg {

// Which buckets of a bucketed layout have all their parameters' grads final, as the model's
// grad-ready hook reports parameters during the last micro-batch's backward.
class BucketTracker {
 public:
  explicit BucketTracker(const ParamLayout& layout);
  void arm() { armed_ = true, remaining_ = total_; }
  void disarm() { armed_ = false; }
  // Buckets completed by these parameters (none unless armed).
  std::vector<size_t> ready(const std::vector<int>& params);
  // Buckets holding any of these parameters.
  std::vector<size_t> buckets_of(const std::vector<int>& params) const;

 private:
  bool armed_ = false;
  std::vector<int> bucket_of_param_, remaining_, total_;
};

class GradReducer {
 public:
  // reduce_dtype: F32, or BF16 (--grad-reduce-in-bf16).
  GradReducer(ParamStore& store, ProcessGroups& g, bool overlap, DType reduce_dtype = DType::F32);
  ~GradReducer();
  // Called right before the last micro-batch's backward: start tracking readiness.
  void arm();
  // Launches what is left, waits for every bucket; grads then hold the DP mean.
  void finish();
  int64_t buckets_launched_early() const { return early_; }

 private:
  void ready(const std::vector<int>& params);
  void launch(size_t bucket);
  // The group that reduces bucket b: DP x CP, or the expert-data-parallel ranks for experts
  // (the same 1/DP scale: an expert's grads sum the tokens of its EP group's ranks).
  Communicator& group(size_t b) {
    return store_.layout().bucket_is_expert(b) ? g_.expert_dp() : *g_.dp_cp;
  }

  ParamStore& store_;
  ProcessGroups& g_;
  bool overlap_;
  DType reduce_dtype_;
  std::vector<Tensor> bf16_;  // per bucket under BF16, on the compute device: the reduced copy
  BucketTracker tracker_;
  std::vector<std::unique_ptr<CommRequest>> requests_;
  int64_t early_ = 0;
};

}  // namespace mg
