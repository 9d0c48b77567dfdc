#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "backend/dispatch.h"
#include "core/checked_math.h"
#include "model/layer_weights.h"
#include "tensor_parallel/parallel_linear.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mg {

namespace {
// The spec every layer of the stage fits in: a MoE layer's (if any) with the widest dense MLP
// (a dense layer's, or the shared experts').
LayerSpec stage_union_spec(const GPTConfig& c, const ShardSpec& sh) {
  const int64_t end = sh.layer_end < 0 ? c.num_layers : sh.layer_end;
  const GPTConfig::LayerKinds k = c.layer_kinds(sh.layer_begin, end);
  LayerSpec u = c.layer_spec(k.first_moe >= 0 ? k.first_moe : sh.layer_begin);
  int64_t ffn = 0;
  for (const int64_t l : {k.first_moe, k.first_dense})
    if (l >= 0) ffn = std::max(ffn, c.layer_spec(l).ffn);
  u.ffn = ffn;
  return u;
}
}  // namespace

LayerDims stage_dims(const GPTConfig& c, int64_t B, const StageSpec& s) {
  LayerDims d;
  d.B = B;
  d.S = c.seq_length / s.cp_size;  // this CP rank's tokens of each sequence
  d.H = c.hidden_size;
  d.spec = stage_union_spec(c, s.shard);
  d.ep = s.shard.ep_size;
  d.etp = s.shard.etp_size;
  d.tp = s.shard.tp_size;
  d.sp = s.sequence_parallel && d.tp > 1;
  d.eps = c.norm_epsilon;
  d.rotary_dim = c.rope() ? c.rotary_dim() : 0;
  d.rotary_interleaved = c.rotary_interleaved;
  d.dtype = s.dtype;
  d.device = ops::device();
  return d;
}
LayerDims layer_dims(const GPTConfig& c, const LayerDims& stage, int64_t layer) {
  LayerDims d = stage;
  d.spec = c.layer_spec(layer);
  return d;
}
namespace {
// Layer caches a stage keeps per slot (layers not recomputed) and in the shared recompute pool
// (uniform: one chunk's layers; block: the one recomputed layer being replayed).
struct CacheCounts {
  int64_t stored, pool;
};
CacheCounts cache_counts(const StageSpec& spec, int64_t layers) {
  if (spec.recompute_method == "uniform") return {0, std::min(spec.recompute_num_layers, layers)};
  if (spec.recompute_method == "block")
    return {layers - std::min(spec.recompute_num_layers, layers),
            spec.recompute_num_layers > 0 ? 1 : 0};
  return {layers, 0};
}
// The products of one micro-batch's rows (S / CP x B) with each width an activation has,
// checked before any shape is formed from them.
void check_activation_sizes(const GPTConfig& cfg, int64_t B, int64_t tp, int64_t cp) {
  const int64_t N = checked_mul(cfg.seq_length / cp, B,
                                "rows of a micro-batch (--seq-length x "
                                "--micro-batch-size)");
  const LayerSpec s = cfg.layer_spec(0);
  checked_mul(N, cfg.hidden_size,
              "elements of one layer's activations (--seq-length x "
              "--micro-batch-size x --hidden-size)");
  checked_mul(
      N, s.qkv_rows() / tp,
      "elements of the QKV activations (--seq-length x "
      "--micro-batch-size x (--num-attention-heads + 2 x --num-query-groups) x --kv-channels)");
  checked_mul(N, s.fc1_rows() / tp,
              "elements of the MLP activations (--seq-length x "
              "--micro-batch-size x --ffn-hidden-size)");
  checked_mul(N, cfg.padded_vocab_size(tp) / tp,
              "elements of the logits (--seq-length x "
              "--micro-batch-size x --vocab-size)");
  checked_mul(N, s.heads / tp * s.kv_channels,
              "elements of the attention output (--seq-length x "
              "--micro-batch-size x --num-attention-heads x --kv-channels)");
}
std::unique_ptr<ParamStore> own_store(const GPTConfig& cfg, const StageSpec& spec,
                                      ParamStore* given) {
  if (given) return nullptr;
  return std::make_unique<ParamStore>(cfg,
                                      StoreSpec{{spec.shard}, spec.dtype, spec.sequence_parallel});
}
}  // namespace

GPTModel::GPTModel(const GPTConfig& cfg, int64_t micro_batch_size, const StageSpec& spec,
                   Communicator* tp_comm, Communicator* cp_comm, ParamStore* store, int chunk)
    : cfg_(cfg), spec_(spec), dims_(stage_dims(cfg, micro_batch_size, spec)),
      self_comm_(tp_comm ? nullptr : make_self_communicator()), tp_{tp_comm ? tp_comm
                                                                            : self_comm_.get(),
                                                                    dims_.sp},
      cp_comm_(cp_comm), cp_{spec.cp_size, spec.cp_rank, cfg.seq_length},
      cp_attention_{cp_comm, cp::parse_cp_comm_type(spec.cp_comm_type)},
      own_store_(own_store(cfg, spec, store)), store_(store ? store : own_store_.get()),
      param_base_(store_->chunk_params(chunk).first),
      layout_(store_->layout().slice(store_->chunk_params(chunk).first,
                                     store_->chunk_params(chunk).second)),
      scratch_(dims_), dev_(dims_.device) {
  MG_CHECK(spec.dtype == store_->dtype(), "model dtype ", dtype_name(spec.dtype),
           " differs from its parameter store's ", dtype_name(store_->dtype()));
  MG_CHECK(tp_.size() == spec.shard.tp_size, "TP group size ", tp_.size(), " != shard TP ",
           spec.shard.tp_size);
  MG_CHECK(spec.cp_size == (cp_comm ? cp_comm->size() : 1) &&
               spec.cp_rank == (cp_comm ? cp_comm->rank() : 0),
           "CP group (", cp_comm ? cp_comm->size() : 1, " ranks) does not match the stage's CP ",
           spec.cp_size, " rank ", spec.cp_rank);
  MG_CHECK(cfg.seq_length % (2 * spec.cp_size) == 0 || spec.cp_size == 1, "seq length ",
           cfg.seq_length, " not divisible by 2 x CP ", spec.cp_size);
  const ShardSpec& sh = spec.shard;
  const int64_t end = sh.layer_end < 0 ? cfg.num_layers : sh.layer_end;
  num_layers_ = end - sh.layer_begin;
  const int64_t N = dims_.rows(), R = dims_.local_rows(), H = dims_.H;
  int64_t small = 0;
  for (const ParamSpec& p : layout_.params()) {
    const bool is_small = dims_.low_precision() && p.shape.size() == 1;
    small_offset_.push_back(is_small ? small : -1);
    if (is_small) small += p.numel();
  }
  small_ = Tensor({small}, DType::F32, dev_);
  for (int64_t l = 0; l < num_layers_; ++l) {
    layer_dims_.push_back(layer_dims(cfg, dims_, sh.layer_begin + l));
    layer_params_.push_back(layer_view(false, sh.layer_begin + l));
    layer_grads_.push_back(layer_view(true, sh.layer_begin + l));
  }
  layer_param_ids_.resize(size_t(num_layers_));
  for (int i = 0; i < int(layout_.params().size()); ++i) {
    const ParamTraits& t = layout_.params()[size_t(i)].traits;
    if (t.part == ModelPart::Layer) {
      MG_CHECK(t.layer >= sh.layer_begin && t.layer - sh.layer_begin < num_layers_, "parameter ",
               layout_.params()[size_t(i)].name, " declares layer ", t.layer, ", not one of [",
               sh.layer_begin, ", ", sh.layer_begin + num_layers_, ")");
      layer_param_ids_[size_t(t.layer - sh.layer_begin)].push_back(i);
    } else if (t.part == ModelPart::Embedding) embedding_params_.push_back(i);
    else  // final norm, output layer (or its tied copy)
      head_params_.push_back(i);
  }
  MG_CHECK(spec.recompute_method.empty() || spec.recompute_method == "uniform" ||
               spec.recompute_method == "block",
           "recompute method ", spec.recompute_method);
  for (int64_t i = 0; i < cache_counts(spec, num_layers_).pool; ++i)
    recompute_pool_.push_back(std::make_unique<LayerCache>(dims_));
  slots_.resize(size_t(spec.num_slots));
  const std::vector<TensorDecl<Slot>> slot_tensors = slot_decls(cfg, dims_, spec);
  for (Slot& s : slots_) {
    for (int64_t l = 0; l <= num_layers_; ++l) s.resid.emplace_back(Shape{R, H}, DType::F32, dev_);
    for (int64_t l = 0; l < num_layers_; ++l)
      s.caches.push_back(recomputed(l) ? nullptr : std::make_unique<LayerCache>(layer_dims_[l]));
    allocate_decls(s, slot_tensors, dev_);
  }
  allocate_decls(*this, buffer_decls(cfg, dims_, spec), dev_);
  if (cfg.rope()) {
    // Megatron's RoPE positions are the sequence index 0..S-1 of each row (row = t*B + b),
    // whatever the position ids: the same table for every micro-batch (under CP, the global
    // index of the rank's local token t).
    const std::vector<float> inv_freq = cfg.rope_inv_freq();
    ops::copy(rope_inv_freq_.raw(), dev_, inv_freq.data(), Device::CPU, rope_inv_freq_.nbytes());
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) pos[size_t(n)] = int32_t(cp_.position(n / dims_.B));
    ops::copy(rope_positions_.raw(), dev_, pos.data(), Device::CPU, rope_positions_.nbytes());
  }
}

std::vector<int> GPTModel::in_store(const std::vector<int>& ids) const {
  std::vector<int> out(ids);
  for (int& i : out) i += param_base_;
  return out;
}

void GPTModel::notify(const std::vector<int>& ids) {
  if (!ids.empty() && report_grads_) store_->notify_grad_ready(in_store(ids));
}

void GPTModel::need(const std::vector<int>& ids) {
  if (ids.empty()) return;
  store_->notify_params_needed(in_store(ids));
  if (!dims_.low_precision()) return;
  for (int i : ids)
    if (small_offset_[size_t(i)] >= 0) {
      const ParamSpec& p = layout_.params()[size_t(i)];
      ops::cast_to_f32(small_.data<float>() + small_offset_[size_t(i)], param_bytes(p), dtype(),
                       p.numel());
    }
}

float* GPTModel::param(const char* name) {
  const size_t i = size_t(&layout_.get(name) - layout_.params().data());
  if (dims_.low_precision()) {
    MG_CHECK(small_offset_[i] >= 0, name, " is a matrix: read it with matrix()");
    return small_.data<float>() + small_offset_[i];
  }
  return params() + layout_.params()[i].offset;
}

cpu::Mat GPTModel::matrix(const char* name) {
  const char* base = static_cast<const char*>(param_data());
  return {base + layout_.get(name).offset * int64_t(dtype_size(dtype())), dtype()};
}
bool GPTModel::recomputed(int64_t l) const {
  if (spec_.recompute_method == "uniform") return true;
  if (spec_.recompute_method == "block") return l < spec_.recompute_num_layers;
  return false;
}

int64_t GPTModel::chunk_begin(int64_t l) const {
  return spec_.recompute_method == "uniform" ? l - l % spec_.recompute_num_layers : l;
}

LayerCache& GPTModel::cache(Slot& s, int64_t l) {
  return recomputed(l) ? *recompute_pool_[size_t(l - chunk_begin(l))] : *s.caches[size_t(l)];
}

const char* GPTModel::output_weight_name() const {
  return spec_.shard.first_stage && cfg_.tied_output() ? "embedding.word_embeddings.weight"
                                                       : "output_layer.weight";
}

LayerInputs GPTModel::layer_inputs(const Slot& s) const {
  LayerInputs in;
  in.seg_start = s.has_attention_start ? s.attention_start.data<int32_t>() : nullptr;
  if (cfg_.rope()) {
    in.positions = rope_positions_.data<int32_t>();
    in.inv_freq = rope_inv_freq_.data<float>();
  }
  if (s.dropout_on) in.dropout = &s.dropout;
  if (cp_.size > 1) in.cp = &cp_attention_;
  in.ep = ep_comm_;
  in.ep_allgather = ep_allgather_;
  in.etp_ep = etp_ep_comm_;
  return in;
}

LayerInputs GPTModel::layer_inputs(const Slot& s, int64_t l) const {
  LayerInputs in = layer_inputs(s);
  in.layer = spec_.shard.layer_begin + l;
  return in;
}

DropoutRows GPTModel::embedding_dropout(const Slot& s) const {
  const DropoutStep& st = s.dropout;
  return {st.key(st.hidden, 0, DropoutSite::Embedding),     st.sample0, dims_.B,
          dims_.sp ? tp_.rank() * (dims_.S / dims_.tp) : 0, 0,          cp_};
}

void GPTModel::final_norm_forward(Slot& s) {
  const int64_t R = dims_.local_rows(), H = dims_.H;
  const cpu::MatOut out{s.lnf.raw(), s.lnf.dtype()};
  const float* x = s.resid.back().data<float>();
  const float offset = cfg_.norm_weight_offset();
  if (!cfg_.norm_bias())
    return ops::rmsnorm_forward(out, s.lnf_rstd.data<float>(), x,
                                param("decoder.final_layernorm.weight"), R, H, cfg_.norm_epsilon,
                                offset);
  ops::layernorm_forward(out, s.lnf_mean.data<float>(), s.lnf_rstd.data<float>(), x,
                         param("decoder.final_layernorm.weight"),
                         param("decoder.final_layernorm.bias"), R, H, cfg_.norm_epsilon, offset);
}

void GPTModel::final_norm_backward(Slot& s) {
  const int64_t R = dims_.local_rows(), H = dims_.H;
  const float* x = s.resid.back().data<float>();
  const float offset = cfg_.norm_weight_offset();
  if (!cfg_.norm_bias())
    return ops::rmsnorm_backward(d_resid_.data<float>(), grad("decoder.final_layernorm.weight"),
                                 d_lnf_.data<float>(), x, param("decoder.final_layernorm.weight"),
                                 s.lnf_rstd.data<float>(), R, H, offset);
  ops::layernorm_backward(d_resid_.data<float>(), grad("decoder.final_layernorm.weight"),
                          grad("decoder.final_layernorm.bias"), d_lnf_.data<float>(), x,
                          param("decoder.final_layernorm.weight"), s.lnf_mean.data<float>(),
                          s.lnf_rstd.data<float>(), R, H, offset);
}

LayerWeights GPTModel::layer_view(bool for_grads, int64_t layer) {
  ParamAccess at;
  if (for_grads) {
    at.matrix = [&](const ParamSpec& p) -> void* { return grads() + p.offset; };
    at.vector = [&](const ParamSpec& p) { return grads() + p.offset; };
  } else {
    at.matrix = [&](const ParamSpec& p) -> void* { return param_bytes(p); };
    at.vector = [&](const ParamSpec& p) { return param(p.name.c_str()); };
  }
  return layer_weights(cfg_, spec_.shard, layout_, layer, at);
}

void GPTModel::forward_step(int64_t slot, const MicroBatch& mb) {
  Slot& s = slots_[slot];
  const int64_t B = dims_.B, S = dims_.S, N = dims_.rows(), R = dims_.local_rows(), H = dims_.H;
  const int64_t V = cfg_.padded_vocab_size(), V_local = V / dims_.tp;
  const ShardSpec& sh = spec_.shard;
  // The loader's [B, S] arrays into the model's [S, B] row order.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t) {
      const int64_t i = b * S + t, row = t * B + b;
      if (sh.first_stage) {
        MG_USER_CHECK(mb.tokens[i] >= 0 && mb.tokens[i] < V, "the data holds token id ",
                      mb.tokens[i], " but the model's vocabulary has ", V,
                      " entries; preprocess with the tokenizer given to train (--tokenizer-type)");
        MG_CHECK(!cfg_.learned_positions() ||
                     (mb.position_ids[i] >= 0 && mb.position_ids[i] < cfg_.max_positions()),
                 "position id ", mb.position_ids[i], " outside the position table");
        s.tokens_h.data<int32_t>()[row] = mb.tokens[i];
        s.positions_h.data<int32_t>()[row] = mb.position_ids[i];
      }
      if (sh.last_stage) {
        MG_USER_CHECK(mb.labels[i] < V && (mb.labels[i] >= 0 || mb.loss_mask[i] == 0.f),
                      "the data holds token id ", mb.labels[i], " but the model's vocabulary has ",
                      V, " entries; preprocess with the tokenizer given to train");
        s.labels_h.data<int32_t>()[row] = mb.labels[i];
        s.mask.data<float>()[row] = mb.loss_mask[i];
      }
    }
  const size_t ids_bytes = size_t(N) * sizeof(int32_t);
  if (sh.first_stage) {
    ops::copy(s.tokens.raw(), dev_, s.tokens_h.raw(), Device::CPU, ids_bytes);
    ops::copy(s.positions.raw(), dev_, s.positions_h.raw(), Device::CPU, ids_bytes);
  }
  if (sh.last_stage) {
    ops::copy(s.labels.raw(), dev_, s.labels_h.raw(), Device::CPU, ids_bytes);
    if (!s.mask_d.empty()) ops::copy(s.mask_d.raw(), dev_, s.mask.raw(), Device::CPU, N * 4);
  }

  // Every stage runs attention, so every stage needs the (optional) attention starts.
  s.has_attention_start = mb.attention_start != nullptr;
  if (s.has_attention_start)
    ops::copy(s.attention_start.raw(), dev_, mb.attention_start, Device::CPU, ids_bytes);
  s.dropout_on = dropout_enabled_;
  if (s.dropout_on) {
    MG_CHECK(mb.first_sample >= 0, "dropout needs the micro-batch's global sample index");
    s.dropout = dropout_;
    s.dropout.sample0 = mb.first_sample;
  }
  if (sh.first_stage) {
    need(embedding_params_);
    float* x0 = s.resid.front().data<float>();
    float* emb = dims_.sp ? emb_full_.data<float>() : x0;
    tp::vocab_parallel_embedding_forward(tp_, emb, s.tokens.data<int32_t>(),
                                         s.positions.data<int32_t>(),
                                         matrix("embedding.word_embeddings.weight"),
                                         cfg_.learned_positions()
                                             ? matrix("embedding.position_embeddings.weight")
                                             : cpu::Mat{nullptr, dtype()},
                                         V_local, N, H);
    if (dims_.sp) tp::scatter_to_sp_region_forward(tp_, emb, x0, R * H);
    if (s.dropout_on && s.dropout.hidden > 0.f)
      ops::dropout_forward(x0, x0, nullptr, R, H, embedding_dropout(s));
  }
  for (int64_t l = 0; l < num_layers_; ++l) {
    need(layer_param_ids_[size_t(l)]);
    LayerCache& c = cache(s, l);
    transformer_layer_forward(tp_, s.resid[l + 1].data<float>(), s.resid[l].data<float>(),
                              layer_params_[l], c, scratch_, layer_dims_[l], layer_inputs(s, l));
    if (layer_dims_[l].spec.is_moe()) {
      const MoeRouterConfig& rc = layer_dims_[l].spec.moe.router;
      if (rc.aux_loss_coeff > 0)
        moe_losses_.load_balancing += c.routing.router.aux_loss / rc.aux_loss_coeff;
      if (rc.z_loss_coeff > 0) moe_losses_.z += c.routing.router.z_loss / rc.z_loss_coeff;
      moe_losses_.dropped += double(c.routing.dropped);
      moe_losses_.layer_microbatches += 1;
    }
  }
  if (!sh.last_stage) return;
  need(head_params_);

  final_norm_forward(s);
  // Output layer: column-parallel over the vocab (the tied word embedding, or its own weight),
  // no bias. The logits come out of the GEMM in f32, and the loss is computed in f32.
  tp::column_parallel_forward(tp_, s.logits.data<float>(), s.lnf.raw(), s.lnf_full.raw(),
                              matrix(output_weight_name()), nullptr, {N, H, V_local});
  tp::vocab_parallel_cross_entropy_forward(tp_, s.losses.data<float>(), s.lse.data<float>(),
                                           ce_scratch_.data<float>(), s.logits.data<float>(),
                                           s.labels.data<int32_t>(), N, V_local);
  s.mask_sum = 0;
  for (int64_t n = 0; n < N; ++n) s.mask_sum += s.mask.data<float>()[n];
  if (cp_comm_) s.mask_sum = all_reduce_sum(*cp_comm_, s.mask_sum);  // the whole sequences'
  tokens_ += s.mask_sum;
  // Per-token loss: the plain sum (a divisor of 1; nothing to add when every token is masked).
  ops::masked_mean_accumulate(reinterpret_cast<double*>(loss_sum_.raw()), s.losses.data<float>(),
                              (s.mask_d.empty() ? s.mask : s.mask_d).data<float>(), N,
                              per_token_loss_ ? std::min(s.mask_sum, 1.0) : s.mask_sum);
}

void GPTModel::reset_loss() {
  ops::memset_zero(loss_sum_.raw(), sizeof(double), dev_);
  tokens_ = 0;
}

double GPTModel::take_loss() {
  if (!spec_.shard.last_stage) return 0.0;
  double sum = 0;
  ops::copy(&sum, Device::CPU, loss_sum_.raw(), dev_, sizeof(double));
  ops::memset_zero(loss_sum_.raw(), sizeof(double), dev_);
  return cp_comm_ ? all_reduce_sum(*cp_comm_, sum) : sum;
}

void GPTModel::backward(int64_t slot, const float* d_output, float loss_scale) {
  Slot& s = slots_[slot];
  const int64_t N = dims_.rows(), R = dims_.local_rows(), H = dims_.H;
  const int64_t V_local = cfg_.padded_vocab_size() / dims_.tp;
  const ShardSpec& sh = spec_.shard;
  if (sh.last_stage) {
    const float inv = per_token_loss_  ? loss_scale
                      : s.mask_sum > 0 ? float(loss_scale / s.mask_sum)
                                       : 0.f;
    for (int64_t n = 0; n < N; ++n) dlosses_h_.data<float>()[n] = s.mask.data<float>()[n] * inv;
    ops::copy(dlosses_.raw(), dev_, dlosses_h_.raw(), Device::CPU, dlosses_.nbytes());
    float* dlogits = s.logits.data<float>();  // the gradient replaces the logits in place
    tp::vocab_parallel_cross_entropy_backward(tp_, dlogits, s.logits.data<float>(),
                                              s.lse.data<float>(), s.labels.data<int32_t>(),
                                              dlosses_.data<float>(), N, V_local);
    tp::column_parallel_backward(tp_, d_lnf_.data<float>(), d_full_.data<float>(),
                                 grad(output_weight_name()), nullptr, dlogits,
                                 {(dims_.sp ? s.lnf_full : s.lnf).raw(), dtype()},
                                 matrix(output_weight_name()), {N, H, V_local});
    d_resid_.zero();
    final_norm_backward(s);
    notify(head_params_);
  } else {
    ops::copy(d_resid_.raw(), dev_, d_output, dev_, R * H * sizeof(float));
  }
  for (int64_t l = num_layers_ - 1; l >= 0; --l) {
    // Full recompute: entering a chunk from its top, re-run its forward from the stored chunk
    // input (same kernels, same inputs: the same bits) to refill the shared caches.
    if (recomputed(l) &&
        (l == num_layers_ - 1 || chunk_begin(l + 1) != chunk_begin(l) || !recomputed(l + 1)))
      for (int64_t r = chunk_begin(l); r <= l; ++r)
        transformer_layer_forward(tp_, s.resid[r + 1].data<float>(), s.resid[r].data<float>(),
                                  layer_params_[r], cache(s, r), scratch_, layer_dims_[r],
                                  layer_inputs(s, r));
    LayerInputs in = layer_inputs(s, l);
    in.loss_scale = loss_scale;
    transformer_layer_backward(tp_, d_resid_.data<float>(), s.resid[l].data<float>(),
                               layer_params_[l], layer_grads_[l], cache(s, l), scratch_,
                               layer_dims_[l], in);
    notify(layer_param_ids_[size_t(l)]);
  }
  if (sh.first_stage) {
    if (s.dropout_on && s.dropout.hidden > 0.f)
      ops::dropout_backward(d_resid_.data<float>(), d_resid_.data<float>(), R, H,
                            embedding_dropout(s));
    const float* d_emb = d_resid_.data<float>();
    if (dims_.sp) {
      tp::scatter_to_sp_region_backward(tp_, d_resid_.data<float>(), d_full_.data<float>(), R * H);
      d_emb = d_full_.data<float>();
    }
    tp::vocab_parallel_embedding_backward(
        tp_, grad("embedding.word_embeddings.weight"),
        cfg_.learned_positions() ? grad("embedding.position_embeddings.weight") : nullptr, d_emb,
        s.tokens.data<int32_t>(), s.positions.data<int32_t>(), V_local, N, H);
    notify(embedding_params_);
  }
}

std::vector<TensorDecl<GPTModel::Slot>> GPTModel::slot_decls(const GPTConfig& cfg,
                                                             const LayerDims& d,
                                                             const StageSpec& spec) {
  const int64_t N = d.rows(), R = d.local_rows(), H = d.H;
  const DType i32 = DType::I32, f32 = DType::F32;
  std::vector<TensorDecl<Slot>> t = {{&Slot::tokens, "tokens", {N}, i32},
                                     {&Slot::positions, "positions", {N}, i32},
                                     {&Slot::labels, "labels", {N}, i32},
                                     {&Slot::tokens_h, "tokens_h", {N}, i32, true},
                                     {&Slot::positions_h, "positions_h", {N}, i32, true},
                                     {&Slot::labels_h, "labels_h", {N}, i32, true},
                                     {&Slot::mask, "mask", {N}, f32, true},
                                     {&Slot::attention_start, "attention_start", {N}, i32}};
  if (d.device != Device::CPU) t.push_back({&Slot::mask_d, "mask_d", {N}, f32});
  if (spec.shard.last_stage) {
    const std::vector<TensorDecl<Slot>> head = {
        {&Slot::lnf, "lnf", {R, H}, spec.dtype},
        {&Slot::lnf_mean, "lnf_mean", {cfg.norm_bias() ? R : 0}, f32},
        {&Slot::lnf_rstd, "lnf_rstd", {R}, f32},
        {&Slot::lnf_full, "lnf_full", {d.sp ? N : 0, H}, spec.dtype},
        {&Slot::logits, "logits", {N, cfg.padded_vocab_size() / d.tp}, f32},
        {&Slot::losses, "losses", {N}, f32},
        {&Slot::lse, "lse", {N}, f32}};
    t.insert(t.end(), head.begin(), head.end());
  }
  return t;
}

std::vector<TensorDecl<GPTModel>> GPTModel::buffer_decls(const GPTConfig& cfg, const LayerDims& d,
                                                         const StageSpec& spec) {
  const int64_t N = d.rows(), R = d.local_rows(), H = d.H;
  const DType f32 = DType::F32;
  using M = GPTModel;
  std::vector<TensorDecl<M>> t = {
      {&M::d_resid_, "d_resid", {R, H}, f32},        {&M::d_lnf_, "d_lnf", {R, H}, f32},
      {&M::d_full_, "d_full", {N, H}, f32},          {&M::dlosses_, "dlosses", {N}, f32},
      {&M::dlosses_h_, "dlosses_h", {N}, f32, true}, {&M::loss_sum_, "loss_sum", {1}, DType::I64},
      {&M::ce_scratch_, "ce_scratch", {N}, f32}};
  if (spec.shard.first_stage) t.push_back({&M::emb_full_, "emb_full", {N, H}, f32});
  if (cfg.rope()) {
    t.push_back({&M::rope_inv_freq_, "rope_inv_freq", {cfg.rotary_dim() / 2}, f32});
    t.push_back({&M::rope_positions_, "rope_positions", {N}, DType::I32});
  }
  return t;
}

int64_t GPTModel::activation_bytes(const GPTConfig& cfg, int64_t micro_batch_size,
                                   const StageSpec& spec) {
  check_activation_sizes(cfg, micro_batch_size, spec.shard.tp_size, spec.cp_size);
  const LayerDims d = stage_dims(cfg, micro_batch_size, spec);
  const int64_t end = spec.shard.layer_end < 0 ? cfg.num_layers : spec.shard.layer_end;
  const int64_t layers = end - spec.shard.layer_begin;
  const CacheCounts caches = cache_counts(spec, layers);
  const char* what =
      "bytes of activations (--num-layers x --seq-length x --micro-batch-size x "
      "--hidden-size ...)";
  const int64_t resid =
      checked_mul(layers + 1, tensor_alloc_bytes(d.local_rows() * d.H, DType::F32, what), what);
  // The stored caches: every layer's, or under block recompute those after the first
  // recompute_num_layers (uniform recompute stores none).
  int64_t stored = 0;
  const int64_t first_stored = spec.shard.layer_begin + layers - caches.stored;
  const GPTConfig::LayerKinds k = cfg.layer_kinds(first_stored, spec.shard.layer_begin + layers);
  if (k.moe > 0)
    stored = checked_mul(k.moe, layer_cache_bytes(layer_dims(cfg, d, k.first_moe)), what);
  if (k.first_dense >= 0)
    stored = checked_add(stored,
                         checked_mul(caches.stored - k.moe,
                                     layer_cache_bytes(layer_dims(cfg, d, k.first_dense)), what),
                         what);
  const int64_t per_slot =
      checked_add(checked_add(resid, stored, what), decl_bytes(slot_decls(cfg, d, spec)), what);
  int64_t b = checked_mul(spec.num_slots, per_slot, what);
  b = checked_add(b, checked_mul(caches.pool, layer_cache_bytes(d), what), what);
  b = checked_add(b, layer_scratch_bytes(d), what);
  return checked_add(b, decl_bytes(buffer_decls(cfg, d, spec)), what);
}

size_t GPTModel::allocated_activation_bytes() const {
  size_t b = 0;
  auto add = [&b](const Tensor& t) { b += t.allocated_bytes(); };
  auto add_cache = [&](const LayerCache& c, const LayerDims& d) {
    for (const ActivationDecl& a : layer_cache_decls(d)) add(c.*a.member);
  };
  // The same declarations the constructor allocated from.
  const std::vector<TensorDecl<Slot>> slot_tensors = slot_decls(cfg_, dims_, spec_);
  for (const Slot& s : slots_) {
    for (const Tensor& t : s.resid) add(t);
    for (size_t l = 0; l < s.caches.size(); ++l)
      if (s.caches[l]) add_cache(*s.caches[l], layer_dims_[l]);
    for (const TensorDecl<Slot>& d : slot_tensors) add(s.*d.member);
  }
  for (const auto& c : recompute_pool_) add_cache(*c, dims_);
  for (const auto& a : layer_scratch_decls(dims_)) add(scratch_.*a.member);
  for (const TensorDecl<GPTModel>& d : buffer_decls(cfg_, dims_, spec_)) add(this->*d.member);
  return b;
}

}  // namespace mg
