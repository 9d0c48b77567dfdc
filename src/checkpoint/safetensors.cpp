#include "checkpoint/safetensors.h"

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "backend/ops.h"
#include "core/error.h"

namespace mg {

namespace {
DType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  MG_USER_CHECK(false, "'", path, "': tensor ", name, " has dtype ", s,
                "; GPT-2 conversion reads F32, F16 and BF16");
  return DType::F32;
}
}  // namespace

std::vector<float> SafeTensor::to_f32() const {
  std::vector<float> out(size_t(shape_numel(shape)));
  cpu::cast_to_f32(out.data(), data, dtype, int64_t(out.size()));
  return out;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  file_ = std::make_unique<ckpt::MappedFile>(path);
  const uint64_t size = file_->size();
  MG_USER_CHECK(size >= 8, "'", path, "' is not a safetensors file (", size, " bytes)");
  uint64_t n = 0;
  std::memcpy(&n, file_->data(), 8);
  MG_USER_CHECK(n <= size - 8, "'", path, "': header length ", n, " exceeds the file (truncated?)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_->data() + 8, file_->data() + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    MG_USER_CHECK(false, "'", path, "': unreadable safetensors header: ", e.what());
  }
  const char* base = file_->data() + 8 + n;
  const uint64_t data_bytes = size - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    SafeTensor t{parse_dtype(e.at("dtype"), path, it.key()), e.at("shape").get<Shape>(), nullptr};
    const auto off = e.at("data_offsets").get<std::vector<uint64_t>>();
    MG_USER_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_bytes, "'", path,
                  "': tensor ", it.key(), " lies outside the file (truncated?)");
    MG_USER_CHECK(off[1] - off[0] == uint64_t(shape_numel(t.shape)) * dtype_size(t.dtype), "'",
                  path, "': tensor ", it.key(), " has ", off[1] - off[0],
                  " bytes, its shape needs ", shape_numel(t.shape) * int64_t(dtype_size(t.dtype)));
    t.data = base + off[0];
    tensors_.emplace(it.key(), t);
  }
}

const SafeTensor& SafetensorsReader::get(const std::string& name) const {
  auto it = tensors_.find(name);
  MG_USER_CHECK(it != tensors_.end(), "'", path_, "' has no tensor '", name, "'");
  return it->second;
}

void write_safetensors(const std::string& path, const std::vector<NamedF32>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const NamedF32& t : tensors) {
    MG_CHECK(int64_t(t.values.size()) == shape_numel(t.shape), "tensor ", t.name, " size");
    const uint64_t bytes = t.values.size() * 4;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';  // the data starts 8-byte aligned
  ckpt::AtomicFileWriter w(path);
  const uint64_t n = text.size();
  w.write(&n, 8);
  w.write(text.data(), text.size());
  for (const NamedF32& t : tensors) w.write(t.values.data(), t.values.size() * 4);
  w.commit();
}

}  // namespace mg
