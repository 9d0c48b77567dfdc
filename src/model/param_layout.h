// Parameters of one rank in one flat buffer: each parameter is a named view (Megatron-Core's
// names) at an offset, with its local and global shapes, how it is split across TP ranks, its
// init rule and whether weight decay applies. Grads use the same offsets in a second flat fp32
// buffer. A rank holds only its pipeline stage's parameters and its TP shard of each.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/tensor.h"

namespace mg {

enum class InitKind { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;      // e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  Shape shape;           // local shape; [out, in] for linear weights, as Megatron stores them
  Shape global_shape;    // shape in the single-rank model
  int tp_split_dim = -1; // dim split across TP ranks (-1: replicated on every TP rank)
  int64_t offset = 0;    // elements from the start of the flat buffer
  InitKind init = InitKind::Zeros;
  float init_std = 0.f;  // for InitKind::Normal
  bool weight_decay = false;       // false for biases and 1-D params (Megatron's rule)
  bool sequence_parallel = false;  // TP-replicated param whose grads are partial under SP
  bool tied_copy = false;          // last stage's copy of the word embedding (PP > 1)
  int64_t numel() const { return shape_numel(shape); }
};

// Which part of the model a rank holds.
struct ShardSpec {
  int64_t tp_size = 1, tp_rank = 0;
  int64_t layer_begin = 0, layer_end = -1;  // global layer range; end -1 means all layers
  bool first_stage = true, last_stage = true;
};

// Whether this rank's copy of p counts toward whole-model sums (grad norm, gathers): each
// parameter exactly once, so TP-replicated params only on TP rank 0 and never the tied copy.
inline bool counted_once(const ParamSpec& p, int64_t tp_rank) {
  return !p.tied_copy && (p.tp_split_dim >= 0 || tp_rank == 0);
}

class ParamLayout {
 public:
  // Appends a parameter given its global shape; the local shape follows from tp_split_dim.
  size_t add(std::string name, Shape global_shape, int tp_split_dim, InitKind init,
             float init_std, const ShardSpec& shard);
  const std::vector<ParamSpec>& params() const { return params_; }
  ParamSpec& param(size_t i) { return params_[i]; }
  const ParamSpec& get(const std::string& name) const;
  bool has(const std::string& name) const;
  int64_t total_numel() const { return total_; }

  // Megatron's distributed-optimizer buffer layout: parameters placed in reverse order (the
  // order backward finishes them), each start aligned to 64 elements, a bucket closed once it
  // reaches bucket_size elements (the word embedding always alone), every bucket end padded to
  // a multiple of lcm(dp, 128) so buckets split evenly into DP shards. Offsets are rewritten;
  // padding elements belong to no parameter.
  // dp = 0: plain data parallelism, the same order and buckets with no alignment or padding.
  void assign_buckets(int64_t bucket_size, int64_t dp);
  // [begin, end) element ranges of the buckets (one bucket covering everything by default).
  const std::vector<std::pair<int64_t, int64_t>>& buckets() const { return buckets_; }

 private:
  std::vector<ParamSpec> params_;
  int64_t total_ = 0;
  std::vector<std::pair<int64_t, int64_t>> buckets_;
};

// The GPT-2 parameter list (Megatron-Core registration order) held by one shard.
ParamLayout gpt_param_layout(const GPTConfig& cfg, const ShardSpec& shard = {});

// Global flat offset of element `local_index` of a TP shard (into a tensor of global_shape
// stored row-major), for shard tp_rank of tp_size.
int64_t global_index(const ParamSpec& p, int64_t local_index, int64_t tp_size, int64_t tp_rank);

// Fills params per each spec's init rule. Each parameter draws from its own Philox stream keyed
// by (seed, name), indexed by the element's position in the global tensor, so values do not
// depend on the layout. Tied copies start at zero (the embedding all-reduce fills them).
void init_params(const ParamLayout& layout, float* params, uint64_t seed, const ShardSpec& shard);

}  // namespace mg
