#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/cpu/half.h"
#include "backend/dispatch.h"
#include "backend/ops.h"
#include "checkpoint/files.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/fields.h"

namespace mg {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFormat = "megatron-cpp-checkpoint";
constexpr const char* kLatest = "latest_checkpointed_iteration.txt";
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

DType dtype_from_name(const std::string& s, const std::string& where) {
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (s == dtype_name(t)) return t;
  MG_USER_CHECK(false, where, ": unknown dtype '", s, "'");
  return DType::F32;
}

// The pieces this rank writes (for_save) or needs. Saving writes each element once: model
// params from DP rank 0 for the copy counted_once() picks; optimizer state likewise, except
// that with the distributed optimizer each DP rank writes the shard it owns.
std::vector<LocalPiece> local_pieces(const CheckpointIO& io, bool for_save, bool with_optim) {
  std::vector<LocalPiece> out;
  GPTModel& m = io.model;
  const DType t = m.dtype();
  const int64_t esize = int64_t(dtype_size(t));
  char* base = static_cast<char*>(m.param_data());
  const int tp_rank = io.groups.coord.tp, dp_rank = io.groups.coord.dp;
  const bool adam = io.cfg.optimizer == "adam";
  for (const ParamSpec& p : m.layout().params()) {
    const bool owner = counted_once(p, tp_rank);
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
      add(adam ? "exp_avg" : "momentum", st.exp_avg);
      add("exp_avg_sq", st.exp_avg_sq);
      add("main_param", st.main);
    }
  }
  return out;
}

// The model record: every field of model/fields.h with its resolved value (GPTConfig::
// resolved(): F, HD, query groups, the position table as the run used them), plus the padded
// vocabulary.
json model_json(const GPTConfig& model) {
  const GPTConfig c = model.resolved();
  json j;
  for (const ModelField& f : model_fields())
    std::visit([&](auto m) { j[f.key] = c.*m; }, f.member);
  j["padded_vocab_size"] = c.padded_vocab_size();
  return j;
}

std::string rank_name(int r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05d", r);
  return buf;
}

// Complete checkpoints in dir (iter_%07d directories), oldest first.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.size() != 12 || n.rfind("iter_", 0) != 0 || !e.is_directory()) continue;
    if (n.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    out.emplace_back(std::stoll(n.substr(5)), e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string checkpoint_dir_name(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "iter_%07lld", (long long)iteration);
  return buf;
}

void save_checkpoint(const CheckpointIO& io, const TrainProgress& progress) {
  Timer timer;
  ProcessGroups& g = io.groups;
  const std::string dir = io.cfg.save;
  const std::string final_dir = dir + "/" + checkpoint_dir_name(progress.iteration);
  const std::string tmp = final_dir + ".tmp";
  if (g.world_rank == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    MG_USER_CHECK(fs::is_directory(dir), "--save: cannot create directory '", dir, "'");
    fs::remove_all(tmp);  // a crashed earlier save of this iteration
    fs::create_directories(tmp);
  }
  g.world->barrier();

  // This rank's shard: one .bin of raw pieces and its .json index (with the .bin's CRC).
  const std::vector<LocalPiece> pieces = local_pieces(io, true, !io.cfg.no_save_optim);
  const std::string name = rank_name(g.world_rank);
  ckpt::SyncedWriter bin(tmp + "/" + name + ".bin");
  json index = {{"format", kFormat}, {"version", kCheckpointVersion}, {"rank", g.world_rank}};
  json& list = index["pieces"] = json::array();
  const int64_t tp = g.grid.tp;
  std::vector<char> staging;
  for (const LocalPiece& pc : pieces) {
    list.push_back({{"key", pc.key},
                    {"dtype", dtype_name(pc.dtype)},
                    {"global_shape", pc.p->global_shape},
                    {"local_shape", pc.p->shape},
                    {"tp_split_dim", tp > 1 ? pc.p->sharding.split_dim : -1},
                    {"tp_stride", pc.p->sharding.stride},
                    {"tp_size", tp},
                    {"tp_rank", g.coord.tp},
                    {"local_begin", pc.begin},
                    {"numel", pc.n},
                    {"offset", bin.bytes()}});
    bin.write(host_bytes(pc, staging), size_t(pc.n) * dtype_size(pc.dtype));
  }
  bin.close();
  fault::point(fault::Site::CheckpointSave);  // MG_FAULT_STOP: a rank stopped mid-save
  index["bin"] = name + ".bin";
  index["bin_bytes"] = bin.bytes();
  index["bin_crc32"] = bin.crc();
  {
    const std::string text = index.dump(1);
    ckpt::SyncedWriter w(tmp + "/" + name + ".json");
    w.write(text.data(), text.size());
    w.close();
  }
  const double bytes = all_reduce_sum(*g.world, double(bin.bytes()));
  g.world->barrier();  // every shard is on disk

  if (g.world_rank == 0) {
    const CheckpointConfig& c = io.cfg;
    json meta = {{"format", kFormat},
                 {"version", kCheckpointVersion},
                 {"iteration", progress.iteration},
                 {"consumed_train_samples", progress.consumed_train_samples},
                 {"consumed_valid_samples", progress.consumed_valid_samples},
                 {"scheduler_samples", progress.scheduler_samples},
                 {"skipped_iterations", progress.skipped_iterations},
                 {"optimizer",
                  {{"kind", c.optimizer},
                   {"saved", !c.no_save_optim},
                   {"steps", io.optimizer.steps_taken()}}},
                 {"rng", {{"seed", c.seed}}},
                 {"model", model_json(c.model)},
                 {"precision", dtype_name(io.model.dtype())},
                 {"layout",
                  {{"tensor_model_parallel_size", g.grid.tp},
                   {"pipeline_model_parallel_size", g.grid.pp},
                   {"data_parallel_size", g.grid.dp},
                   {"use_distributed_optimizer", io.distributed_optimizer}}},
                 {"args", c.argv}};
    if (progress.has_scaler)
      meta["loss_scaler"] = {{"scale", progress.scaler.scale},
                             {"growth_tracker", progress.scaler.growth_tracker},
                             {"hysteresis_tracker", progress.scaler.hysteresis_tracker}};
    json& ranks = meta["ranks"] = json::array();
    for (int r = 0; r < g.grid.world(); ++r) {
      const std::string rn = rank_name(r);
      const std::string text = ckpt::read_text_file(tmp + "/" + rn + ".json");
      const json ri = json::parse(text);
      ranks.push_back({{"index", rn + ".json"},
                       {"index_crc32", ckpt::crc32_of(text.data(), text.size())},
                       {"bin", ri["bin"]},
                       {"bin_bytes", ri["bin_bytes"]},
                       {"bin_crc32", ri["bin_crc32"]}});
    }
    const std::string text = meta.dump(1);
    ckpt::SyncedWriter w(tmp + "/metadata.json");
    w.write(text.data(), text.size());
    w.close();
    ckpt::fsync_dir(tmp);
    // Publish: the directory first, then the pointer to it.
    const std::string old = final_dir + ".old";
    fs::remove_all(old);
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    ckpt::fsync_dir(dir);
    ckpt::write_file_atomic(dir + "/" + kLatest, std::to_string(progress.iteration) + "\n");
    fs::remove_all(old);
    if (c.ckpt_keep_last > 0) {
      auto all = complete_checkpoints(dir);
      for (size_t i = 0; i + size_t(c.ckpt_keep_last) < all.size(); ++i)
        if (all[i].first != progress.iteration) fs::remove_all(all[i].second);
    }
  }
  g.world->barrier();  // nobody goes on (or exits) before the checkpoint is published
  const double secs = timer.seconds();
  log_line(str_cat(" > saved checkpoint at iteration ", progress.iteration, " to ", final_dir,
                   " in ", secs, " s (", bytes / 1e6, " MB, ", bytes / 1e6 / secs, " MB/s)"));
}

namespace {

// The pieces of one checkpoint, by key, with lazily mapped and verified shard files.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& dir, const json& meta) : dir_(dir) {
    for (const json& r : meta.at("ranks")) {
      const std::string ipath = dir + "/" + r.at("index").get<std::string>();
      const std::string text = ckpt::read_text_file(ipath);
      MG_USER_CHECK(ckpt::crc32_of(text.data(), text.size()) == r.at("index_crc32").get<uint32_t>(),
                    "checkpoint index '", ipath, "' is corrupt (checksum mismatch)");
      const json index = json::parse(text);
      files_.push_back({dir + "/" + r.at("bin").get<std::string>(),
                        r.at("bin_bytes").get<uint64_t>(), r.at("bin_crc32").get<uint32_t>(), nullptr});
      for (const json& p : index.at("pieces")) by_key_[p.at("key")].push_back({files_.size() - 1, p});
    }
  }
  bool has(const std::string& key) const { return by_key_.count(key) > 0; }

  // The whole tensor `key` in f32 (row-major, global shape), assembled from its pieces.
  std::vector<float> global(const std::string& key, Shape& shape) {
    const auto& pieces = by_key_.at(key);
    shape = pieces.front().meta.at("global_shape").get<Shape>();
    std::vector<float> out(size_t(shape_numel(shape)), 0.f);
    std::vector<char> covered(out.size(), 0);
    for (const Src& s : pieces) {
      const json& m = s.meta;
      MG_USER_CHECK(m.at("global_shape").get<Shape>() == shape, "checkpoint '", dir_, "': pieces of ",
                    key, " disagree on its global shape");
      ParamSpec spec;
      spec.shape = m.at("local_shape").get<Shape>();
      spec.global_shape = shape;
      spec.sharding.split_dim = m.at("tp_split_dim").get<int>();
      spec.sharding.stride = m.value("tp_stride", int64_t(1));  // version 1: no strides
      const int64_t tp_size = m.at("tp_size");
      // The shard must be a 1/tp_size slice of the global tensor along its split dim, in
      // `stride` equal parts, or the index arithmetic would leave the tensor.
      Shape expect = shape;
      const int dim = spec.sharding.split_dim;
      bool ok = tp_size >= 1 && spec.sharding.stride >= 1 && dim < int(shape.size());
      if (ok && dim >= 0) {
        ok = shape[size_t(dim)] % (tp_size * spec.sharding.stride) == 0;
        expect[size_t(dim)] /= tp_size;
      }
      MG_USER_CHECK(ok && spec.shape == expect, "checkpoint '", dir_, "': piece of ", key,
                    " has local shape ", shape_str(spec.shape), " split along dim ", dim,
                    " with stride ", spec.sharding.stride, " over ", tp_size,
                    " ranks, which is not a shard of ", shape_str(shape));
      const int64_t tp = m.at("tp_size"), r = m.at("tp_rank"), b = m.at("local_begin"),
                    n = m.at("numel"), off = m.at("offset");
      const DType t = dtype_from_name(m.at("dtype"), files_[s.file].path);
      const char* src = file(s.file) + off;
      MG_USER_CHECK(off >= 0 && uint64_t(off) + uint64_t(n) * dtype_size(t) <= files_[s.file].bytes,
                    "checkpoint file '", files_[s.file].path, "': piece of ", key,
                    " lies outside the file");
      for (int64_t j = 0; j < n; ++j) {
        const int64_t gi = global_index(spec, b + j, tp, r);
        MG_USER_CHECK(gi >= 0 && gi < int64_t(out.size()), "checkpoint '", dir_, "': piece of ",
                      key, " outside its global shape");
        out[size_t(gi)] = cpu::load_f32(src, t, j);
        covered[size_t(gi)] = 1;
      }
    }
    covered_ = std::move(covered);
    return out;
  }
  bool covered(int64_t i) const { return covered_[size_t(i)] != 0; }
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct FileInfo {
    std::string path;
    uint64_t bytes;
    uint32_t crc;
    std::unique_ptr<ckpt::MappedFile> map;
  };
  struct Src {
    size_t file;
    json meta;
  };
  // Maps a shard file on first use and verifies its size and checksum.
  const char* file(size_t i) {
    FileInfo& f = files_[i];
    if (!f.map) {
      f.map = std::make_unique<ckpt::MappedFile>(f.path);
      MG_USER_CHECK(f.map->size() == f.bytes, "checkpoint file '", f.path, "' has ",
                    f.map->size(), " bytes but the metadata says ", f.bytes, " (truncated?)");
      MG_USER_CHECK(ckpt::crc32_of(f.map->data(), f.map->size()) == f.crc, "checkpoint file '",
                    f.path, "' is corrupt (CRC-32 mismatch)");
      bytes_read_ += f.bytes;
    }
    return f.map->data();
  }
  std::string dir_;
  std::vector<FileInfo> files_;
  std::map<std::string, std::vector<Src>> by_key_;
  std::vector<char> covered_;
  uint64_t bytes_read_ = 0;
};

// A model record back into a config; a field missing from the record (an older checkpoint)
// keeps the value that checkpoint was trained with: the GPT-2 default.
GPTConfig config_from_json(const json& m, const std::string& path) {
  GPTConfig c;
  for (const ModelField& f : model_fields()) {
    if (!m.contains(f.key)) continue;
    const json& v = m.at(f.key);
    try {
      set_field(c, f, v.is_string() ? v.get<std::string>() : v.dump());
    } catch (const UsageError&) {
      MG_USER_CHECK(false, "checkpoint metadata '", path, "': model field ", f.key, " = ",
                    v.dump(), " is not a valid value");
    }
  }
  return c;
}

// A field's value as the flags that give it: "--num-layers 4", "--swiglu", "no --swiglu".
std::string as_flags(const ModelField& f, const json& v) {
  if (f.metavar[0] != '\0')
    return std::string(f.flag) + " " + (v.is_string() ? v.get<std::string>() : v.dump());
  const bool on = v.get<bool>() != f.negated;
  return (on ? "" : "no ") + std::string(f.flag);
}

}  // namespace

json model_record(const GPTConfig& c) { return model_json(c); }

void check_model_record(const json& saved, const GPTConfig& c, const std::string& path) {
  const json now = model_json(c), was = model_json(config_from_json(saved, path));
  std::string diff;
  for (const ModelField& f : model_fields()) {
    if (!f.structural || was.at(f.key) == now.at(f.key)) continue;
    diff += str_cat(diff.empty() ? "" : "; ", f.key, ": checkpoint ", as_flags(f, was.at(f.key)),
                    ", this run ", as_flags(f, now.at(f.key)));
  }
  MG_USER_CHECK(diff.empty(), path, " holds another model (", diff,
                "); pass the model flags it was trained with");
}

namespace {

// A checkpoint directory's metadata.json, checked for format and version.
json read_metadata(const std::string& dir) {
  const std::string path = dir + "/metadata.json";
  json meta;
  try {
    meta = json::parse(ckpt::read_text_file(path));
  } catch (const json::exception& e) {
    MG_USER_CHECK(false, "checkpoint metadata '", path, "' is unreadable: ", e.what());
  }
  MG_USER_CHECK(meta.value("format", "") == kFormat, "'", path, "' is not a ", kFormat,
                " metadata file");
  const int version = meta.value("version", 0);
  MG_USER_CHECK(version >= 1 && version <= kCheckpointVersion, "'", path,
                "' has format version ", meta.value("version", 0),
                "; this build reads versions 1 to ", kCheckpointVersion);
  return meta;
}

}  // namespace

std::string latest_checkpoint_dir(const std::string& dir) {
  const std::string latest = dir + "/" + kLatest;
  if (!fs::exists(latest)) return "";
  const std::string text = ckpt::read_text_file(latest);
  size_t used = 0;
  int64_t iteration = -1;
  try {
    iteration = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  MG_USER_CHECK(iteration >= 0 && text.find_first_not_of(" \n", used) == std::string::npos,
                "'", latest, "' should hold an iteration number, not '", text, "'");
  return dir + "/" + checkpoint_dir_name(iteration);
}

GPTConfig checkpoint_model_config(const std::string& dir) {
  const std::string ckdir = latest_checkpoint_dir(dir);
  MG_USER_CHECK(!ckdir.empty(), "'", dir, "' holds no checkpoint (no ", kLatest, ")");
  GPTConfig c = config_from_json(read_metadata(ckdir).at("model"), ckdir);  // model_json()'s fields
  c.validate();
  return c;
}

bool load_checkpoint(const CheckpointIO& io, TrainProgress& progress) {
  Timer timer;
  const CheckpointConfig& c = io.cfg;
  const std::string dir = latest_checkpoint_dir(c.load);
  if (dir.empty()) {
    MG_USER_CHECK(!c.exit_on_missing_checkpoint, "--load ", c.load, ": no checkpoint there (",
                  c.load, "/", kLatest, " is missing) and --exit-on-missing-checkpoint is set");
    log_line(str_cat(" > no checkpoint in '", c.load, "' (no ", kLatest, "): starting from scratch"));
    return false;
  }
  const json meta = read_metadata(dir);
  check_model_record(meta.at("model"), c.model, "checkpoint '" + dir + "'");
  CheckpointReader reader(dir, meta);

  const bool load_optim =
      !c.no_load_optim && !c.finetune && meta.at("optimizer").at("saved").get<bool>();
  MG_USER_CHECK(!load_optim || meta.at("optimizer").at("kind") == c.optimizer, "checkpoint '", dir,
                "' holds ", meta.at("optimizer").at("kind").dump(), " state but this run uses --optimizer ",
                c.optimizer, " (pass --no-load-optim to start the optimizer afresh)");
  std::vector<LocalPiece> wanted = local_pieces(io, false, load_optim);
  // Where each wanted key comes from: f32 models prefer the fp32 main params a 16-bit run
  // saved; 16-bit runs' main params fall back to the weights of an f32 checkpoint.
  const bool f32_model = io.model.dtype() == DType::F32;
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
                  src.rfind("optim/", 0) == 0 ? " (saved with --no-save-optim? pass --no-load-optim)"
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
      const bool rows_may_differ = p.sharding.vocab_padded && shape.size() == 2 &&
                                   shape[1] == p.global_shape[1];
      MG_USER_CHECK(shape == p.global_shape || rows_may_differ, "checkpoint '", dir, "': ", key,
                    " has shape ", shape_str(shape), " but this model expects ",
                    shape_str(p.global_shape));
      values.assign(size_t(pc->n), 0.f);
      for (int64_t j = 0; j < pc->n; ++j) {
        const int64_t gi = global_index(p, pc->begin + j, io.groups.grid.tp, io.groups.coord.tp);
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
  if (load_optim)
    io.optimizer.set_steps_taken(meta.at("optimizer").at("steps").get<int64_t>());
  else  // a 16-bit model's fp32 main params start from the loaded weights, not from init
    io.optimizer.copy_main_from(io.model.param_data());
  if (!c.finetune) {
    progress.iteration = meta.at("iteration");
    progress.consumed_train_samples = meta.at("consumed_train_samples");
    progress.consumed_valid_samples = meta.at("consumed_valid_samples");
    progress.skipped_iterations = meta.value("skipped_iterations", int64_t(0));
    if (load_optim) progress.scheduler_samples = meta.at("scheduler_samples");
    if (load_optim && meta.contains("loss_scaler")) {
      const json& s = meta["loss_scaler"];
      progress.has_scaler = true;
      progress.scaler = {s.at("scale"), s.at("growth_tracker"), s.at("hysteresis_tracker")};
    }
  }
  if (!c.no_load_rng && meta.at("rng").at("seed").get<uint32_t>() != c.seed)
    log_line(str_cat(" > note: the checkpoint was trained with --seed ", meta["rng"]["seed"].dump(),
                     "; this run's --seed ", c.seed, " decides the data order from here"));
  log_line(str_cat(" > loaded checkpoint '", dir, "' (iteration ", meta.at("iteration").dump(),
                   ", saved with TP ", meta["layout"]["tensor_model_parallel_size"].dump(), " PP ",
                   meta["layout"]["pipeline_model_parallel_size"].dump(), " DP ",
                   meta["layout"]["data_parallel_size"].dump(), ", ", meta["precision"].dump(),
                   load_optim ? ", with optimizer state" : ", weights only", ") in ",
                   timer.seconds(), " s (rank 0 read and verified ", reader.bytes_read() / 1e6,
                   " MB, ", reader.bytes_read() / 1e6 / timer.seconds(), " MB/s)"));
  return true;
}

}  // namespace mg
