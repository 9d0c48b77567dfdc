// The training data loader: Megatron's sampler order (iteration i, micro-step m of this DP
// rank = global samples consumed + i*G + m*B*DP + dp_rank*B ...) with the batches assembled on
// a background thread, `depth` micro-batches ahead, so a step does not wait on reading and
// batching when data is local.
#pragma once
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "data/batch.h"

namespace mg {

struct LoaderSpec {
  int64_t micro_batch_size = 1, seq_length = 0, global_batch_size = 1;
  int64_t dp_size = 1, dp_rank = 0;
  int64_t consumed_samples = 0;  // where the first iteration starts
  int depth = 4;                 // micro-batches prepared ahead
};

class BatchLoader {
 public:
  BatchLoader(const SampleDataset& ds, const LoaderSpec& spec, const BatchOptions& opt);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;
  // The next micro-batch in sampler order (blocks until it is ready).
  Batch next();

 private:
  void run();
  const SampleDataset& ds_;
  LoaderSpec spec_;
  BatchOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace mg
