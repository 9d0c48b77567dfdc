#include "checkpoint/metadata.h"

#include <climits>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "checkpoint/files.h"
#include "checkpoint/json_fields.h"
#include "checkpoint/model_record.h"
#include "core/error.h"

namespace mg {

namespace {

using json = nlohmann::json;
using ckpt::JsonFields;
using ckpt::kMaxCount;

constexpr const char* kFormat = "megatron-cpp-checkpoint";
constexpr const char* kChecksumKey = "metadata_crc32";
constexpr int64_t kMaxRanks = 1 << 20;  // far above any cluster; bounds tp * pp * dp

// The CRC-32 of a document's canonical text: compact, keys sorted (nlohmann's std::map
// order), without the checksum field itself. Parsing and dumping again gives the same text.
uint32_t canonical_crc(json j) {
  j.erase(kChecksumKey);
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return ckpt::crc32_of(text.data(), text.size());
}

DType dtype_of(const JsonFields& f, const std::string& key) {
  const std::string s =
      f.one_of(key, {dtype_name(DType::F32), dtype_name(DType::BF16), dtype_name(DType::F16)});
  return s == dtype_name(DType::BF16)  ? DType::BF16
         : s == dtype_name(DType::F16) ? DType::F16
                                       : DType::F32;
}

// format and version, shared by both kinds of file.
int check_format(const JsonFields& f, const std::string& what) {
  MG_USER_CHECK(f.has("format") && f.raw("format") == kFormat, what, " is not a ", kFormat,
                " file (its \"format\" is not \"", kFormat, "\")");
  try {
    return int(f.integer("version", 1, kCheckpointVersion));
  } catch (const UsageError& e) {
    throw UsageError(
        str_cat(e.what(), " (this build reads format versions 1 to ", kCheckpointVersion, ")"));
  }
}

// A shape of 1 to 4 positive dims whose element count stays far from overflow.
Shape checked_shape(const JsonFields& f, const std::string& key) {
  const std::vector<int64_t> dims = f.integers(key, 1, INT_MAX);
  MG_USER_CHECK(!dims.empty() && dims.size() <= 4, f.name(key), " must have 1 to 4 dims, got ",
                dims.size());
  int64_t n = 1;
  for (int64_t d : dims) {
    n *= d;  // < 2^40 * 2^31: no overflow
    MG_USER_CHECK(n <= (int64_t(1) << 40), f.name(key), " has more than 2^40 elements");
  }
  return dims;
}

}  // namespace

std::string rank_name(int64_t r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05lld", (long long)r);
  return buf;
}

std::string checkpoint_metadata_text(const CheckpointMetadata& m) {
  json meta = {
      {"format", kFormat},
      {"version", kCheckpointVersion},
      {"iteration", m.iteration},
      {"consumed_train_samples", m.consumed_train_samples},
      {"consumed_valid_samples", m.consumed_valid_samples},
      {"scheduler_samples", m.scheduler_samples},
      {"skipped_iterations", m.skipped_iterations},
      {"optimizer",
       {{"kind", m.optimizer}, {"saved", m.optimizer_saved}, {"steps", m.optimizer_steps}}},
      {"rng", {{"seed", m.seed}}},
      {"model", model_record(m.model)},
      {"precision", dtype_name(m.precision)},
      {"layout",
       {{"tensor_model_parallel_size", m.tp},
        {"pipeline_model_parallel_size", m.pp},
        {"data_parallel_size", m.dp},
        {"context_parallel_size", m.cp},
        {"use_distributed_optimizer", m.distributed_optimizer}}},
      {"args", m.args}};
  if (m.loss_scaler)
    meta["loss_scaler"] = {{"scale", m.loss_scaler->scale},
                           {"growth_tracker", m.loss_scaler->growth_tracker},
                           {"hysteresis_tracker", m.loss_scaler->hysteresis_tracker}};
  json& ranks = meta["ranks"] = json::array();
  for (const ShardFiles& r : m.ranks)
    ranks.push_back({{"index", r.index},
                     {"index_crc32", r.index_crc32},
                     {"bin", r.bin},
                     {"bin_bytes", r.bin_bytes},
                     {"bin_crc32", r.bin_crc32}});
  meta[kChecksumKey] = canonical_crc(meta);
  return meta.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

CheckpointMetadata parse_checkpoint_metadata(const std::string& text, const std::string& path) {
  const std::string what = "checkpoint metadata '" + path + "'";
  const json j = JsonFields::parse_object(text, what);
  const JsonFields f(j, what);
  CheckpointMetadata m;
  m.version = check_format(f, what);
  if (m.version >= 3) {
    const uint32_t want = f.crc(kChecksumKey), got = canonical_crc(j);
    MG_USER_CHECK(want == got, what, " is corrupt or was edited: its ", kChecksumKey, " is ", want,
                  " but its content gives ", got);
  }
  m.iteration = f.integer("iteration", 0);
  m.consumed_train_samples = f.integer("consumed_train_samples", 0);
  m.consumed_valid_samples = f.integer("consumed_valid_samples", 0);
  m.scheduler_samples = f.integer("scheduler_samples", 0);
  // Older checkpoints may lack the count of skipped (fp16 overflow) iterations: none then.
  m.skipped_iterations = m.version < 3 && !f.has("skipped_iterations")
                             ? 0
                             : f.integer("skipped_iterations", 0, m.iteration);
  const JsonFields opt = f.object("optimizer");
  m.optimizer = opt.one_of("kind", {"adam", "sgd"});
  m.optimizer_saved = opt.boolean("saved");
  m.optimizer_steps = opt.integer("steps", 0);
  m.seed = uint32_t(f.object("rng").integer("seed", 0, UINT32_MAX));
  MG_USER_CHECK(f.raw("model").is_object(), f.name("model"), " must be an object");
  m.model = model_from_record(f.raw("model"), what);
  m.precision = dtype_of(f, "precision");
  const JsonFields layout = f.object("layout");
  m.tp = layout.integer("tensor_model_parallel_size", 1, kMaxRanks);
  m.pp = layout.integer("pipeline_model_parallel_size", 1, kMaxRanks);
  m.dp = layout.integer("data_parallel_size", 1, kMaxRanks);
  m.cp = layout.has("context_parallel_size") ? layout.integer("context_parallel_size", 1, kMaxRanks)
                                             : 1;
  m.distributed_optimizer = layout.boolean("use_distributed_optimizer");
  m.args = f.strings("args");
  if (f.has("loss_scaler")) {
    const JsonFields s = f.object("loss_scaler");
    m.loss_scaler =
        LossScalerState{s.number("scale", 1e-300, 1e300), s.integer("growth_tracker", 0),
                        s.integer("hysteresis_tracker", -kMaxCount)};
  }
  const std::vector<JsonFields> ranks = f.objects("ranks");
  MG_USER_CHECK(int64_t(ranks.size()) == m.tp * m.cp * m.pp * m.dp, f.name("ranks"), " lists ",
                ranks.size(), " ranks but the layout (TP ", m.tp, " x CP ", m.cp, " x PP ", m.pp,
                " x DP ", m.dp, ") has ", m.tp * m.cp * m.pp * m.dp);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const JsonFields& e = ranks[r];
    ShardFiles s{e.string("index"), e.crc("index_crc32"), e.string("bin"),
                 uint64_t(e.integer("bin_bytes", 0)), e.crc("bin_crc32")};
    // Fixed names: a name from the file never leads outside the checkpoint directory.
    const std::string stem = rank_name(int64_t(r));
    MG_USER_CHECK(s.index == stem + ".json", e.name("index"), " must be \"", stem, ".json\"");
    MG_USER_CHECK(s.bin == stem + ".bin", e.name("bin"), " must be \"", stem, ".bin\"");
    m.ranks.push_back(std::move(s));
  }
  return m;
}

std::string shard_index_text(const ShardIndex& s) {
  json index = {{"format", kFormat}, {"version", kCheckpointVersion}, {"rank", s.rank},
                {"bin", s.bin},      {"bin_bytes", s.bin_bytes},      {"bin_crc32", s.bin_crc32}};
  json& list = index["pieces"] = json::array();
  for (const PieceInfo& p : s.pieces)
    list.push_back({{"key", p.key},
                    {"dtype", dtype_name(p.dtype)},
                    {"global_shape", p.global_shape},
                    {"local_shape", p.local_shape},
                    {"tp_split_dim", p.tp_split_dim},
                    {"tp_stride", p.tp_stride},
                    {"tp_size", p.tp_size},
                    {"tp_rank", p.tp_rank},
                    {"local_begin", p.local_begin},
                    {"numel", p.numel},
                    {"offset", p.offset}});
  return index.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

ShardIndex parse_shard_index(const std::string& text, const std::string& path) {
  const std::string what = "checkpoint index '" + path + "'";
  const json j = JsonFields::parse_object(text, what);
  const JsonFields f(j, what);
  const int version = check_format(f, what);
  ShardIndex s{f.integer("rank", 0, kMaxRanks - 1),
               f.string("bin"),
               uint64_t(f.integer("bin_bytes", 0)),
               f.crc("bin_crc32"),
               {}};
  for (const JsonFields& e : f.objects("pieces")) {
    PieceInfo p;
    p.key = e.string("key");
    p.dtype = dtype_of(e, "dtype");
    p.global_shape = checked_shape(e, "global_shape");
    p.local_shape = checked_shape(e, "local_shape");
    const int64_t ndim = int64_t(p.global_shape.size());
    p.tp_split_dim = int(e.integer("tp_split_dim", -1, ndim - 1));
    p.tp_stride = version >= 2 ? e.integer("tp_stride", 1, 1 << 16) : 1;  // version 1: none
    p.tp_size = e.integer("tp_size", 1, kMaxRanks);
    p.tp_rank = e.integer("tp_rank", 0, p.tp_size - 1);
    // The shard must be a 1/tp_size slice of the global tensor along its split dim, in
    // `stride` equal parts, or the index arithmetic would leave the tensor.
    Shape expect = p.global_shape;
    bool ok = true;
    if (p.tp_split_dim >= 0) {
      int64_t& d = expect[size_t(p.tp_split_dim)];
      ok = d % (p.tp_size * p.tp_stride) == 0;
      d /= p.tp_size;
    }
    MG_USER_CHECK(ok && p.local_shape == expect, what, ": piece ", p.key, " has local shape ",
                  shape_str(p.local_shape), " split along dim ", p.tp_split_dim, " with stride ",
                  p.tp_stride, " over ", p.tp_size, " ranks, which is not a shard of ",
                  shape_str(p.global_shape));
    p.local_begin = e.integer("local_begin", 0, shape_numel(p.local_shape));
    p.numel = e.integer("numel", 0, shape_numel(p.local_shape) - p.local_begin);
    p.offset = uint64_t(e.integer("offset", 0));
    s.pieces.push_back(std::move(p));
  }
  return s;
}

}  // namespace mg
