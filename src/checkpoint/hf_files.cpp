#include "checkpoint/hf_files.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/json_fields.h"
#include "core/error.h"
#include "core/parse_number.h"

namespace mg {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";
}  // namespace

DType dtype_of_safetensors(const std::string& s, const std::string& what) {
  if (s == "F32") return DType::F32;
  if (s == "BF16") return DType::BF16;
  MG_USER_CHECK(s == "F16", what, " has dtype ", s, "; megatron convert reads F32, BF16 and F16");
  return DType::F16;
}

const char* safetensors_dtype(DType t) {
  return t == DType::F32 ? "F32" : t == DType::BF16 ? "BF16" : "F16";
}

const char* torch_dtype_name(DType t) {
  return t == DType::F32 ? "float32" : t == DType::BF16 ? "bfloat16" : "float16";
}

uint64_t parse_shard_size(const std::string& text, const std::string& flag) {
  static const std::pair<const char*, uint64_t> units[] = {{"GiB", uint64_t(1) << 30},
                                                           {"MiB", uint64_t(1) << 20},
                                                           {"KiB", uint64_t(1) << 10},
                                                           {"GB", 1000000000},
                                                           {"MB", 1000000},
                                                           {"KB", 1000}};
  for (const auto& [unit, scale] : units) {
    const std::string u = unit;
    if (text.size() > u.size() && text.ends_with(u)) {
      const double v = parse_number<double>(flag, text.substr(0, text.size() - u.size()));
      MG_USER_CHECK(v > 0 && v * double(scale) < 1e18, flag, " '", text, "' must be positive");
      return uint64_t(v * double(scale));
    }
  }
  const int64_t v = parse_number<int64_t>(flag, text);
  MG_USER_CHECK(v > 0, flag, " '", text, "' must be positive (bytes, or e.g. 5GB, 500MB, 2GiB)");
  return uint64_t(v);
}

HfTensorFiles::HfTensorFiles(const std::string& dir) {
  std::error_code ec;
  const std::string index = dir + "/" + kIndex, single = dir + "/" + kSingle;
  if (!fs::exists(index, ec)) {
    MG_USER_CHECK(fs::exists(single, ec), "HF directory '", dir, "' has neither ", kSingle, " nor ",
                  kIndex);
    describe_ = "'" + single + "'";
    files_.push_back(std::make_unique<SafetensorsReader>(single));
    for (const auto& [name, t] : files_[0]->tensors()) where_[name] = 0;
    return;
  }
  describe_ = "'" + index + "'";
  const std::string what = "HF index '" + index + "'";
  const json j = ckpt::JsonFields::parse_object(ckpt::read_text_file(index), what);
  const ckpt::JsonFields f(j, what);
  const json& map = f.raw("weight_map");
  MG_USER_CHECK(map.is_object(), f.name("weight_map"), " must be an object {tensor: file}");
  std::map<std::string, size_t> file_index;
  for (auto it = map.begin(); it != map.end(); ++it) {
    MG_USER_CHECK(it.value().is_string(), f.name("weight_map"), " maps ", it.key(), " to ",
                  it.value().dump(), ", not a file name");
    const std::string file = it.value().get<std::string>();
    MG_USER_CHECK(file.find('/') == std::string::npos && file != ".." && !file.empty(),
                  f.name("weight_map"), " names file '", file, "' outside ", dir);
    if (!file_index.count(file)) {
      const std::string path = dir + "/" + file;
      MG_USER_CHECK(fs::exists(path, ec), what, " names shard '", file, "' but '", path,
                    "' is missing");
      file_index[file] = files_.size();
      files_.push_back(std::make_unique<SafetensorsReader>(path));
    }
    const size_t k = file_index[file];
    MG_USER_CHECK(files_[k]->has(it.key()), what, " maps tensor '", it.key(), "' to '",
                  files_[k]->path(), "', which lacks it");
    where_[it.key()] = k;
  }
  // Tensors of the shards that the index does not list are still the model's.
  for (size_t k = 0; k < files_.size(); ++k)
    for (const auto& [name, t] : files_[k]->tensors()) where_.emplace(name, k);
}

const SafeTensor& HfTensorFiles::get(const std::string& name) const {
  auto it = where_.find(name);
  MG_USER_CHECK(it != where_.end(), describe_, " has no tensor '", name,
                "' (config.json says the model has it)");
  return files_[it->second]->get(name);
}

std::vector<std::string> HfTensorFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, k] : where_) out.push_back(name);
  return out;
}

void HfTensorFiles::release(const SafeTensor& t) const { files_[where_.at(t.name)]->release(t); }

HfShardedWriter::HfShardedWriter(const std::string& dir, std::vector<HfTensorInfo> tensors,
                                 uint64_t max_shard_bytes)
    : dir_(dir), tensors_(std::move(tensors)) {
  // save_pretrained's rule: a tensor that would take a non-empty shard past the limit starts
  // the next one (a tensor larger than the limit gets a shard of its own).
  uint64_t in_shard = 0;
  size_t shards = 1;
  for (const HfTensorInfo& t : tensors_) {
    if (in_shard > 0 && in_shard + t.bytes() > max_shard_bytes) ++shards, in_shard = 0;
    in_shard += t.bytes();
    shard_of_.push_back(shards - 1);
  }
  for (size_t s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards);
    files_.push_back(shards == 1 ? kSingle : name);
  }
}

void HfShardedWriter::open_shard(size_t s) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (shard_of_[i] != s) continue;
    const HfTensorInfo& t = tensors_[i];
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';  // the data starts 8-byte aligned
  out_ = std::make_unique<ckpt::AtomicFileWriter>(dir_ + "/" + files_[s]);
  const uint64_t n = text.size();
  out_->write(&n, 8);
  out_->write(text.data(), text.size());
}

void HfShardedWriter::write(const std::string& name, const void* data) {
  MG_CHECK(next_ < tensors_.size() && tensors_[next_].name == name, "HF writer: ", name,
           " out of the planned order");
  const size_t s = shard_of_[next_];
  if (next_ == 0 || shard_of_[next_ - 1] != s) open_shard(s);
  out_->write(data, tensors_[next_].bytes());
  ++next_;
  if (next_ == tensors_.size() || shard_of_[next_] != s) {
    out_->commit();
    out_.reset();
  }
}

std::vector<std::string> HfShardedWriter::finish() {
  MG_CHECK(next_ == tensors_.size(), "HF writer: ", tensors_.size() - next_, " tensors missing");
  if (files_.size() == 1) return files_;
  nlohmann::ordered_json weight_map;
  uint64_t total = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    weight_map[tensors_[i].name] = files_[shard_of_[i]];
    total += tensors_[i].bytes();
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weight_map;
  ckpt::write_file_atomic(dir_ + "/" + kIndex, index.dump(2) + "\n");
  std::vector<std::string> out = files_;
  out.push_back(kIndex);
  return out;
}

}  // namespace mg
