#include "model/gpt.h"

#include <cstring>

#include "backend/ops.h"

namespace mg {

namespace {
LayerDims make_dims(const GPTConfig& c, int64_t B) {
  return {B, c.seq_length, c.hidden_size, c.num_attention_heads, c.ffn(), c.norm_epsilon};
}
}  // namespace

GPTModel::GPTModel(const GPTConfig& cfg, int64_t micro_batch_size)
    : cfg_(cfg), dims_(make_dims(cfg, micro_batch_size)), layout_(gpt_param_layout(cfg)),
      params_({layout_.total_numel()}), grads_({layout_.total_numel()}), scratch_(dims_) {
  const int64_t N = dims_.N(), H = dims_.H, V = cfg_.padded_vocab_size();
  for (int64_t l = 0; l <= cfg_.num_layers; ++l) resid_.emplace_back(Shape{N, H});
  for (int64_t l = 0; l < cfg_.num_layers; ++l)
    caches_.push_back(std::make_unique<LayerCache>(dims_));
  lnf_ = Tensor({N, H});
  lnf_mean_ = Tensor({N});
  lnf_rstd_ = Tensor({N});
  logits_ = Tensor({N, V});
  losses_ = Tensor({N});
  lse_ = Tensor({N});
  dlosses_ = Tensor({N});
  d_resid_ = Tensor({N, H});
  d_lnf_ = Tensor({N, H});
  tokens_ = Tensor({N}, DType::I32);
  positions_ = Tensor({N}, DType::I32);
  labels_ = Tensor({N}, DType::I32);
  mask_ = Tensor({N});
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    layer_params_.push_back(layer_view(params(), l));
    layer_grads_.push_back(layer_view(grads(), l));
  }
}

void GPTModel::init(uint64_t seed) { init_params(layout_, params(), seed); }

LayerWeights GPTModel::layer_view(float* base, int64_t layer) const {
  const std::string p = "decoder.layers." + std::to_string(layer) + ".";
  auto at = [&](const char* suffix) { return base + layout_.get(p + suffix).offset; };
  return {at("input_layernorm.weight"),         at("input_layernorm.bias"),
          at("self_attention.linear_qkv.weight"), at("self_attention.linear_qkv.bias"),
          at("self_attention.linear_proj.weight"), at("self_attention.linear_proj.bias"),
          at("pre_mlp_layernorm.weight"),        at("pre_mlp_layernorm.bias"),
          at("mlp.linear_fc1.weight"),           at("mlp.linear_fc1.bias"),
          at("mlp.linear_fc2.weight"),           at("mlp.linear_fc2.bias")};
}

double GPTModel::forward(const MicroBatch& mb) {
  const int64_t N = dims_.N(), H = dims_.H, V = cfg_.padded_vocab_size();
  for (int64_t n = 0; n < N; ++n) {
    MG_CHECK(mb.tokens[n] >= 0 && mb.tokens[n] < V, "token id ", mb.tokens[n], " outside vocab ",
             V);
    MG_CHECK(mb.position_ids[n] >= 0 && mb.position_ids[n] < cfg_.max_positions(),
             "position id ", mb.position_ids[n], " outside the position table");
    MG_CHECK(mb.labels[n] < V, "label ", mb.labels[n], " outside vocab ", V);
  }
  std::memcpy(tokens_.data<int32_t>(), mb.tokens, N * sizeof(int32_t));
  std::memcpy(positions_.data<int32_t>(), mb.position_ids, N * sizeof(int32_t));
  std::memcpy(labels_.data<int32_t>(), mb.labels, N * sizeof(int32_t));
  std::memcpy(mask_.data<float>(), mb.loss_mask, N * sizeof(float));

  float* P = params();
  const float* wte = P + layout_.get("embedding.word_embeddings.weight").offset;
  const float* wpe = P + layout_.get("embedding.position_embeddings.weight").offset;
  cpu::embedding_forward(resid_[0].data<float>(), mb.tokens, mb.position_ids, wte, wpe, N, H);
  for (int64_t l = 0; l < cfg_.num_layers; ++l)
    transformer_layer_forward(resid_[l + 1].data<float>(), resid_[l].data<float>(),
                              layer_params_[l], *caches_[l], scratch_, dims_);
  cpu::layernorm_forward(lnf_.data<float>(), lnf_mean_.data<float>(), lnf_rstd_.data<float>(),
                         resid_.back().data<float>(),
                         P + layout_.get("decoder.final_layernorm.weight").offset,
                         P + layout_.get("decoder.final_layernorm.bias").offset, N, H,
                         cfg_.norm_epsilon);
  cpu::linear_forward(logits_.data<float>(), lnf_.data<float>(), wte, nullptr, N, H, V);
  cpu::cross_entropy_forward(losses_.data<float>(), lse_.data<float>(), logits_.data<float>(),
                             mb.labels, N, V);
  double sum = 0;
  mask_sum_ = 0;
  for (int64_t n = 0; n < N; ++n) {
    sum += double(losses_.data<float>()[n]) * mb.loss_mask[n];
    mask_sum_ += mb.loss_mask[n];
  }
  return mask_sum_ > 0 ? sum / mask_sum_ : 0.0;
}

void GPTModel::backward(float loss_scale) {
  const int64_t N = dims_.N(), H = dims_.H, V = cfg_.padded_vocab_size();
  float *P = params(), *G = grads();
  const int64_t wte_off = layout_.get("embedding.word_embeddings.weight").offset;
  const int64_t wpe_off = layout_.get("embedding.position_embeddings.weight").offset;
  const int64_t lnf_w = layout_.get("decoder.final_layernorm.weight").offset;
  const int64_t lnf_b = layout_.get("decoder.final_layernorm.bias").offset;

  const float inv = mask_sum_ > 0 ? float(loss_scale / mask_sum_) : 0.f;
  for (int64_t n = 0; n < N; ++n) dlosses_.data<float>()[n] = mask_.data<float>()[n] * inv;
  float* dlogits = logits_.data<float>();  // the gradient replaces the logits in place
  cpu::cross_entropy_backward(dlogits, logits_.data<float>(), lse_.data<float>(),
                              labels_.data<int32_t>(), dlosses_.data<float>(), N, V);
  d_lnf_.zero();
  cpu::linear_backward(d_lnf_.data<float>(), G + wte_off, nullptr, dlogits, lnf_.data<float>(),
                       P + wte_off, N, H, V);
  d_resid_.zero();
  cpu::layernorm_backward(d_resid_.data<float>(), G + lnf_w, G + lnf_b, d_lnf_.data<float>(),
                          resid_.back().data<float>(), P + lnf_w, lnf_mean_.data<float>(),
                          lnf_rstd_.data<float>(), N, H);
  for (int64_t l = cfg_.num_layers - 1; l >= 0; --l)
    transformer_layer_backward(d_resid_.data<float>(), resid_[l].data<float>(), layer_params_[l],
                               layer_grads_[l], *caches_[l], scratch_, dims_);
  cpu::embedding_backward(G + wte_off, G + wpe_off, d_resid_.data<float>(),
                          tokens_.data<int32_t>(), positions_.data<int32_t>(), N, H);
}

size_t GPTModel::activation_bytes() const {
  size_t b = 0;
  for (const Tensor& t : resid_) b += t.nbytes();
  for (const auto& c : caches_)
    for (const Tensor* t : {&c->ln1, &c->ln1_mean, &c->ln1_rstd, &c->qkv, &c->probs, &c->attn,
                            &c->x_mid, &c->ln2, &c->ln2_mean, &c->ln2_rstd, &c->fc1, &c->gelu})
      b += t->nbytes();
  for (const Tensor* t : {&scratch_.branch_out, &scratch_.d_ln, &scratch_.d_qkv, &scratch_.d_attn,
                          &scratch_.d_fc1, &scratch_.d_gelu, &scratch_.d_probs, &lnf_, &logits_,
                          &d_resid_, &d_lnf_})
    b += t->nbytes();
  return b;
}

}  // namespace mg
