#include "inference/inference_model.h"

#include <algorithm>
#include <utility>

#include "backend/dispatch.h"
#include "core/error.h"
#include "model/gpt.h"
#include "model/layer_weights.h"
#include "tensor_parallel/parallel_linear.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mg {

namespace {
ShardSpec shard_of(const Communicator& tp) { return {tp.size(), tp.rank()}; }
// MoE token dropping (--moe-expert-capacity-factor) ranks a step's rows, so a request's tokens
// would depend on what it is batched with: inference keeps every assignment.
GPTConfig for_inference(GPTConfig c) {
  c.moe_expert_capacity_factor = 0.f;
  return c;
}
}  // namespace

InferenceModel::InferenceModel(const GPTConfig& config, DType dtype, int64_t max_rows,
                               const InferenceLayout& layout)
    : cfg_(for_inference(config)), max_rows_(max_rows),
      self_comm_(layout.tp ? nullptr : make_self_communicator()), tp_{layout.tp ? layout.tp
                                                                                : self_comm_.get(),
                                                                      false},
      pp_(layout.pp), stage_(pp_ ? pp_->rank() : 0), stages_(pp_ ? pp_->size() : 1),
      layer_begin_(layout.layer_begin),
      layer_end_(layout.layer_end < 0 ? cfg_.num_layers : layout.layer_end) {
  MG_CHECK(max_rows > 0, "inference rows per step must be positive");
  MG_CHECK(layer_begin_ >= 0 && layer_begin_ < layer_end_ && layer_end_ <= cfg_.num_layers,
           "inference stage of layers [", layer_begin_, ", ", layer_end_, ")");
  ShardSpec shard = shard_of(*tp_.comm);
  shard.layer_begin = layer_begin_;
  shard.layer_end = layer_end_;
  shard.first_stage = first_stage();
  shard.last_stage = last_stage();
  StoreSpec ss;
  ss.chunks = {shard};
  ss.dtype = dtype;
  ss.with_grads = false;
  store_ = std::make_unique<ParamStore>(cfg_, ss);
  StageSpec stage;
  stage.shard = shard;
  stage.dtype = dtype;
  dims_ = stage_dims(cfg_, 1, stage);
  dims_.S = max_rows;
  int64_t small = 0;
  for (const ParamSpec& p : store_->layout().params()) {
    const bool is_small = dtype != DType::F32 && p.shape.size() == 1;
    small_offset_.push_back(is_small ? small : -1);
    if (is_small) small += p.numel();
  }
  const Device dev = ops::device();
  small_ = Tensor({small}, DType::F32, dev);
  ParamAccess at;
  at.matrix = [&](const ParamSpec& p) -> void* { return store_->param_bytes(p); };
  at.vector = [&](const ParamSpec& p) { return vector(p); };
  for (int64_t l = layer_begin_; l < layer_end_; ++l)
    layers_.push_back(layer_weights(cfg_, shard, store_->layout(), l, at));
  cache_ = std::make_unique<LayerCache>(dims_);
  scratch_ = std::make_unique<LayerScratch>(dims_);
  const int64_t H = cfg_.hidden_size, V_local = cfg_.padded_vocab_size() / tp_.size();
  x_ = Tensor({max_rows, H}, DType::F32, dev);
  y_ = Tensor({max_rows, H}, DType::F32, dev);
  tokens_ = Tensor({max_rows}, DType::I32, dev);
  positions_ = Tensor({max_rows}, DType::I32, dev);
  lnf_ = Tensor({max_rows, H}, dtype, dev);
  picked_ = Tensor({max_rows, H}, dtype, dev);
  rstd_ = Tensor({max_rows}, DType::F32, dev);
  mean_ = Tensor({max_rows}, DType::F32, dev);
  rows_idx_ = Tensor({max_rows}, DType::I32, dev);
  logits_local_ = Tensor({max_rows, V_local}, DType::F32, dev);
  if (cfg_.rope()) {
    const std::vector<float> inv_freq = cfg_.rope_inv_freq();
    rope_inv_freq_ = Tensor({int64_t(inv_freq.size())}, DType::F32, dev);
    ops::copy(rope_inv_freq_.raw(), dev, inv_freq.data(), Device::CPU, rope_inv_freq_.nbytes());
  }
}

float* InferenceModel::vector(const ParamSpec& p) {
  const size_t i = size_t(&p - store_->layout().params().data());
  if (small_offset_[i] >= 0) return small_.data<float>() + small_offset_[i];
  return reinterpret_cast<float*>(store_->param_bytes(p));
}

cpu::Mat InferenceModel::matrix(const char* name) {
  return {store_->param_bytes(store_->layout().get(name)), store_->dtype()};
}

void InferenceModel::prepare() {
  const std::vector<ParamSpec>& ps = store_->layout().params();
  for (size_t i = 0; i < ps.size(); ++i)
    if (small_offset_[i] >= 0)
      ops::cast_to_f32(small_.data<float>() + small_offset_[i], store_->param_bytes(ps[i]),
                       store_->dtype(), ps[i].numel());
}

std::unique_ptr<KvCache> InferenceModel::make_cache(int64_t blocks, int64_t block_size) const {
  const int64_t kv_heads = dims_.NG_local();
  return std::make_unique<KvCache>(layer_end_ - layer_begin_, layer_begin_, blocks, block_size,
                                   2 * kv_heads * dims_.HD(), store_->dtype(), ops::device());
}

void InferenceModel::step(const KvStep& kv, const int32_t* tokens, const int32_t* positions,
                          int64_t rows, const std::vector<int32_t>& logit_rows, float* logits) {
  MG_CHECK(rows > 0 && rows <= max_rows_ && rows == kv.rows(), "inference step of ", rows,
           " rows (KV step ", kv.rows(), ", at most ", max_rows_, ")");
  const Device dev = ops::device();
  const int64_t H = cfg_.hidden_size, V = cfg_.padded_vocab_size(), V_local = V / tp_.size();
  const DType t = store_->dtype();
  ops::copy(tokens_.raw(), dev, tokens, Device::CPU, size_t(rows) * 4);
  ops::copy(positions_.raw(), dev, positions, Device::CPU, size_t(rows) * 4);
  float* x = x_.data<float>();
  float* y = y_.data<float>();
  if (first_stage()) {
    tp::vocab_parallel_embedding_forward(tp_, x, tokens_.data<int32_t>(),
                                         positions_.data<int32_t>(),
                                         matrix("embedding.word_embeddings.weight"),
                                         cfg_.learned_positions()
                                             ? matrix("embedding.position_embeddings.weight")
                                             : cpu::Mat{nullptr, t},
                                         V_local, rows, H);
  } else {  // the previous stage's hidden states (f32, as the residual stream)
    pp_->batch_isend_irecv({{false, x, rows * H, stage_ - 1}});
  }
  LayerDims d = dims_;
  d.S = rows;
  LayerInputs in;
  if (cfg_.rope()) {
    in.positions = positions_.data<int32_t>();
    in.inv_freq = rope_inv_freq_.data<float>();
  }
  in.kv = &kv;
  for (int64_t l = layer_begin_; l < layer_end_; ++l) {
    in.layer = l;
    transformer_layer_forward(tp_, y, x, layers_[size_t(l - layer_begin_)], *cache_, *scratch_,
                              layer_dims(cfg_, d, l), in);
    std::swap(x, y);
  }
  const int64_t n = int64_t(logit_rows.size());
  MG_CHECK(n <= rows, "more logit rows than step rows");
  if (!last_stage()) {
    pp_->batch_isend_irecv({{true, x, rows * H, stage_ + 1}});
  } else if (n > 0) {
    head(x, rows, logit_rows, logits);
  }
  if (stages_ > 1 && n > 0) pp_->broadcast(logits, n * V, stages_ - 1);
}

void InferenceModel::head(const float* x, int64_t rows, const std::vector<int32_t>& logit_rows,
                          float* logits) {
  const Device dev = ops::device();
  const int64_t H = cfg_.hidden_size, V = cfg_.padded_vocab_size(), V_local = V / tp_.size();
  const DType t = store_->dtype();
  const float offset = cfg_.norm_weight_offset();
  const cpu::MatOut lnf{lnf_.raw(), t};
  if (cfg_.norm_bias())
    ops::layernorm_forward(lnf, mean_.data<float>(), rstd_.data<float>(), x,
                           vector("decoder.final_layernorm.weight"),
                           vector("decoder.final_layernorm.bias"), rows, H, cfg_.norm_epsilon,
                           offset);
  else
    ops::rmsnorm_forward(lnf, rstd_.data<float>(), x, vector("decoder.final_layernorm.weight"),
                         rows, H, cfg_.norm_epsilon, offset);
  const int64_t n = int64_t(logit_rows.size());
  ops::copy(rows_idx_.raw(), dev, logit_rows.data(), Device::CPU, size_t(n) * 4);
  ops::gather_rows(picked_.raw(), lnf_.raw(), rows_idx_.data<int32_t>(), n, H, t);
  // A tied output layer is the embedding on a single stage, its copy on the last of several.
  const char* out_w = cfg_.tied_output() && first_stage() ? "embedding.word_embeddings.weight"
                                                          : "output_layer.weight";
  tp::column_parallel_forward(tp_, logits_local_.data<float>(), picked_.raw(), nullptr,
                              matrix(out_w), nullptr, {n, H, V_local});
  const int64_t tp = tp_.size();
  if (tp == 1) {
    ops::copy(logits, Device::CPU, logits_local_.raw(), dev, size_t(n * V) * 4);
    return;
  }
  // Each TP rank holds a vocabulary slice of every row: gather, then lay the slices side by side.
  std::vector<float> local(size_t(n * V_local)), all(size_t(tp * n * V_local));
  ops::copy(local.data(), Device::CPU, logits_local_.raw(), dev, local.size() * 4);
  tp_.comm->all_gather(local.data(), all.data(), n * V_local, DType::F32);
  for (int64_t r = 0; r < tp; ++r)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(all.data() + (r * n + i) * V_local, V_local, logits + i * V + r * V_local);
}

int64_t InferenceModel::param_bytes() const {
  return store_->num_params() * int64_t(dtype_size(store_->dtype())) + int64_t(small_.nbytes());
}

int64_t InferenceModel::buffer_bytes() const {
  int64_t b = 0;
  for (const Tensor* t : {&x_, &y_, &tokens_, &positions_, &rope_inv_freq_, &lnf_, &rstd_, &mean_,
                          &picked_, &rows_idx_, &logits_local_})
    b += int64_t(t->nbytes());
  return b + layer_cache_bytes(dims_) + layer_scratch_bytes(dims_);
}

}  // namespace mg
