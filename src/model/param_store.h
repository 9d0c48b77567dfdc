// All parameters of one rank in one store: the model chunks it holds (one pipeline stage, or v
// virtual stages under the interleaved schedule), their params in one flat buffer (f32, or the
// 16-bit dtype of a mixed-precision run) and their fp32 main grads in a second buffer with the
// same offsets. Chunk c's parameters are the consecutive entries [chunk_params(c)) of one
// layout, in Megatron-Core's registration order per chunk; the buffers use Megatron's bucketed
// layout when the run reduces gradients over data parallelism (ParamLayout::assign_buckets over
// all chunks: backward finishes the last chunk first). The model chunks compute on views of
// the store; the data-parallel reducer, the distributed optimizer, the grad finalization and
// checkpoints take the store, so the bucket layout is known here only.
#pragma once
#include <functional>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/param_layout.h"
#include "tensor/tensor.h"

namespace mg {

struct StoreSpec {
  std::vector<ShardSpec> chunks{ShardSpec{}};  // each chunk's layers and roles (same TP shard)
  DType dtype = DType::F32;                    // params: F32, BF16 (--bf16) or F16 (--fp16)
  bool sequence_parallel = false;  // TP-replicated params see a sequence chunk (finalize_grads)
  int64_t bucket_dp = -1;          // >= 0: bucketed buffer layout (> 0: padded for DP shards)
  int64_t bucket_size = 40000000;  // elements per bucket in that layout
  int64_t bucket_expert_dp = 0;    // > 0: the expert buckets padded for the shards of that many
                                   // expert-data-parallel ranks (distributed optimizer)
  bool with_grads = true;          // false (inference): no gradient buffer
};

// The layout a ParamStore of spec builds (its buffers hold layout.total_numel() elements),
// without allocating: the memory estimates read it.
ParamLayout store_layout(const GPTConfig& cfg, const StoreSpec& spec);

class ParamStore {
 public:
  ParamStore(const GPTConfig& cfg, const StoreSpec& spec);

  const GPTConfig& config() const { return cfg_; }
  const StoreSpec& spec() const { return spec_; }
  const ParamLayout& layout() const { return layout_; }
  int num_chunks() const { return int(spec_.chunks.size()); }
  // [begin, end) indices into layout().params() of chunk c's parameters.
  std::pair<int, int> chunk_params(int c) const { return chunk_params_[size_t(c)]; }
  int64_t tp_size() const { return spec_.chunks.front().tp_size; }
  int64_t tp_rank() const { return spec_.chunks.front().tp_rank; }
  DType dtype() const { return params_.dtype(); }
  Device device() const { return params_.device(); }
  // The flat parameter buffer in dtype(); params() only for f32 stores.
  void* param_data() { return params_.raw(); }
  float* params() { return params_.data<float>(); }
  float* grads() { return grads_.data<float>(); }
  int64_t num_params() const { return layout_.total_numel(); }
  // One parameter's local values as f32, and back (rounded to dtype()).
  void read_param(const ParamSpec& p, float* out) const;
  void write_param(const ParamSpec& p, const float* in);
  // Bytes of parameter p inside the flat buffer (on the compute device).
  char* param_bytes(const ParamSpec& p) const;
  // Megatron's initialization (init_params), keyed by name: values do not depend on the layout.
  void init(uint64_t seed);
  void zero_grads() { grads_.zero(); }

  // Called during backward with the indices (into layout().params()) of parameters whose
  // gradients are final for this micro-batch, and during forward with those about to be read
  // (the chunks report through notify_*; the DP reducer and distributed optimizer listen).
  using ParamsHook = std::function<void(const std::vector<int>& params)>;
  void set_grad_ready_hook(ParamsHook hook) { grad_ready_ = std::move(hook); }
  void set_params_needed_hook(ParamsHook hook) { params_needed_ = std::move(hook); }
  void notify_grad_ready(const std::vector<int>& ids) const {
    if (grad_ready_ && !ids.empty()) grad_ready_(ids);
  }
  void notify_params_needed(const std::vector<int>& ids) const {
    if (params_needed_ && !ids.empty()) params_needed_(ids);
  }

 private:
  // Stores n host f32 values at dst (in the flat buffer), rounded to dtype().
  void store_from_host(char* dst, const float* in, int64_t n);

  GPTConfig cfg_;
  StoreSpec spec_;
  std::vector<std::pair<int, int>> chunk_params_;  // filled while layout_ is built
  ParamLayout layout_;
  Tensor params_, grads_;
  ParamsHook grad_ready_, params_needed_;
};

}  // namespace mg
