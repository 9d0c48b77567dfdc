#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "backend/cpu/half.h"
#include "backend/dispatch.h"
#include "backend/ops.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/files.h"
#include "checkpoint/metadata.h"
#include "checkpoint/model_record.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/timer.h"

namespace mg {

namespace {

namespace fs = std::filesystem;

constexpr const char* kEmbedding = "embedding.word_embeddings.weight";

// One range of one local parameter, as stored or as wanted: elements [begin, begin + n) of the
// rank's (TP-local, row-major) parameter p; data points at element `begin`.
struct LocalPiece {
  std::string key;
  const ParamSpec* p;
  int64_t begin, n;
  DType dtype;
  char* data;
};

// A piece's bytes where the host can read them: the piece itself on the CPU, a copy of it
// when the model and optimizer live on the GPU.
const char* host_bytes(const LocalPiece& pc, std::vector<char>& staging) {
  const Device d = ops::where(pc.data);
  if (d == Device::CPU) return pc.data;
  staging.resize(size_t(pc.n) * dtype_size(pc.dtype));
  ops::copy(staging.data(), Device::CPU, pc.data, d, staging.size());
  return staging.data();
}

// Stores f32 values into a piece, rounded to its dtype, on the device it lives on.
void store_piece(const LocalPiece& pc, const float* values, std::vector<char>& staging) {
  const Device d = ops::where(pc.data);
  if (d == Device::CPU) return cpu::cast_from_f32(pc.data, pc.dtype, values, pc.n);
  staging.resize(size_t(pc.n) * dtype_size(pc.dtype));
  cpu::cast_from_f32(staging.data(), pc.dtype, values, pc.n);
  ops::copy(pc.data, d, staging.data(), Device::CPU, staging.size());
}

// The last stage's tied output layer is the word embedding.
std::string param_name(const ParamSpec& p) { return p.sharding.tied_copy ? kEmbedding : p.name; }

// The pieces this rank writes (for_save) or needs. Saving writes each element once: model
// params from DP rank 0 for the copy counted_once() picks; optimizer state likewise, except
// that with the distributed optimizer each DP rank writes the shard it owns.
std::vector<LocalPiece> local_pieces(const CheckpointIO& io, bool for_save, bool with_optim) {
  std::vector<LocalPiece> out;
  ParamStore& m = io.params;
  const DType t = m.dtype();
  const int64_t esize = int64_t(dtype_size(t));
  char* base = static_cast<char*>(m.param_data());
  // CP ranks hold DP-like copies: the distributed optimizer shards over DP x CP.
  for (const ParamSpec& p : m.layout().params()) {
    const bool owner = counted_once(p);
    // Experts differ across EP ranks: their copies are the expert-DP ranks'.
    const int dp_rank =
        p.sharding.expert >= 0 ? io.groups.expert_dp().rank() : io.groups.dp_cp->rank();
    const std::string name = param_name(p);
    if (!for_save || (owner && dp_rank == 0))
      out.push_back({"model/" + name, &p, 0, p.numel(), t, base + p.offset * esize});
    if (!with_optim || (for_save && !(owner && (io.distributed_optimizer || dp_rank == 0))))
      continue;
    for (const ParamRun& r : io.optimizer.runs()) {
      const int64_t a = std::max(r.offset, p.offset);
      const int64_t b = std::min(r.offset + r.numel, p.offset + p.numel());
      if (a >= b) continue;
      const Optimizer::StateSlice st = io.optimizer.state_of(a, b - a);
      auto add = [&](const char* what, float* ptr) {
        if (ptr)
          out.push_back({std::string("optim/") + what + "/" + name, &p, a - p.offset, b - a,
                         DType::F32, reinterpret_cast<char*>(ptr)});
      };
      const std::vector<const char*>& slots = io.optimizer.kind().state_slots;
      for (size_t k = 0; k < slots.size(); ++k) add(slots[k], st.slot[k]);
      add("main_param", st.main);
    }
  }
  return out;
}

}  // namespace

namespace {

// This rank's shard under tmp: one .bin of raw pieces and its .json index (with the .bin's
// CRC). Returns the .bin's size.
uint64_t write_shard(const CheckpointIO& io, const std::string& tmp) {
  const ProcessGroups& g = io.groups;
  const std::vector<LocalPiece> pieces = local_pieces(io, true, !io.cfg.no_save_optim);
  ShardIndex index;
  index.rank = g.world_rank;
  index.bin = rank_name(g.world_rank) + ".bin";
  ckpt::SyncedWriter bin(tmp + "/" + index.bin);
  std::vector<char> staging;
  for (const LocalPiece& pc : pieces) {
    const ParamSpec& p = *pc.p;  // split over its TP (an expert's: its expert TP)
    index.pieces.push_back({pc.key, pc.dtype, p.global_shape, p.shape,
                            p.tp_size > 1 ? p.sharding.split_dim : -1, p.sharding.stride, p.tp_size,
                            p.tp_rank, pc.begin, pc.n, bin.bytes()});
    bin.write(host_bytes(pc, staging), size_t(pc.n) * dtype_size(pc.dtype));
  }
  bin.close();
  fault::point(fault::Site::CheckpointSave);  // MG_FAULT_STOP: a rank stopped mid-save
  index.bin_bytes = bin.bytes();
  index.bin_crc32 = bin.crc();
  ckpt::write_file_synced(tmp + "/" + rank_name(g.world_rank) + ".json", shard_index_text(index));
  return index.bin_bytes;
}

// Rank 0, once every shard is on disk: metadata.json (with every shard's checksums), then the
// publishing rename, the latest file, and --ckpt-keep-last.
void finish_save(const CheckpointIO& io, const TrainProgress& progress, const std::string& tmp) {
  const CheckpointConfig& c = io.cfg;
  const ProcessGroups& g = io.groups;
  CheckpointMetadata meta;
  meta.iteration = progress.iteration;
  meta.consumed_train_samples = progress.consumed_train_samples;
  meta.consumed_valid_samples = progress.consumed_valid_samples;
  meta.scheduler_samples = progress.scheduler_samples;
  meta.skipped_iterations = progress.skipped_iterations;
  meta.optimizer = c.optimizer;
  meta.optimizer_saved = !c.no_save_optim;
  meta.optimizer_steps = io.optimizer.steps_taken();
  meta.seed = c.seed;
  meta.model = c.model;
  meta.precision = io.params.dtype();
  meta.tp = g.grid.tp, meta.pp = g.grid.pp, meta.dp = g.grid.dp, meta.cp = g.grid.cp;
  meta.distributed_optimizer = io.distributed_optimizer;
  meta.args = c.argv;
  if (progress.has_scaler) meta.loss_scaler = progress.scaler;
  for (int r = 0; r < g.grid.world(); ++r) {
    const std::string index = rank_name(r) + ".json";
    const std::string text = ckpt::read_text_file(tmp + "/" + index);
    const ShardIndex si = parse_shard_index(text, tmp + "/" + index);
    meta.ranks.push_back(
        {index, ckpt::crc32_of(text.data(), text.size()), si.bin, si.bin_bytes, si.bin_crc32});
  }
  ckpt::write_file_synced(tmp + "/metadata.json", checkpoint_metadata_text(meta));
  ckpt::fsync_dir(tmp);
  ckpt::publish_checkpoint(c.save, tmp, progress.iteration);
  ckpt::keep_last_checkpoints(c.save, progress.iteration, c.ckpt_keep_last);
}

}  // namespace

void save_checkpoint(const CheckpointIO& io, const TrainProgress& progress) {
  Timer timer;
  ProcessGroups& g = io.groups;
  const std::string dir = io.cfg.save;
  const std::string final_dir = dir + "/" + checkpoint_dir_name(progress.iteration);
  const std::string tmp = final_dir + ".tmp";
  double bytes = 0;
  try {
    if (g.world_rank == 0) ckpt::begin_save(dir, tmp);
    g.world->barrier();
    bytes = all_reduce_sum(*g.world, double(write_shard(io, tmp)));
    g.world->barrier();  // every shard is on disk
    if (g.world_rank == 0) finish_save(io, progress, tmp);
  } catch (...) {
    // Rank 0 removes what it can of a failed save (another rank's failure ends the job, and
    // the next save removes the rest: ckpt::remove_leftovers).
    std::error_code ec;
    if (g.world_rank == 0) fs::remove_all(tmp, ec);
    throw;
  }
  g.world->barrier();  // nobody goes on (or exits) before the checkpoint is published
  const double secs = timer.seconds();
  log_line(str_cat(" > saved checkpoint at iteration ", progress.iteration, " to ", final_dir,
                   " in ", secs, " s (", bytes / 1e6, " MB, ", bytes / 1e6 / secs, " MB/s)"));
}

namespace {

// The directory of dir's latest checkpoint ("" when dir has no latest_checkpointed_iteration.txt).
std::string latest_dir(const std::string& dir) {
  const int64_t it = read_latest_iteration(dir);
  return it < 0 ? "" : dir + "/" + checkpoint_dir_name(it);
}

}  // namespace

std::string latest_checkpoint_dir(const std::string& dir) { return latest_dir(dir); }

GPTConfig checkpoint_model_config(const std::string& dir) {
  const std::string ckdir = latest_dir(dir);
  MG_USER_CHECK(!ckdir.empty(), "'", dir, "' holds no checkpoint (no ", kLatestFile, ")");
  return read_checkpoint_metadata(ckdir).model;
}

void verify_checkpoint(const std::string& ckdir) {
  const CheckpointMetadata meta = read_checkpoint_metadata(ckdir);
  CheckpointReader reader(ckdir, meta);
  for (size_t r = 0; r < meta.ranks.size(); ++r) {
    // Mapping a file verifies its size and CRC; reading every tensor would only add time.
    const std::string bin = ckdir + "/" + meta.ranks[r].bin;
    const ckpt::RandomAccessFile f(bin);
    MG_USER_CHECK(f.size() == meta.ranks[r].bin_bytes && f.crc32() == meta.ranks[r].bin_crc32,
                  "checkpoint file '", bin, "' is corrupt or truncated");
  }
}

bool load_checkpoint(const CheckpointIO& io, TrainProgress& progress) {
  Timer timer;
  const CheckpointConfig& c = io.cfg;
  const std::string dir = latest_dir(c.load);
  if (dir.empty()) {
    MG_USER_CHECK(!c.exit_on_missing_checkpoint, "--load ", c.load, ": no checkpoint there (",
                  c.load, "/", kLatestFile, " is missing) and --exit-on-missing-checkpoint is set");
    log_line(str_cat(" > no checkpoint in '", c.load, "' (no ", kLatestFile,
                     "): starting from scratch"));
    return false;
  }
  const CheckpointMetadata meta = read_checkpoint_metadata(dir);
  check_model_record(meta.model, c.model, "checkpoint '" + dir + "'");
  CheckpointReader reader(dir, meta);

  const bool load_optim = !c.no_load_optim && !c.finetune && meta.optimizer_saved;
  MG_USER_CHECK(!load_optim || meta.optimizer == c.optimizer, "checkpoint '", dir, "' holds \"",
                meta.optimizer, "\" state but this run uses --optimizer ", c.optimizer,
                " (pass --no-load-optim to start the optimizer afresh)");
  std::vector<LocalPiece> wanted = local_pieces(io, false, load_optim);
  // Where each wanted key comes from: f32 models prefer the fp32 main params a 16-bit run
  // saved; 16-bit runs' main params fall back to the weights of an f32 checkpoint.
  const bool f32_model = io.params.dtype() == DType::F32;
  auto source = [&](const LocalPiece& pc) -> std::string {
    const std::string name = param_name(*pc.p);
    if (pc.key.rfind("model/", 0) == 0 && f32_model && reader.has("optim/main_param/" + name))
      return "optim/main_param/" + name;
    if (pc.key.rfind("optim/main_param/", 0) == 0 && !reader.has(pc.key)) return "model/" + name;
    return pc.key;
  };
  std::map<std::string, std::vector<const LocalPiece*>> by_source;
  for (const LocalPiece& pc : wanted) {
    const std::string src = source(pc);
    MG_USER_CHECK(reader.has(src), "checkpoint '", dir, "' has no tensor ", src,
                  src.rfind("optim/", 0) == 0
                      ? " (saved with --no-save-optim? pass --no-load-optim)"
                      : "");
    by_source[src].push_back(&pc);
  }
  std::vector<float> values;
  std::vector<char> staging;
  for (const auto& [key, pieces] : by_source) {
    Shape shape;
    const std::vector<float> g = reader.global(key, shape);
    for (const LocalPiece* pc : pieces) {
      const ParamSpec& p = *pc->p;
      // Only the vocabulary tensors (word embedding, output layer) may differ, in their padded
      // rows (padding depends on TP): shared rows are copied, extra rows stay zero.
      const bool rows_may_differ =
          p.sharding.vocab_padded && shape.size() == 2 && shape[1] == p.global_shape[1];
      MG_USER_CHECK(shape == p.global_shape || rows_may_differ, "checkpoint '", dir, "': ", key,
                    " has shape ", shape_str(shape), " but this model expects ",
                    shape_str(p.global_shape));
      values.assign(size_t(pc->n), 0.f);
      for (int64_t j = 0; j < pc->n; ++j) {
        const int64_t gi = global_index(p, pc->begin + j);
        const int64_t row = gi / p.global_shape.back(), col = gi % p.global_shape.back();
        if (row >= shape[0]) continue;
        const int64_t si = shape.size() == 2 ? row * shape[1] + col : gi;
        MG_USER_CHECK(reader.covered(si), "checkpoint '", dir, "' lacks elements of ", key,
                      " (a shard file missing from its metadata?)");
        values[size_t(j)] = g[size_t(si)];
      }
      store_piece(*pc, values.data(), staging);
    }
  }
  if (load_optim) io.optimizer.set_steps_taken(meta.optimizer_steps);
  else  // a 16-bit model's fp32 main params start from the loaded weights, not from init
    io.optimizer.copy_main_from(io.params.param_data());
  if (!c.finetune) {
    progress.iteration = meta.iteration;
    progress.consumed_train_samples = meta.consumed_train_samples;
    progress.consumed_valid_samples = meta.consumed_valid_samples;
    progress.skipped_iterations = meta.skipped_iterations;
    if (load_optim) progress.scheduler_samples = meta.scheduler_samples;
    if (load_optim && meta.loss_scaler) {
      progress.has_scaler = true;
      progress.scaler = *meta.loss_scaler;
    }
  }
  if (!c.no_load_rng && meta.seed != c.seed)
    log_line(str_cat(" > note: the checkpoint was trained with --seed ", meta.seed,
                     "; this run's --seed ", c.seed, " decides the data order from here"));
  log_line(str_cat(" > loaded checkpoint '", dir, "' (iteration ", meta.iteration,
                   ", saved with TP ", meta.tp, " CP ", meta.cp, " PP ", meta.pp, " DP ", meta.dp,
                   ", \"", dtype_name(meta.precision), "\"",
                   load_optim ? ", with optimizer state" : ", weights only", ") in ",
                   timer.seconds(), " s (rank 0 read and verified ", reader.bytes_read() / 1e6,
                   " MB, ", reader.bytes_read() / 1e6 / timer.seconds(), " MB/s)"));
  return true;
}

}  // namespace mg
