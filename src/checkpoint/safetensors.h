// The safetensors file format (Hugging Face): an 8-byte little-endian header length N, N bytes
// of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}} (offsets relative to the data that follows), then the raw tensors.
// Our own small reader and writer; F32, F16, BF16 are the dtypes a GPT-2 file holds.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/files.h"
#include "tensor/tensor.h"

namespace mg {

struct SafeTensor {
  DType dtype;
  Shape shape;
  const char* data;  // into the mapped file
  std::vector<float> to_f32() const;
};

class SafetensorsReader {
 public:
  // Validates the header and that every tensor's bytes lie inside the file.
  explicit SafetensorsReader(const std::string& path);
  const std::map<std::string, SafeTensor>& tensors() const { return tensors_; }
  const SafeTensor& get(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }

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
// Writes F32 tensors in the given order (atomically: path.tmp, fsync, rename).
void write_safetensors(const std::string& path, const std::vector<NamedF32>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace mg
