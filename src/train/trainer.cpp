#include "train/trainer.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "core/log.h"
#include "core/timer.h"
#include "data/batch.h"
#include "data/mock_dataset.h"
#include "model/gpt.h"
#include "train/log_format.h"

namespace mg {

namespace {

double evaluate(GPTModel& model, const GPTDataset& ds, const TrainConfig& cfg,
                const BatchOptions& opt, int64_t& consumed) {
  double sum = 0;
  int64_t count = 0;
  const int64_t B = cfg.micro_batch_size, S = cfg.model.seq_length;
  for (int64_t it = 0; it < cfg.eval_iters; ++it) {
    for (int64_t m = 0; m < cfg.num_micro_batches(); ++m) {
      Batch b = make_batch(ds, micro_batch_start(consumed, m, B, 1, 0), B, S, opt);
      sum += model.forward({b.tokens.data(), b.position_ids.data(), b.labels.data(),
                            b.loss_mask.data()});
      ++count;
    }
    consumed += cfg.global_batch_size;
  }
  return count ? sum / double(count) : 0.0;
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg) {
  const GPTConfig& mc = cfg.model;
  const int64_t B = cfg.micro_batch_size, S = mc.seq_length, M = cfg.num_micro_batches();

  // Data: Megatron's mock corpus split by --split, sized as Megatron sizes each split.
  const int32_t eod = int32_t(mc.vocab_size - 1);
  MockTokenSource source(mc.vocab_size, eod);
  const auto ranges = split_ranges(cfg.split, source.num_sequences());
  MG_USER_CHECK(ranges[0].second > ranges[0].first, "--split '", cfg.split,
                "' leaves no training data");
  GPTDataset train_ds(source, ranges[0].first, ranges[0].second,
                      {S, cfg.train_iters * cfg.global_batch_size, cfg.seed});
  std::unique_ptr<GPTDataset> valid_ds;
  const bool do_valid = cfg.eval_interval > 0 && cfg.eval_iters > 0;
  if (do_valid) {
    MG_USER_CHECK(ranges[1].second > ranges[1].first, "--split '", cfg.split,
                  "' leaves no validation data but --eval-interval is set");
    const int64_t n = (cfg.train_iters / cfg.eval_interval + 1) * cfg.eval_iters *
                      cfg.global_batch_size;
    valid_ds = std::make_unique<GPTDataset>(source, ranges[1].first, ranges[1].second,
                                            GPTDatasetConfig{S, n, cfg.seed});
  }
  const BatchOptions bopt{eod, cfg.eod_mask_loss, cfg.reset_position_ids};

  GPTModel model(mc, B);
  model.init(cfg.seed);
  AdamW optim(model.layout(), cfg.adam);
  const LRSchedule sched = cfg.lr_schedule();
  log_line(str_cat(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): ",
                   model.num_params()));
  log_line(memory_report(model.num_params() * 4, model.num_params() * 4, optim.state_bytes(),
                         model.activation_bytes()));

  TrainResult result;
  int64_t consumed = 0, valid_consumed = 0;
  double interval_loss = 0, interval_seconds = 0, total_seconds = 0;
  int64_t interval_iters = 0, nan_iters = 0;
  const double flops_per_iter = mc.train_flops_per_token() * double(cfg.global_batch_size * S);
  for (int64_t iter = 1; iter <= cfg.train_iters; ++iter) {
    Timer timer;
    const double lr = sched.at(consumed);
    model.zero_grads();
    double loss = 0;
    for (int64_t m = 0; m < M; ++m) {
      Batch b = make_batch(train_ds, micro_batch_start(consumed, m, B, 1, 0), B, S, bopt);
      loss += model.forward({b.tokens.data(), b.position_ids.data(), b.labels.data(),
                             b.loss_mask.data()}) / double(M);
      model.backward(1.0f / float(M));
    }
    const double grad_norm = optim.step(model.params(), model.grads(), float(lr));
    consumed += cfg.global_batch_size;
    const double secs = timer.seconds();
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) ++nan_iters;
    result.losses.push_back(loss);
    result.grad_norms.push_back(grad_norm);
    if (iter > 1) total_seconds += secs;
    interval_loss += loss;
    interval_seconds += secs;
    ++interval_iters;

    if (iter % cfg.log_interval == 0 || iter == cfg.train_iters) {
      IterationLog l;
      l.iteration = iter;
      l.train_iters = cfg.train_iters;
      l.consumed_samples = consumed;
      l.ms_per_iter = 1e3 * interval_seconds / double(interval_iters);
      l.tflops = flops_per_iter / (interval_seconds / double(interval_iters)) / 1e12;
      l.lr = lr;
      l.global_batch_size = cfg.global_batch_size;
      l.lm_loss = interval_loss / double(interval_iters);
      l.grad_norm = grad_norm;
      l.nan_iterations = nan_iters;
      log_line(format_iteration(l));
      interval_loss = interval_seconds = 0;
      interval_iters = 0;
    }
    if (do_valid && (iter % cfg.eval_interval == 0 || iter == cfg.train_iters)) {
      const double v = evaluate(model, *valid_ds, cfg, bopt, valid_consumed);
      result.valid_losses.push_back(v);
      log_line(format_validation(iter, v));
    }
  }
  result.mean_iteration_seconds =
      cfg.train_iters > 1 ? total_seconds / double(cfg.train_iters - 1) : interval_seconds;
  return result;
}

}  // namespace mg
