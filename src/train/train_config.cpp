#include "train/train_config.h"

#include "core/error.h"

namespace mg {

LRSchedule TrainConfig::lr_schedule() const {
  LRSchedule s;
  s.lr = lr;
  s.min_lr = min_lr;
  s.lr_warmup_init = lr_warmup_init;
  s.warmup_steps = lr_warmup_iters * global_batch_size;
  s.decay_steps = (lr_decay_iters > 0 ? lr_decay_iters : train_iters) * global_batch_size;
  s.style = lr_decay_style;
  return s;
}

std::string TrainConfig::finalize_and_validate(int world_size) {
  model.validate();
  adam.validate();
  MG_USER_CHECK(micro_batch_size > 0, "--micro-batch-size must be positive (got ",
                micro_batch_size, ")");
  if (global_batch_size == 0) global_batch_size = micro_batch_size;
  MG_USER_CHECK(global_batch_size > 0, "--global-batch-size must be positive (got ",
                global_batch_size, ")");
  const std::string warning =
      parallel.validate(world_size, model, micro_batch_size, global_batch_size);
  data_parallel_size = world_size / (parallel.tp() * parallel.pp());
  model.vocab_pad_tp = parallel.tp();
  MG_USER_CHECK(train_iters > 0, "--train-iters must be positive (got ", train_iters, ")");
  MG_USER_CHECK(log_interval > 0, "--log-interval must be positive (got ", log_interval, ")");
  MG_USER_CHECK(eval_interval >= 0, "--eval-interval must be >= 0 (got ", eval_interval, ")");
  MG_USER_CHECK(eval_iters >= 0, "--eval-iters must be >= 0 (got ", eval_iters, ")");
  MG_USER_CHECK(lr_warmup_iters >= 0, "--lr-warmup-iters must be >= 0 (got ", lr_warmup_iters,
                ")");
  MG_USER_CHECK(lr_decay_iters >= 0, "--lr-decay-iters must be >= 0 (got ", lr_decay_iters, ")");
  MG_USER_CHECK(optimizer == "adam", "--optimizer '", optimizer,
                "' is not available yet; use --optimizer adam");
  const int sources = int(mock_data) + int(!data_path.empty()) + int(!train_data_path.empty());
  MG_USER_CHECK(sources > 0, "no training data: pass --data-path PREFIX (a preprocessed "
                "dataset), --train-data-path, or --mock-data");
  MG_USER_CHECK(sources == 1, "pass only one of --mock-data, --data-path, --train-data-path");
  MG_USER_CHECK(mock_data || !tokenizer.tokenizer_type.empty(),
                "--data-path needs --tokenizer-type (its vocabulary sizes the model and gives EOD)");
  lr_schedule().validate();
  return warning;
}

}  // namespace mg
