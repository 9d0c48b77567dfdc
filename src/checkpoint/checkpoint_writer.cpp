#include "checkpoint/checkpoint_writer.h"

#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_dir.h"
#include "core/error.h"
#include "parallel/parallel_config.h"

namespace mg {

namespace fs = std::filesystem;

CheckpointWriter::CheckpointWriter(const std::string& dir, GPTConfig model, int64_t tp, int64_t pp,
                                   DType dtype, std::vector<std::string> argv)
    : dir_(dir), model_(std::move(model)), tp_(tp), pp_(pp), dtype_(dtype), argv_(std::move(argv)) {
  model_.vocab_pad_tp = tp;
  global_ = gpt_param_layout(model_);
  ParallelConfig par;
  par.tensor_model_parallel_size = int(tp);
  par.pipeline_model_parallel_size = int(pp);
  for (int64_t p = 0; p < pp; ++p)
    for (int64_t t = 0; t < tp; ++t) {  // world rank p * tp + t: TP fastest (DP = 1)
      const auto [begin, end] = par.stage_layers(model_.num_layers, int(p));
      Rank r;
      r.shard = {tp, t, begin, end, p == 0, p == pp - 1};
      r.layout = gpt_param_layout(model_, r.shard);
      r.index.rank = int64_t(ranks_.size());
      r.index.bin = rank_name(r.index.rank) + ".bin";
      ranks_.push_back(std::move(r));
    }
  tmp_ = dir_ + "/" + checkpoint_dir_name(0) + ".tmp";
  ckpt::begin_save(dir_, tmp_);
  for (Rank& r : ranks_) r.bin = std::make_unique<ckpt::SyncedWriter>(tmp_ + "/" + r.index.bin);
}

CheckpointWriter::~CheckpointWriter() {
  if (finished_) return;
  ranks_.clear();  // close the files before removing them
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void CheckpointWriter::add(const std::string& name, const char* global) {
  MG_CHECK(global_.has(name) && ++added_[name] == 1, "checkpoint writer: ", name,
           " is not a parameter of the model or was added twice");
  const size_t esize = dtype_size(dtype_);
  std::vector<char> local;
  for (Rank& r : ranks_) {
    if (!r.layout.has(name)) continue;
    const ParamSpec& p = r.layout.get(name);
    if (!counted_once(p)) continue;  // TP-replicated copies, the tied copy
    // Runs contiguous in both the shard and the global tensor (as init_params walks them).
    int64_t run = p.numel();
    if (p.tp_size > 1 && p.sharding.split_dim == 1) run = p.shape[1];
    if (p.tp_size > 1 && p.sharding.split_dim == 0) run = p.numel() / p.sharding.stride;
    const char* src = global;
    if (run < p.numel()) {
      local.resize(size_t(p.numel()) * esize);
      for (int64_t b = 0; b < p.numel(); b += run)
        std::memcpy(local.data() + size_t(b) * esize, global + size_t(global_index(p, b)) * esize,
                    size_t(run) * esize);
      src = local.data();
    } else {
      src = global + size_t(global_index(p, 0)) * esize;
    }
    r.index.pieces.push_back({"model/" + name, dtype_, p.global_shape, p.shape,
                              p.tp_size > 1 ? p.sharding.split_dim : -1, p.sharding.stride,
                              p.tp_size, p.tp_rank, 0, p.numel(), r.bin->bytes()});
    r.bin->write(src, size_t(p.numel()) * esize);
  }
}

void CheckpointWriter::finish() {
  for (const ParamSpec& p : global_.params())
    MG_CHECK(added_.count(p.name) || p.sharding.tied_copy, "checkpoint writer: ", p.name,
             " was never added");
  CheckpointMetadata meta;
  meta.optimizer_saved = false;
  meta.seed = 1234;  // --seed's default: the seed only orders data, which a conversion has none
  meta.model = model_;
  meta.precision = dtype_;
  meta.tp = tp_, meta.pp = pp_, meta.dp = 1;
  meta.args = argv_;
  for (Rank& r : ranks_) {
    r.bin->close();
    r.index.bin_bytes = r.bin->bytes();
    r.index.bin_crc32 = r.bin->crc();
    const std::string text = shard_index_text(r.index);
    const std::string index = rank_name(r.index.rank) + ".json";
    ckpt::write_file_synced(tmp_ + "/" + index, text);
    meta.ranks.push_back({index, ckpt::crc32_of(text.data(), text.size()), r.index.bin,
                          r.index.bin_bytes, r.index.bin_crc32});
  }
  ckpt::write_file_synced(tmp_ + "/metadata.json", checkpoint_metadata_text(meta));
  ckpt::fsync_dir(tmp_);
  ckpt::publish_checkpoint(dir_, tmp_, 0);
  finished_ = true;
}

}  // namespace mg
