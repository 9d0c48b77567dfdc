#include "model/param_store.h"

#include "backend/dispatch.h"
#include "core/error.h"

namespace mg {

namespace {
ParamLayout chunks_layout(const GPTConfig& cfg, const StoreSpec& spec,
                          std::vector<std::pair<int, int>>& ranges) {
  MG_CHECK(!spec.chunks.empty(), "a parameter store needs at least one model chunk");
  ParamLayout l;
  for (const ShardSpec& shard : spec.chunks) {
    MG_CHECK(shard.tp_size == spec.chunks.front().tp_size &&
                 shard.tp_rank == spec.chunks.front().tp_rank,
             "the model chunks of one rank share its TP shard");
    const int begin = int(l.params().size());
    for (const ParamDecl& d : model_param_decls(cfg, shard)) l.add(d, shard);
    ranges.emplace_back(begin, int(l.params().size()));
  }
  if (spec.bucket_dp >= 0)
    l.assign_buckets(spec.bucket_size, spec.bucket_dp, spec.bucket_expert_dp);
  return l;
}
}  // namespace

ParamLayout store_layout(const GPTConfig& cfg, const StoreSpec& spec) {
  std::vector<std::pair<int, int>> ranges;
  return chunks_layout(cfg, spec, ranges);
}

ParamStore::ParamStore(const GPTConfig& cfg, const StoreSpec& spec)
    : cfg_(cfg), spec_(spec), layout_(chunks_layout(cfg, spec, chunk_params_)),
      params_({layout_.total_numel()}, spec.dtype, ops::device()),
      grads_({spec.with_grads ? layout_.total_numel() : 0}, DType::F32, ops::device()) {
  MG_CHECK(spec.dtype == DType::F32 || spec.dtype == DType::BF16 || spec.dtype == DType::F16,
           "parameter dtype ", dtype_name(spec.dtype));
}

// Parameters are initialized on the host in f32 (the same values on every device), then stored
// in the store's dtype on its device: Megatron's order (init in f32, then round).
void ParamStore::init(uint64_t seed) {
  if (dtype() == DType::F32 && device() == Device::CPU) return init_params(layout_, params(), seed);
  Tensor full({layout_.total_numel()});
  init_params(layout_, full.data<float>(), seed);
  store_from_host(static_cast<char*>(params_.raw()), full.data<float>(), full.numel());
}

char* ParamStore::param_bytes(const ParamSpec& p) const {
  return static_cast<char*>(params_.raw()) + p.offset * int64_t(dtype_size(dtype()));
}

// Off the CPU the cast runs on the compute device, on a staging copy there.
void ParamStore::store_from_host(char* dst, const float* in, int64_t n) {
  if (device() == Device::CPU) return ops::cast_from_f32(dst, dtype(), in, n);
  Tensor staged({n}, DType::F32, device());
  ops::copy(staged.raw(), device(), in, Device::CPU, staged.nbytes());
  ops::cast_from_f32(dst, dtype(), staged.data<float>(), n);
}

void ParamStore::read_param(const ParamSpec& p, float* out) const {
  if (device() == Device::CPU) return ops::cast_to_f32(out, param_bytes(p), dtype(), p.numel());
  Tensor staged({p.numel()}, DType::F32, device());
  ops::cast_to_f32(staged.data<float>(), param_bytes(p), dtype(), p.numel());
  ops::copy(out, Device::CPU, staged.raw(), device(), staged.nbytes());
}

void ParamStore::write_param(const ParamSpec& p, const float* in) {
  store_from_host(param_bytes(p), in, p.numel());
}

}  // namespace mg
