// A Hugging Face model directory's weight files: model.safetensors, or the shards that
// model.safetensors.index.json ({"metadata": {"total_size": bytes}, "weight_map": {name: file}})
// names, read through our safetensors reader; and the same layout written tensor by tensor,
// sharded as save_pretrained shards (a new file when the next tensor would pass max_shard_size).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/safetensors.h"

namespace mg {

// safetensors dtype names <-> ours and torch's (F32/float32, BF16/bfloat16, F16/float16).
DType dtype_of_safetensors(const std::string& st_dtype, const std::string& what);
const char* safetensors_dtype(DType t);
const char* torch_dtype_name(DType t);
// save_pretrained's max_shard_size: "5GB" (10^9), "500MB", "2GiB" (2^30), "100KB", or bytes.
uint64_t parse_shard_size(const std::string& text, const std::string& flag);

class HfTensorFiles {
 public:
  // Opens dir's weight files: every shard the index names must exist and hold the tensors
  // the index maps to it (a UsageError naming the index and the file otherwise).
  explicit HfTensorFiles(const std::string& dir);
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  // A UsageError naming the weight files when absent.
  const SafeTensor& get(const std::string& name) const;
  std::vector<std::string> names() const;
  // Drops a tensor's pages once it has been copied out.
  void release(const SafeTensor& t) const;
  // "'DIR/model.safetensors'" or "'DIR/model.safetensors.index.json'" (for messages).
  const std::string& describe() const { return describe_; }

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t> where_;  // tensor -> its file
  std::string describe_;
};

struct HfTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t bytes() const { return uint64_t(shape_numel(shape)) * dtype_size(dtype); }
};

class HfShardedWriter {
 public:
  // Plans the files in dir for `tensors` (in this order): one model.safetensors when they fit
  // in max_shard_bytes, else model-0000i-of-0000n.safetensors and the index.
  HfShardedWriter(const std::string& dir, std::vector<HfTensorInfo> tensors,
                  uint64_t max_shard_bytes);
  // The next tensor of the plan (its name is checked), written through to its file.
  void write(const std::string& name, const void* data);
  // After the last tensor: the index (sharded output). Returns the files written.
  std::vector<std::string> finish();

 private:
  void open_shard(size_t s);
  std::string dir_;
  std::vector<HfTensorInfo> tensors_;
  std::vector<size_t> shard_of_;  // per tensor
  std::vector<std::string> files_;
  size_t next_ = 0;
  std::unique_ptr<ckpt::AtomicFileWriter> out_;
};

}  // namespace mg
