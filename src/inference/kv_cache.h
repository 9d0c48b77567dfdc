// The paged KV cache of the inference engine (vLLM's paged attention): for each layer a pool of
// fixed-size blocks of token rows on the compute device, a row holding one token's keys and
// values on this TP rank (per KV group [k (HD), v (HD)]: 2 NKV HD elements in the model's
// dtype). A sequence owns a list of blocks, so sequences of any lengths share one pool and a
// finished one gives its blocks back.
#pragma once
#include <cstdint>
#include <vector>

#include "layers/kv_attention.h"
#include "tensor/tensor.h"

namespace mg {

class KvCache {
 public:
  // layers: this stage's; row_width: 2 NKV HD (this TP rank's KV groups).
  KvCache(int64_t layers, int64_t first_layer, int64_t blocks, int64_t block_size,
          int64_t row_width, DType dtype, Device device);
  int64_t block_size() const { return block_size_; }
  int64_t row_width() const { return row_width_; }
  DType dtype() const { return dtype_; }
  void* layer(int64_t global_layer) const;  // the pool (blocks x block_size, row_width)
  // Blocks: taken from the free list (false when too few are free), and given back.
  bool allocate(int64_t n, std::vector<int32_t>& blocks);
  void release(std::vector<int32_t>& blocks);
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t bytes() const;

 private:
  int64_t first_layer_, block_size_, row_width_;
  DType dtype_;
  std::vector<Tensor> pools_;
  std::vector<int32_t> free_;
};

// One forward step over the cache: each sequence contributes rows [row0, row0 + n) of the
// step (its new tokens, at positions past .. past + n - 1), its blocks covering past + n.
struct KvSequence {
  int64_t row0 = 0, n = 0, past = 0;
  const std::vector<int32_t>* blocks = nullptr;
};

// The step's attention (transformer layers call it through LayerInputs::kv): the new rows'
// keys and values written to their sequences' blocks, then each sequence's new queries attend
// (causally) over all of its cached rows, gathered into a contiguous scratch.
class KvStep : public KvAttention {
 public:
  // The index arrays every layer uses are built here once and copied to the device.
  KvStep(const KvCache& cache, std::vector<KvSequence> seqs);
  void forward(int64_t layer, cpu::MatOut out, const cpu::Heads& q, const cpu::Heads& k,
               const cpu::Heads& v, int64_t NH, int64_t NKV, int64_t HD) const override;
  int64_t rows() const { return rows_; }

 private:
  const KvCache& cache_;
  std::vector<KvSequence> seqs_;
  int64_t rows_ = 0, max_len_ = 0;
  std::vector<int64_t> read_offset_;  // per sequence: its first entry in read_
  Tensor write_, read_;               // device int32: each new row's cache row; each
                                      // sequence's cache rows in position order
  mutable Tensor kv_, lse_;           // scratch: one sequence's rows, its log-sum-exps
};

}  // namespace mg
