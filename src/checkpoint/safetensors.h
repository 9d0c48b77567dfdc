// The safetensors file format (Hugging Face): an 8-byte little-endian header length N, N bytes
// of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}} (offsets relative to the data that follows), then the raw tensors.
// Our own small reader and writer. The header is validated as the reference implementation
// does (safetensors/src/tensor.rs): the tensors, sorted by offsets, tile the data exactly.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/files.h"
#include "tensor/tensor.h"

namespace mg {

// One tensor of a validated header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as written: "F32", "BF16", "I64", ...
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) of the data section (after 8 + N bytes)
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                      // 8 + N
  std::vector<SafetensorsEntry> tensors;        // sorted by offsets
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Parses and validates the header of the safetensors image data[0, size) (the whole file):
// the 8-byte length within the file and at most 100 MB, well-formed JSON (an object, no name
// twice), each entry's dtype known, shape non-negative with an overflow-checked element count,
// data_offsets two non-decreasing integers with end - begin == numel * dtype size, the entries
// sorted by offset contiguous from 0 (no gap, no overlap) and ending exactly at the file end;
// __metadata__ a string -> string map. Throws UsageError naming `path`, the tensor and the
// field. Reads only data[0, 8 + N) (the fuzz target of the reader).
SafetensorsHeader parse_safetensors_header(const char* data, size_t size, const std::string& path);

struct SafeTensor {
  std::string name;
  std::string dtype;  // safetensors dtype name
  Shape shape;
  const char* data;    // into the mapped file; any alignment
  std::string path;    // the file (for messages)
  uint64_t bytes = 0;  // of data
  // The values as f32 (F32, F16, BF16); another dtype is a UsageError naming the tensor.
  std::vector<float> to_f32() const;
};

class SafetensorsReader {
 public:
  // Maps the file and validates its header (parse_safetensors_header).
  explicit SafetensorsReader(const std::string& path);
  const std::map<std::string, SafeTensor>& tensors() const { return tensors_; }
  const SafeTensor& get(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const std::string& path() const { return path_; }
  // Drops t's pages from memory once copied out (they are read again if touched).
  void release(const SafeTensor& t) const { file_->release(t.data, t.bytes); }

 private:
  std::string path_;
  std::unique_ptr<ckpt::MappedFile> file_;
  std::map<std::string, SafeTensor> tensors_;
};

struct NamedF32 {
  std::string name;
  Shape shape;
  std::vector<float> values;
};
// Writes F32 tensors in the given order (atomically: path.tmp, fsync, rename). On any failure
// (a full disk included) path.tmp is removed and path is left as it was.
void write_safetensors(const std::string& path, const std::vector<NamedF32>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace mg
