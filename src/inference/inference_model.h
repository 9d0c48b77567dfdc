// A model for inference on one TP shard: its parameters only (a ParamStore without gradients,
// no optimizer state), one set of a layer's working buffers for up to max_rows rows reused by
// every layer (forward only, nothing kept for backward), and a step that runs the new tokens of
// several sequences through the embedding, the transformer layers (their attention over a KV
// cache: inference/kv_cache.h) and the head, returning the logits of the rows asked for.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "inference/kv_cache.h"
#include "layers/transformer_layer.h"
#include "model/config.h"
#include "model/param_store.h"
#include "tensor/tensor.h"
#include "tensor_parallel/mappings.h"

namespace mg {

// Where a rank's shard of the model sits: its TP group (its size and rank pick the shard) and
// its pipeline stage (the stages' group, in order; the stage holds layers [layer_begin,
// layer_end)). Null groups: one rank.
struct InferenceLayout {
  Communicator* tp = nullptr;
  Communicator* pp = nullptr;
  int64_t layer_begin = 0, layer_end = -1;  // -1: every layer
};

class InferenceModel {
 public:
  InferenceModel(const GPTConfig& cfg, DType dtype, int64_t max_rows,
                 const InferenceLayout& layout = {});

  const GPTConfig& config() const { return cfg_; }
  ParamStore& store() { return *store_; }
  int64_t max_rows() const { return max_rows_; }
  // Call after the parameters change (loaded or initialised): 16-bit models widen their 1-D
  // parameters (norms, biases) to f32 once, as the ops read them.
  void prepare();
  bool first_stage() const { return stage_ == 0; }
  bool last_stage() const { return stage_ == stages_ - 1; }
  // A KV cache for this shard's layers: `blocks` blocks of block_size tokens.
  std::unique_ptr<KvCache> make_cache(int64_t blocks, int64_t block_size) const;
  // Runs `rows` new tokens (host arrays; rows <= max_rows) at their positions through the model
  // over `kv`; logits (host, logit_rows.size() x padded vocabulary, f32) of the step rows listed.
  // Every rank of the layout calls it with the same arguments: a pipeline stage receives the
  // previous stage's hidden states and sends its own to the next; the last stage's logits
  // (gathered over TP) reach every stage.
  void step(const KvStep& kv, const int32_t* tokens, const int32_t* positions, int64_t rows,
            const std::vector<int32_t>& logit_rows, float* logits);
  // Bytes of the parameters and of the working buffers.
  int64_t param_bytes() const;
  int64_t buffer_bytes() const;

 private:
  // The final norm and output layer of the last stage: the logits of logit_rows.
  void head(const float* x, int64_t rows, const std::vector<int32_t>& logit_rows, float* logits);
  float* vector(const ParamSpec& p);
  cpu::Mat matrix(const char* name);
  float* vector(const char* name) { return vector(store_->layout().get(name)); }

  GPTConfig cfg_;
  int64_t max_rows_;
  std::unique_ptr<Communicator> self_comm_;
  tp::TPGroup tp_;
  Communicator* pp_ = nullptr;
  int stage_ = 0, stages_ = 1;
  int64_t layer_begin_ = 0, layer_end_ = 0;
  std::unique_ptr<ParamStore> store_;
  LayerDims dims_;  // max_rows rows (B = 1)
  Tensor small_;    // 16-bit models: f32 copies of the 1-D parameters
  std::vector<int64_t> small_offset_;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<LayerCache> cache_;
  std::unique_ptr<LayerScratch> scratch_;
  Tensor x_, y_, tokens_, positions_, rope_inv_freq_, lnf_, rstd_, mean_, picked_, rows_idx_,
      logits_local_;
};

}  // namespace mg
