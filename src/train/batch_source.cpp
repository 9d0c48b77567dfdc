#include "train/batch_source.h"

namespace mg {

namespace {

DataSpec data_spec(const TrainConfig& cfg) {
  DataSpec d;
  d.mock = cfg.mock_data;
  d.mock_vocab_size = cfg.model.vocab_size;
  d.mock_eod = int32_t(cfg.model.vocab_size - 1);
  d.vocab_size = cfg.model.padded_vocab_size();  // the embedding's rows, as the model checks
  d.data_path = cfg.data_path;
  d.split_paths = {cfg.train_data_path, cfg.valid_data_path, cfg.test_data_path};
  d.split = cfg.split;
  d.seq_length = cfg.model.seq_length;
  d.seed = cfg.seed;
  d.num_samples = cfg.split_samples();
  d.cache_dir = cfg.data_cache_path;
  return d;
}

}  // namespace

bool split_built(const TrainConfig& cfg, int s) { return split_built(data_spec(cfg), s); }

BuiltData load_data(const TrainConfig& cfg, const ProcessGroups& g, int32_t& eod) {
  const bool needed = g.first_stage() || g.last_stage() || cfg.reset_attention_mask;
  DataSpec spec = data_spec(cfg);
  eod = cfg.mock_data ? spec.mock_eod : make_tokenizer(cfg.tokenizer)->eod();
  BuiltData data;
  // Real data always has an index cache (--data-cache-path or Megatron's default next to each
  // dataset); mock data only with --data-cache-path.
  if (!spec.cache_dir.empty() || !cfg.mock_data) {
    if (g.world_rank == 0) data = build_datasets(spec);
    g.world->barrier();
    spec.write_cache = false;
    if (g.world_rank != 0 && needed) data = build_datasets(spec);
  } else if (needed) {
    data = build_datasets(spec);
  }
  return data;
}

BatchSource::BatchSource(const SampleDataset* ds, const TrainConfig& cfg, const ProcessGroups& g,
                         const BatchOptions& opt, bool prefetch, int64_t consumed)
    : ds_(ds), cfg_(cfg), dp_size_(g.grid.dp),
      dp_rank_(g.coord.dp), cp_{g.grid.cp, g.coord.cp, cfg.model.seq_length}, opt_(opt) {
  if (ds && prefetch) {
    LoaderSpec spec;
    spec.micro_batch_size = cfg.micro_batch_size;
    spec.seq_length = cfg.model.seq_length;
    // The loader walks micro-batches in order (each iteration's samples follow the last's), so
    // its stride is one micro-batch per DP rank whatever the global batch (--rampup-batch-size).
    spec.global_batch_size = cfg.micro_batch_size * dp_size_;
    spec.dp_size = dp_size_;
    spec.dp_rank = dp_rank_;
    spec.consumed_samples = consumed;
    loader_ = std::make_unique<BatchLoader>(*ds, spec, opt);
  }
}

BatchFn BatchSource::at(int64_t consumed) {
  return [this, consumed](int64_t m) -> MicroBatch {
    // Every stage knows which samples it runs (their global indices key the dropout masks).
    const int64_t start = micro_batch_start(consumed, m, cfg_.micro_batch_size, dp_size_, dp_rank_);
    if (!ds_) {  // a middle pipeline stage
      MicroBatch mb{nullptr, nullptr, nullptr, nullptr};
      mb.first_sample = start;
      return mb;
    }
    // The iteration's micro-batches stay until the next iteration: a rank holding several
    // model chunks runs each micro-batch once per chunk. The schedules reach micro-batch m
    // only after 0..m-1, so the loader is read in order.
    if (consumed != batches_consumed_) batches_.clear(), batches_consumed_ = consumed;
    MG_CHECK(m <= int64_t(batches_.size()), "micro-batch ", m, " requested before micro-batch ",
             batches_.size());
    if (m == int64_t(batches_.size())) {
      batches_.push_back(
          loader_ ? loader_->next()
                  : make_batch(*ds_, start, cfg_.micro_batch_size, cfg_.model.seq_length, opt_));
      if (cp_.size > 1) batches_.back() = slice_for_context_parallel(batches_.back(), cp_);
    }
    const Batch& b = batches_[size_t(m)];
    return {b.tokens.data(),
            b.position_ids.data(),
            b.labels.data(),
            b.loss_mask.data(),
            b.attention_start.empty() ? nullptr : b.attention_start.data(),
            start};
  };
}

}  // namespace mg
