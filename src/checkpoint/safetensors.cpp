#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "backend/ops.h"
#include "core/error.h"

namespace mg {

namespace {

using json = nlohmann::json;

// The reference implementation's limit on the JSON header.
constexpr uint64_t kMaxHeader = 100'000'000;

// Bits per element of each safetensors dtype (0: unknown).
int dtype_bits(const std::string& s) {
  static const std::map<std::string, int> bits = {
      {"BOOL", 8},    {"U8", 8},   {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8},
      {"F8_E8M0", 8}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"I16", 16},
      {"U16", 16},    {"F16", 16}, {"BF16", 16},   {"I32", 32},    {"U32", 32},
      {"F32", 32},    {"F64", 64}, {"I64", 64},    {"U64", 64},    {"C64", 64}};
  auto it = bits.find(s);
  return it == bits.end() ? 0 : it->second;
}

// One header entry, every field checked; `where` prefixes each message.
SafetensorsEntry parse_entry(const std::string& name, const json& e, const std::string& where) {
  MG_USER_CHECK(e.is_object(), where, " is not an object of dtype, shape, data_offsets");
  SafetensorsEntry t;
  t.name = name;
  MG_USER_CHECK(e.contains("dtype") && e["dtype"].is_string(), where, ": field 'dtype' is ",
                e.contains("dtype") ? "not a string" : "missing");
  t.dtype = e["dtype"].get<std::string>();
  const int bits = dtype_bits(t.dtype);
  MG_USER_CHECK(bits > 0, where, ": field 'dtype' is '", t.dtype,
                "', not a safetensors dtype (F32, F16, BF16, I64, ...)");
  MG_USER_CHECK(e.contains("shape") && e["shape"].is_array(), where,
                ": field 'shape' is not a list of dimensions");
  uint64_t numel = 1;
  for (const json& d : e["shape"]) {
    MG_USER_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), where,
                  ": field 'shape' ", e["shape"].dump(), " holds ", d.dump(),
                  ", not a non-negative integer");
    MG_USER_CHECK(!__builtin_mul_overflow(numel, d.get<uint64_t>(), &numel), where,
                  ": field 'shape' ", e["shape"].dump(), " has more than 2^64 elements");
    t.shape.push_back(d.get<int64_t>());
  }
  uint64_t nbits = 0;
  MG_USER_CHECK(!__builtin_mul_overflow(numel, uint64_t(bits), &nbits) &&
                    checked_shape_numel(t.shape).has_value(),
                where, ": field 'shape' ", e["shape"].dump(), " of ", t.dtype,
                " has more bytes than a file can hold");
  MG_USER_CHECK(nbits % 8 == 0, where, ": ", numel, " elements of ", bits, "-bit dtype ", t.dtype,
                " do not fill whole bytes");
  const json* off = e.contains("data_offsets") ? &e["data_offsets"] : nullptr;
  MG_USER_CHECK(off && off->is_array() && off->size() == 2 && (*off)[0].is_number_unsigned() &&
                    (*off)[1].is_number_unsigned(),
                where, ": field 'data_offsets' is ", off ? off->dump() : std::string("missing"),
                ", not two non-negative integers [begin, end]");
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  MG_USER_CHECK(t.begin <= t.end, where, ": field 'data_offsets' [", t.begin, ", ", t.end,
                "] ends before it begins");
  MG_USER_CHECK(t.end - t.begin == nbits / 8, where, ": field 'data_offsets' [", t.begin, ", ",
                t.end, "] spans ", t.end - t.begin, " bytes but shape ", e["shape"].dump(), " of ",
                t.dtype, " needs ", nbits / 8);
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const char* data, size_t size, const std::string& path) {
  const std::string file = "'" + path + "'";
  MG_USER_CHECK(size >= 8, file, " is not a safetensors file (", size,
                " bytes; it starts with an 8-byte header length)");
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  MG_USER_CHECK(n <= size - 8, file, ": header length ", n, " exceeds the file's ", size - 8,
                " bytes after it (truncated, or not a safetensors file)");
  MG_USER_CHECK(n <= kMaxHeader, file, ": header length ", n,
                " exceeds the 100 MB limit of the format (corrupted?)");
  // JSON objects may repeat a name and parsers keep one of them silently: refuse instead.
  std::set<std::string> names;
  std::string repeated;
  const json::parser_callback_t once = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && repeated.empty() &&
        !names.insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(data + 8, data + 8 + n, once);
  } catch (const json::exception& e) {
    throw UsageError(str_cat(file, ": the header is not valid JSON: ", e.what()));
  }
  MG_USER_CHECK(header.is_object(), file, ": the header is a JSON ", header.type_name(),
                ", not an object of tensors");
  MG_USER_CHECK(repeated.empty(), file, ": the header names '", repeated, "' twice");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      MG_USER_CHECK(it.value().is_object(), file, ": __metadata__ is not a string -> string map");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        MG_USER_CHECK(m.value().is_string(), file, ": __metadata__ entry '", m.key(), "' is ",
                      m.value().dump(), ", not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(it.key(), it.value(), file + ": tensor '" + it.key() + "'"));
  }
  // The reference's rule: sorted by offsets, the tensors tile the data from 0 to the file end.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t at = 0;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const SafetensorsEntry& t = h.tensors[i];
    MG_USER_CHECK(t.begin >= at, file, ": tensor '", t.name, "' bytes [", t.begin, ", ", t.end,
                  ") overlap tensor '", h.tensors[i - 1].name, "' bytes [", h.tensors[i - 1].begin,
                  ", ", h.tensors[i - 1].end, ") (field data_offsets)");
    MG_USER_CHECK(t.begin == at, file, ": data bytes [", at, ", ", t.begin,
                  ") belong to no tensor (a gap before tensor '", t.name, "'; field data_offsets)");
    at = t.end;
  }
  MG_USER_CHECK(at == size - h.data_start, file, ": the tensors end at data byte ", at,
                " but the file holds ", size - h.data_start,
                " data bytes (truncated, or bytes no tensor owns)");
  return h;
}

std::vector<float> SafeTensor::to_f32() const {
  const int64_t n = shape_numel(shape);
  std::vector<float> out(static_cast<size_t>(n));
  MG_USER_CHECK(dtype == "F32" || dtype == "F16" || dtype == "BF16", "'", path, "': tensor '", name,
                "' has dtype ", dtype, "; GPT-2 conversion reads F32, F16 and BF16");
  if (n == 0) return out;  // an empty vector's data() is null: nothing to copy
  if (dtype == "F32") {
    std::memcpy(out.data(), data, size_t(n) * 4);
    return out;
  }
  const DType t = dtype == "F16" ? DType::F16 : DType::BF16;
  // The file's bytes may sit at an odd address: the cast reads an aligned copy.
  std::vector<uint16_t> aligned(static_cast<size_t>(n));
  std::memcpy(aligned.data(), data, size_t(n) * 2);
  cpu::cast_to_f32(out.data(), aligned.data(), t, n);
  return out;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  file_ = std::make_unique<ckpt::MappedFile>(path);
  const SafetensorsHeader h = parse_safetensors_header(file_->data(), file_->size(), path);
  for (const SafetensorsEntry& e : h.tensors)
    tensors_.emplace(e.name,
                     SafeTensor{e.name, e.dtype, e.shape, file_->data() + h.data_start + e.begin,
                                path, e.end - e.begin});
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
    header[t.name] = {{"dtype", "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
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
