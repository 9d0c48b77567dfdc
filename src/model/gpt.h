// A GPT-style language model (GPT-2, Llama, ... as described by GPTConfig), or one pipeline
// stage of it on one TP shard: [embedding] -> this stage's transformer layers -> [final norm ->
// logits through the output layer (tied to the word embedding or its own) -> vocab-parallel
// cross-entropy]. Activations are sequence-first [S, B, H] as in Megatron. Under context
// parallelism a rank holds S / CP tokens of each sequence (core/cp_layout.h: two chunks) and
// every per-token buffer is S / CP long.
// Parameters live in the rank's ParamStore (model/param_store.h: one flat buffer, f32 or bf16/f16
// under mixed precision, and fp32 main grads with the same offsets), which a model chunk shares
// with the rank's other chunks under the interleaved schedule, or owns alone; backward ADDS into
// grads (micro-batch accumulation). Under mixed precision the 1-D parameters (LayerNorms, biases)
// are also widened into a small f32 copy each time forward reaches them. Each in-flight micro-batch of a pipeline
// schedule uses its own activation slot.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "comm/communicator.h"
#include "context_parallel/cp_attention.h"
#include "core/cp_layout.h"
#include "layers/transformer_layer.h"
#include "model/config.h"
#include "model/param_layout.h"
#include "model/param_store.h"
#include "tensor/tensor.h"

namespace mg {

// One micro-batch, each array B*S long, row-major [B, S] (the data loader's order); under
// context parallelism S is this CP rank's S / CP tokens (data/batch.h slices them).
struct MicroBatch {
  const int32_t* tokens;
  const int32_t* position_ids;
  const int32_t* labels;
  const float* loss_mask;                    // 0 excludes a token from the loss
  const int32_t* attention_start = nullptr;  // optional: first position each token attends to
  int64_t first_sample = -1;  // global index of the first sample (keys dropout masks); -1: unknown
};

// Sums over MoE layers and micro-batches (GPTModel::take_moe_losses).
struct MoeLosses {
  double load_balancing = 0, z = 0;  // the losses without their coefficients
  double dropped = 0;                // (token, expert) assignments dropped for capacity
  double layer_microbatches = 0;     // MoE layer forwards summed
};

struct StageSpec {
  ShardSpec shard;  // TP shard and pipeline stage
  bool sequence_parallel = false;
  int64_t cp_size = 1, cp_rank = 0;  // context parallelism: CP ranks, this rank's index
  std::string cp_comm_type = "p2p";  // --cp-comm-type: the attention's exchange (p2p ring, a2a)
  int64_t num_slots = 1;             // activation sets for in-flight micro-batches
  DType dtype = DType::F32;          // params and activations: F32, BF16 (--bf16) or F16 (--fp16)
  // Full activation recompute (--recompute-granularity full): "uniform" recomputes every layer
  // in chunks of recompute_num_layers (one chunk's caches live at a time), "block" the first
  // recompute_num_layers layers of the stage, one at a time; "" stores every layer's cache.
  std::string recompute_method;
  int64_t recompute_num_layers = 1;
};

// The dims of a stage's layers for micro-batches of B sequences: the union of its layers' specs
// (the buffers every layer fits in), and one layer's own.
LayerDims stage_dims(const GPTConfig& cfg, int64_t B, const StageSpec& spec);
LayerDims layer_dims(const GPTConfig& cfg, const LayerDims& stage, int64_t layer);

class GPTModel {
 public:
  // tp_comm: the TP group (null: a single rank). cp_comm: the CP group (null: CP = 1), over
  // which the last stage sums the loss-mask counts and the reported losses. store: the rank's
  // parameter store, whose chunk `chunk` (spec.shard) this model computes; null: the model owns
  // a store of its own.
  GPTModel(const GPTConfig& cfg, int64_t micro_batch_size, const StageSpec& spec = {},
           Communicator* tp_comm = nullptr, Communicator* cp_comm = nullptr,
           ParamStore* store = nullptr, int chunk = 0);

  const GPTConfig& config() const { return cfg_; }
  // This chunk's parameters (offsets into the store's buffers).
  const ParamLayout& layout() const { return layout_; }
  const StageSpec& spec() const { return spec_; }
  ParamStore& store() { return *store_; }
  DType dtype() const { return store_->dtype(); }
  // The store's flat buffers (params in dtype(); params() only for f32 models).
  void* param_data() { return store_->param_data(); }
  float* params() { return store_->params(); }
  float* grads() { return store_->grads(); }
  // One parameter's local values as f32, and back (rounded to dtype()).
  void read_param(const ParamSpec& p, float* out) const { store_->read_param(p, out); }
  void write_param(const ParamSpec& p, const float* in) { store_->write_param(p, in); }
  int64_t num_params() const { return store_->num_params(); }
  // Initializes the whole store (every chunk of the rank).
  void init(uint64_t seed) { store_->init(seed); }
  void zero_grads() { store_->zero_grads(); }

  // Elements of the activation passed between stages: (R, H), R = S/CP*B (/TP under SP).
  int64_t activation_numel() const { return dims_.local_rows() * dims_.H; }
  float* input_activation(int64_t slot) { return slots_[slot].resid.front().data<float>(); }
  float* output_activation(int64_t slot) { return slots_[slot].resid.back().data<float>(); }

  // Dropout (--hidden-dropout, --attention-dropout of the config) for the micro-batches that
  // forward_step takes from now on, keyed by the run's seed and this iteration (training);
  // dropout_off() for evaluation (the default: generation and tests run without it).
  void dropout_on(uint64_t seed, int64_t iteration) {
    dropout_ = {cfg_.hidden_dropout, cfg_.attention_dropout, seed, iteration, 0};
    dropout_enabled_ = cfg_.hidden_dropout > 0.f || cfg_.attention_dropout > 0.f;
  }
  void dropout_off() { dropout_enabled_ = false; }
  // Expert parallelism: the EP group over which MoE layers exchange tokens (its size and rank
  // must be the shard's ep_size and ep_rank; null when EP = 1), the experts' ETP x EP group
  // under parallel folding (else null), and the dispatcher (allgather, else alltoall).
  void set_expert_parallel(Communicator* ep, Communicator* etp_ep, bool allgather) {
    if (ep)
      MG_CHECK(ep->size() == spec_.shard.ep_size && ep->rank() == spec_.shard.ep_rank, "EP group (",
               ep->size(), " ranks) does not match the shard's EP ", spec_.shard.ep_size, " rank ",
               spec_.shard.ep_rank);
    if (etp_ep)
      MG_CHECK(etp_ep->size() == spec_.shard.etp_size * spec_.shard.ep_size &&
                   etp_ep->rank() ==
                       spec_.shard.etp_rank + spec_.shard.etp_size * spec_.shard.ep_rank,
               "ETP x EP group (rank ", etp_ep->rank(), " of ", etp_ep->size(),
               ") does not match the shard's expert TP ", spec_.shard.etp_size, " and EP ",
               spec_.shard.ep_size);
    ep_comm_ = ep;
    etp_ep_comm_ = etp_ep;
    ep_allgather_ = allgather;
  }
  // Runs this stage on the micro-batch in `slot` (tokens/positions used by the first stage,
  // labels/mask by the last). The last stage adds the micro-batch's sum(loss * mask) /
  // sum(mask) to a running sum kept on the compute device, so a GPU forward does not wait.
  // Context parallelism: both sums run over the WHOLE sequence: sum(mask) is all-reduced over
  // CP here (one double per micro-batch), and each CP rank adds its own tokens' part of the
  // sum; backward seeds each token with mask / (whole-sequence sum(mask)) x loss_scale. So
  // each CP rank's gradients are its tokens' part of the 1-rank gradient: the gradient
  // reduction must SUM over CP (reduce over dp_cp, scaled by 1/DP, not 1/(DP x CP)).
  void forward_step(int64_t slot, const MicroBatch& mb);
  // The running loss sum since the last call (0 on other stages), then reset to 0. Under CP it
  // is all-reduced over the CP group: every CP rank returns the whole-sequence loss (so the
  // trainer averages the reported loss over DP only). Collective over CP on the last stage.
  double take_loss();
  // Drops the running sum (the schedules start from 0, whatever an interrupted call left).
  void reset_loss();
  // One micro-batch's loss: forward_step, then take_loss.
  double forward(int64_t slot, const MicroBatch& mb) {
    forward_step(slot, mb);
    return take_loss();
  }
  // --calculate-per-token-loss (Megatron's calculate_per_token_loss): the last stage adds
  // sum(loss * mask) itself, not divided by sum(mask), and backward seeds each unmasked token
  // with loss_scale; the caller divides by the global batch's token count (take_tokens, summed).
  void set_per_token_loss(bool on) { per_token_loss_ = on; }
  // The MoE layers' load-balancing and z losses (each divided by its coefficient, as Megatron
  // logs them) summed over this stage's MoE layers and the micro-batches forward ran since the
  // last call, and the tokens dropped for capacity; then 0.
  MoeLosses take_moe_losses() { return std::exchange(moe_losses_, MoeLosses{}); }
  // The loss-mask count of the micro-batches since the last call (0 on other stages), then 0;
  // under CP the whole sequences' count, the same on every CP rank (sum it over DP only).
  double take_tokens() { return std::exchange(tokens_, 0.0); }
  // Backpropagates loss_scale * loss (last stage) or d_output (R, H) (other stages); grads +=.
  void backward(int64_t slot, const float* d_output, float loss_scale);
  // dL/d(input activation) (R, H) after backward, on stages other than the first.
  float* input_grad() { return d_resid_.data<float>(); }
  // Logits (S, B, V/TP) of the last forward in slot; overwritten by backward.
  const float* logits(int64_t slot) const { return slots_[slot].logits.data<float>(); }

  // Bytes of the activations and scratch a stage of cfg allocates for micro-batches of
  // micro_batch_size under spec (its slots' residual streams, layer caches and head buffers,
  // the recompute pool, the layer scratch and the stage's own buffers), in checked arithmetic
  // and without building anything: the memory check before allocation and the memory report
  // read it, and the constructor allocates from the same declarations.
  static int64_t activation_bytes(const GPTConfig& cfg, int64_t micro_batch_size,
                                  const StageSpec& spec);
  // The same, summed over the tensors this model did allocate.
  size_t allocated_activation_bytes() const;

  // Whether backward reports finished parameters (the pipeline runner turns it on for a chunk's
  // last micro-batch only, when a rank holds several chunks).
  void report_grads(bool on) { report_grads_ = on; }
  // Backward reports to the store's grad-ready hook the parameters (store indices) whose
  // gradients it has just finished: the final LayerNorm (and the tied output-layer copy) after
  // the head, each layer's parameters after that layer, the embeddings last. Forward reports to
  // its params-needed hook those about to be read: the embeddings, each layer's, then the
  // head's (the distributed optimizer's lazy parameter all-gather waits there).

 private:
  struct Slot {
    std::vector<Tensor> resid;  // layers+1 x (R, H): each layer's input, then the output
    std::vector<std::unique_ptr<LayerCache>> caches;  // layers that are not recomputed
    Tensor tokens, positions, labels;        // (S*B) in [S, B] order, on the compute device
    Tensor tokens_h, positions_h, labels_h;  // their host staging (the reorder runs on the host)
    Tensor mask;                             // (S*B) host: sum(mask) and dlosses are formed here
    Tensor mask_d;                           // (S*B) its copy on the GPU (GPU runs only)
    Tensor attention_start;                  // (B, S), when the batch restricts attention
    bool has_attention_start = false;
    DropoutStep dropout;  // the micro-batch's dropout, when dropout_on
    bool dropout_on = false;
    Tensor lnf, lnf_mean, lnf_rstd, lnf_full, logits, losses, lse;  // last stage
    double mask_sum = 0;
  };
  // A slot's tensors (the residual stream and layer caches aside) and the stage's own buffers,
  // by shape and dtype: what the constructor allocates and activation_bytes() counts.
  static std::vector<TensorDecl<Slot>> slot_decls(const GPTConfig& cfg, const LayerDims& d,
                                                  const StageSpec& spec);
  static std::vector<TensorDecl<GPTModel>> buffer_decls(const GPTConfig& cfg, const LayerDims& d,
                                                        const StageSpec& spec);
  LayerWeights layer_view(bool grads, int64_t layer);
  // Recompute: whether layer l (stage-local) is recomputed, the first layer of its chunk, and
  // where its activations live.
  bool recomputed(int64_t l) const;
  int64_t chunk_begin(int64_t l) const;
  LayerCache& cache(Slot& s, int64_t l);
  // Parameter `name` as the ops read it: f32 (the small copy for 1-D params under mixed
  // precision) or, for matrices, in dtype().
  float* param(const char* name);
  cpu::Mat matrix(const char* name);
  float* grad(const char* name) { return grads() + layout_.get(name).offset; }
  char* param_bytes(const ParamSpec& p) const { return store_->param_bytes(p); }
  // The output layer's weight on this stage: the word embedding when tied (its copy on a later
  // stage), else output_layer.weight.
  const char* output_weight_name() const;
  LayerInputs layer_inputs(const Slot& s) const;
  // The layer inputs of stage-local layer l (its global index keys its dropout masks).
  LayerInputs layer_inputs(const Slot& s, int64_t l) const;
  // The embedding output's dropout on this rank's (R, H) rows.
  DropoutRows embedding_dropout(const Slot& s) const;
  void final_norm_forward(Slot& s);
  void final_norm_backward(Slot& s);

  GPTConfig cfg_;
  StageSpec spec_;
  LayerDims dims_;      // the stage's layers' union (the scratch and recompute pool fit any)
  int64_t num_layers_;  // layers on this stage
  std::vector<LayerDims> layer_dims_;  // each layer's own (dense or MoE)
  std::unique_ptr<Communicator> self_comm_;
  tp::TPGroup tp_;
  Communicator* cp_comm_;                  // null when CP = 1
  CpLayout cp_;                            // this CP rank's tokens of each sequence
  cp::CpAttention cp_attention_;           // the attention across the CP group (CP > 1)
  std::unique_ptr<ParamStore> own_store_;  // when no store was given
  ParamStore* store_;
  int param_base_ = 0;  // this chunk's first parameter in the store's layout
  bool report_grads_ = true;
  ParamLayout layout_;                 // this chunk's parameters
  Tensor small_;                       // mixed precision: f32 copies of the 1-D params
  std::vector<int64_t> small_offset_;  // per param: offset in small_, -1 for matrices
  std::vector<LayerWeights> layer_params_, layer_grads_;
  std::vector<Slot> slots_;
  LayerScratch scratch_;
  std::vector<std::unique_ptr<LayerCache>> recompute_pool_;  // shared by recomputed layers
  Tensor emb_full_;                  // (S*B, H) embedding output before the SP scatter
  Tensor d_resid_, d_lnf_;           // (R, H)
  Tensor d_full_;                    // (S*B, H)
  Tensor dlosses_, ce_scratch_;      // (S*B)
  Tensor dlosses_h_;                 // (S*B) host: dlosses is formed from the host mask
  Tensor loss_sum_;                  // one double on the compute device: take_loss()'s sum
  bool per_token_loss_ = false;      // set_per_token_loss
  MoeLosses moe_losses_;             // take_moe_losses()'s sums
  Communicator* ep_comm_ = nullptr;  // set_expert_parallel
  bool ep_allgather_ = false;
  Communicator* etp_ep_comm_ = nullptr;
  double tokens_ = 0;         // take_tokens()'s count
  Tensor rope_inv_freq_;      // (rotary_dim/2) RoPE inverse frequencies
  Tensor rope_positions_;     // (S*B) RoPE position of each row
  Device dev_ = Device::CPU;  // the compute device every model buffer lives on
  DropoutStep dropout_;       // set by dropout_on: seed, iteration and rates
  bool dropout_enabled_ = false;
  std::vector<int> head_params_, embedding_params_;
  std::vector<std::vector<int>> layer_param_ids_;
  // Chunk parameter indices as the store's (its hooks speak store indices).
  std::vector<int> in_store(const std::vector<int>& ids) const;
  void notify(const std::vector<int>& ids);
  // Parameters about to be read: waits for them (hook), then refreshes their f32 copies.
  void need(const std::vector<int>& ids);
};

}  // namespace mg
