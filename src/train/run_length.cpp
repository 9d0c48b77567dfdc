#include "train/run_length.h"

#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/parse_number.h"
#include "train/train_config.h"

namespace mg {

int64_t BatchRampup::at(int64_t consumed) const {
  if (start == 0 || consumed > samples) return final_size;
  const double per_increment = double(samples) / double((final_size - start) / increment);
  return start + int64_t(double(consumed) / per_increment) * increment;
}

namespace {

// --rampup-batch-size's three numbers, checked as Megatron's calculator checks them, and each
// batch of the ramp against --micro-batch-size x data-parallel size.
BatchRampup parse_rampup(const TrainConfig& c) {
  BatchRampup r;
  r.final_size = c.global_batch_size;
  if (c.rampup_batch_size.empty()) return r;
  MG_USER_CHECK(c.rampup_batch_size.size() == 3,
                "--rampup-batch-size takes three numbers: "
                "START INCREMENT SAMPLES (got ",
                c.rampup_batch_size.size(), ")");
  int64_t v[3];
  for (int i = 0; i < 3; ++i)
    v[i] = parse_number<int64_t>("--rampup-batch-size", c.rampup_batch_size[size_t(i)]);
  r.start = v[0], r.increment = v[1], r.samples = v[2];
  MG_USER_CHECK(c.train_samples > 0,
                "--rampup-batch-size needs sample-based training "
                "(--train-samples), as in Megatron");
  // (Megatron accepts SAMPLES 0 and then divides by zero on the first batch.)
  MG_USER_CHECK(r.start > 0 && r.increment > 0 && r.samples > 0, "--rampup-batch-size ", r.start,
                " ", r.increment, " ", r.samples,
                ": START, INCREMENT and SAMPLES must be positive");
  MG_USER_CHECK(r.start < r.final_size && (r.final_size - r.start) % r.increment == 0,
                "--rampup-batch-size START ", r.start, " must be below --global-batch-size ",
                r.final_size, " by a multiple of INCREMENT ", r.increment);
  const int64_t unit = c.micro_batch_size * c.data_parallel_size;
  for (int64_t b = r.start; b < r.final_size; b += r.increment)
    MG_USER_CHECK(b % unit == 0, "--rampup-batch-size: the global batch ", b,
                  " of the ramp is not a multiple of --micro-batch-size ", c.micro_batch_size,
                  " x data-parallel size ", c.data_parallel_size);
  return r;
}

}  // namespace

int64_t samples_consumed(const BatchRampup& rampup, int64_t iterations) {
  int64_t consumed = 0;
  for (int64_t i = 0; i < iterations; ++i) consumed += rampup.at(consumed);
  return consumed;
}

void resolve_run_length(TrainConfig& c) {
  // Megatron's default --lr is None, which its scheduler cannot use: the run stops there.
  MG_USER_CHECK(!std::isnan(c.lr),
                "--lr is required (the peak learning rate; Megatron has no "
                "default either)");
  MG_USER_CHECK(c.train_iters >= 0, "--train-iters must be positive (got ", c.train_iters, ")");
  MG_USER_CHECK(c.train_samples >= 0, "--train-samples must be positive (got ", c.train_samples,
                ")");
  MG_USER_CHECK(c.train_iters > 0 || c.train_samples > 0,
                "give the run's length: --train-iters N or --train-samples N");
  MG_USER_CHECK(c.train_iters == 0 || c.train_samples == 0,
                "pass only one of --train-iters "
                "(iteration-based training) and --train-samples (sample-based training)");
  // The schedule flags of the other kind of run, each named with its counterpart.
  const bool by_iters = c.train_iters > 0;
  const std::pair<std::string, int64_t> foreign[3] = {
      by_iters ? std::pair{"--lr-decay-samples", c.lr_decay_samples}
               : std::pair{"--lr-decay-iters", c.lr_decay_iters},
      by_iters ? std::pair{"--lr-warmup-samples", c.lr_warmup_samples}
               : std::pair{"--lr-warmup-iters", c.lr_warmup_iters},
      // (Megatron ignores the other kind's WSD flag; refused here rather than dropped.)
      by_iters ? std::pair{"--lr-wsd-decay-samples", c.lr_wsd_decay_samples}
               : std::pair{"--lr-wsd-decay-iters", c.lr_wsd_decay_iters}};
  for (const auto& [flag, value] : foreign) {
    const std::string kind = by_iters ? "samples" : "iters";
    const std::string counterpart =
        flag.substr(0, flag.rfind('-') + 1) + (by_iters ? "iters" : "samples");
    MG_USER_CHECK(value == 0, flag, " is for ", by_iters ? "sample" : "iteration",
                  "-based training (--train-", kind, "); with --train-",
                  by_iters ? "iters" : "samples", " use ", counterpart);
  }
  c.rampup = parse_rampup(c);
  if (by_iters) return;
  // Megatron's update_train_iters: the ramp's iterations while at most SAMPLES (and at most
  // --train-samples) are consumed, then whole global batches of the rest.
  int64_t consumed = 0, iters = 0;
  if (c.rampup.start > 0)
    for (; consumed <= c.rampup.samples && consumed <= c.train_samples; ++iters)
      consumed += c.rampup.at(consumed);
  if (c.train_samples > consumed) iters += (c.train_samples - consumed) / c.global_batch_size;
  c.train_iters = iters;
  MG_USER_CHECK(c.train_iters > 0, "--train-samples ", c.train_samples,
                " is less than one global batch (--global-batch-size ", c.global_batch_size, ")");
}

}  // namespace mg
