#include "data/loader.h"

namespace mg {

BatchLoader::BatchLoader(const SampleDataset& ds, const LoaderSpec& spec, const BatchOptions& opt)
    : ds_(ds), spec_(spec), opt_(opt), worker_([this] { run(); }) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void BatchLoader::run() {
  const int64_t per_iter = spec_.global_batch_size / (spec_.micro_batch_size * spec_.dp_size);
  try {
    for (int64_t k = 0;; ++k) {
      const int64_t iter = k / per_iter, m = k % per_iter;
      const int64_t start =
          micro_batch_start(spec_.consumed_samples + iter * spec_.global_batch_size, m,
                            spec_.micro_batch_size, spec_.dp_size, spec_.dp_rank);
      Batch b = make_batch(ds_, start, spec_.micro_batch_size, spec_.seq_length, opt_);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || int(ready_.size()) < spec_.depth; });
      if (stop_) return;
      ready_.push_back(std::move(b));
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

Batch BatchLoader::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty()) std::rethrow_exception(error_);
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return b;
}

}  // namespace mg
