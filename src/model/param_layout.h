// Parameters of one rank in one flat buffer: each parameter is a named view (Megatron-Core's
// names) at an offset, with its local and global shapes, its TP sharding, its init rule and
// whether weight decay applies. Grads use the same offsets in a second flat fp32 buffer. A rank
// holds only its pipeline stage's parameters and its TP shard of each. The list comes from the
// blocks' declarations (layers/block_params.h), in Megatron-Core's registration order.
#pragma once
#include <string>
#include <vector>

#include "layers/block_params.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace mg {

struct ParamSpec {
  std::string name;    // e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  Shape shape;         // local shape; [out, in] for linear weights, as Megatron stores them
  Shape global_shape;  // shape in the single-rank model
  Sharding sharding;
  int64_t tp_size = 1, tp_rank = 0;  // the ranks a split param is split over and this one's
                                     // place: the shard's TP, or its expert TP for experts
  int64_t offset = 0;                // elements from the start of the flat buffer
  InitKind init = InitKind::Zeros;
  float init_std = 0.f;  // for InitKind::Normal
  ParamTraits traits;    // as its block declared it (weight decay, norm, layer, ...)
  int64_t numel() const { return shape_numel(shape); }
};

// Which part of the model a rank holds.
struct ShardSpec {
  int64_t tp_size = 1, tp_rank = 0;
  int64_t layer_begin = 0, layer_end = -1;  // global layer range; end -1 means all layers
  bool first_stage = true, last_stage = true;
  // Expert parallelism: the E experts of each MoE layer split over ep_size ranks, rank r
  // holding experts [r E/EP, (r+1) E/EP) (Megatron's; checkpoints name them by global index).
  int64_t ep_size = 1, ep_rank = 0;
  // Parallel folding: each expert split over etp_size ranks (--expert-tensor-parallel-size)
  // instead of TP; 0 means TP (etp_rank then unused).
  int64_t etp_size = 0, etp_rank = 0;
  // Whether this shard holds a parameter so sharded (every non-expert one, its own experts).
  bool holds(const Sharding& s, int64_t num_experts) const {
    return s.expert < 0 || s.expert / (num_experts / ep_size) == ep_rank;
  }
  // The ranks a parameter so sharded is split over, and this shard's place among them.
  bool expert_split(const Sharding& s) const { return s.expert >= 0 && etp_size > 0; }
  int64_t split_size(const Sharding& s) const { return expert_split(s) ? etp_size : tp_size; }
  int64_t split_rank(const Sharding& s) const { return expert_split(s) ? etp_rank : tp_rank; }
};

// Whether this rank's copy of p counts toward whole-model sums (grad norm, gathers): each
// parameter exactly once, so TP-replicated params only on TP rank 0 (expert TP rank 0 for an
// expert's) and never the tied copy.
inline bool counted_once(const ParamSpec& p) {
  return !p.sharding.tied_copy && (p.sharding.split() || p.tp_rank == 0);
}

class ParamLayout {
 public:
  // Appends a declared parameter; its local shape follows from the sharding.
  size_t add(const ParamDecl& d, const ShardSpec& shard);
  const std::vector<ParamSpec>& params() const { return params_; }
  ParamSpec& param(size_t i) { return params_[i]; }
  const ParamSpec& get(const std::string& name) const;
  bool has(const std::string& name) const;
  int64_t total_numel() const { return total_; }

  // Megatron's distributed-optimizer buffer layout: parameters placed in reverse order (the
  // order backward finishes them), each start aligned to 64 elements, a bucket closed once it
  // reaches bucket_size elements (the word embedding and its tied copy always alone), every
  // bucket end padded to a multiple of lcm(dp, 128) so buckets split evenly into DP shards. Offsets are rewritten;
  // padding elements belong to no parameter.
  // dp = 0: plain data parallelism, the same order and buckets with no alignment or padding.
  // Expert parameters (MoE, Sharding::expert) get buckets of their own after the others,
  // padded for expert_dp (the expert-data-parallel group that reduces them).
  void assign_buckets(int64_t bucket_size, int64_t dp, int64_t expert_dp = 0);
  // Whether bucket b holds expert parameters (reduced over the expert-data-parallel group).
  bool bucket_is_expert(size_t b) const { return !bucket_expert_.empty() && bucket_expert_[b]; }
  // The entries [begin, end) with their offsets (one model chunk of a store's layout); the
  // total and the buckets stay the whole layout's.
  ParamLayout slice(int begin, int end) const;
  // [begin, end) element ranges of the buckets (one bucket covering everything by default).
  const std::vector<std::pair<int64_t, int64_t>>& buckets() const { return buckets_; }

 private:
  std::vector<ParamSpec> params_;
  int64_t total_ = 0;
  std::vector<std::pair<int64_t, int64_t>> buckets_;
  std::vector<bool> bucket_expert_;
};

// The model's parameter declarations held by one shard (the blocks of its pipeline stage).
std::vector<ParamDecl> model_param_decls(const GPTConfig& cfg, const ShardSpec& shard = {});
// Their layout on that shard.
ParamLayout gpt_param_layout(const GPTConfig& cfg, const ShardSpec& shard = {});

// What a shard's parameters hold before any DP-bucket padding, in checked arithmetic (an
// overflow names the flags that size the parameter): the embedding and head declarations plus
// one layer's times the shard's layers (every layer has the same spec), so a huge --num-layers
// is counted without building the list. Equals gpt_param_layout(cfg, shard).total_numel().
struct ParamCount {
  int64_t elements = 0;         // all parameter elements
  int64_t vector_elements = 0;  // those of 1-D parameters (norms, biases)
  int64_t tensors = 0;          // parameter tensors
  int64_t expert_elements = 0;  // those of MoE experts (sharded over expert DP, not DP x CP)
};
ParamCount shard_param_count(const GPTConfig& cfg, const ShardSpec& shard = {});

// Global flat offset of element `local_index` of p's shard.
inline int64_t global_index(const ParamSpec& p, int64_t local_index) {
  return global_index(p.global_shape, p.shape, p.sharding, local_index, p.tp_size, p.tp_rank);
}

// Fills params per each spec's init rule. Each parameter draws from its own Philox stream keyed
// by (seed, name), indexed by the element's position in the global tensor, so values do not
// depend on the layout. Tied copies start at zero (the embedding all-reduce fills them).
void init_params(const ParamLayout& layout, float* params, uint64_t seed);

}  // namespace mg
