// The parallel layout a run asks for: TP, CP and PP from flags, DP derived as
// world / (TP * CP * PP), sequence parallelism, context parallelism's communication, uneven
// first/last pipeline stages and the DDP bucket size. validate() runs on every rank before
// anything is allocated.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

namespace mg {

// The model's sizes the layout is checked against (GPTConfig::layout_dims fills it), so
// parallel/ does not depend on model/.
struct ModelDims {
  int64_t num_layers = 0;           // L
  int64_t num_attention_heads = 0;  // NH
  int64_t num_query_groups = 0;     // NG (NH without grouped-query attention)
  int64_t ffn_hidden_size = 0;      // F, resolved (4H by default)
  int64_t padded_vocab_size = 0;    // V padded for the TP size being checked
  int64_t seq_length = 0;           // S
};

// Megatron's gradient bucket size when --ddp-bucket-size is not given: max(40M, 1M x DP)
// elements (megatron/training resolve_ddp_bucket_size).
inline int64_t default_ddp_bucket_size(int64_t dp) {
  return dp * 1000000 > 40000000 ? dp * 1000000 : 40000000;
}

struct ParallelConfig {
  int tensor_model_parallel_size = 1;    // --tensor-model-parallel-size: TP
  int pipeline_model_parallel_size = 1;  // --pipeline-model-parallel-size: PP
  int context_parallel_size = 1;         // --context-parallel-size: CP (sequence split)
  std::string cp_comm_type = "p2p";      // --cp-comm-type: p2p (K/V ring) | a2a (all-to-all)
  bool sequence_parallel = false;        // --sequence-parallel (needs TP > 1)
  int expert_model_parallel_size = 1;    // --expert-model-parallel-size: EP (MoE experts split)
  int expert_tensor_parallel_size = 0;   // --expert-tensor-parallel-size: ETP (0: TP)
  std::string moe_token_dispatcher_type =
      "allgather";  // --moe-token-dispatcher-type (Megatron's default)
  int64_t decoder_first_pipeline_num_layers = 0;  // --decoder-first-pipeline-num-layers (0: even)
  int64_t decoder_last_pipeline_num_layers = 0;   // --decoder-last-pipeline-num-layers (0: even)
  int64_t num_layers_per_virtual_pipeline_stage = 0;  // --num-layers-per-virtual-pipeline-stage
  int64_t num_virtual_stages_per_pipeline_rank = 0;   // --num-virtual-stages-per-pipeline-rank
  int64_t microbatch_group_size_per_vp_stage = 0;     // --microbatch-group-size-per-virtual-
                                                      // pipeline-stage (0: PP)
  int virtual_stages = 1;       // v, model chunks per pipeline rank (the trainer's config resolves
                                // it from the above: pipeline/schedule_table.h)
  int64_t ddp_bucket_size = 0;  // --ddp-bucket-size: elements per DP all-reduce (0: Megatron's
                                // default, max(40M, 1M x DP), set by validate)
  bool overlap_grad_reduce = false;   // --overlap-grad-reduce
  bool overlap_param_gather = false;  // --overlap-param-gather (distributed optimizer)
  bool grad_reduce_in_bf16 = false;   // --grad-reduce-in-bf16: DP grad sums in bf16

  int tp() const { return tensor_model_parallel_size; }
  int pp() const { return pipeline_model_parallel_size; }
  int cp() const { return context_parallel_size; }
  int ep() const { return expert_model_parallel_size; }
  int etp() const { return expert_tensor_parallel_size > 0 ? expert_tensor_parallel_size : tp(); }
  // "TP a x CP b x PP c x DP d": the layout as logs and messages name it.
  std::string layout_string(int world_size) const;
  // [first, last) global layer indices held by pipeline stage `stage`.
  std::pair<int64_t, int64_t> stage_layers(int64_t num_layers, int stage) const;
  // [first, last) of model chunk `chunk` on pipeline stage `stage`: virtual stage chunk x PP +
  // stage, each rank's layers split evenly over its v chunks, virtual stages in order.
  std::pair<int64_t, int64_t> chunk_layers(int64_t num_layers, int stage, int chunk) const;

  // Checks the layout against the world size, model and batch; throws UsageError naming the
  // flag. Returns a warning to print (empty if none), e.g. --sequence-parallel without TP.
  std::string validate(int world_size, const ModelDims& model, int64_t micro_batch_size,
                       int64_t global_batch_size);
};

}  // namespace mg
