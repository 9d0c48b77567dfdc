#include "distributed/finalize_grads.h"

#include <cmath>

#include "backend/dispatch.h"
#include "core/timers.h"

namespace mg {

void finalize_grads(ParamStore& store, ProcessGroups& g) {
  float* G = store.grads();
  // Replicated parameters whose grads are partial sums over TP ranks: the norms and row-parallel
  // biases under sequence parallelism, the Q/K head norms always.
  const bool sp = store.spec().sequence_parallel;
  auto partial = [&](const ParamSpec& p) {
    return (sp && p.sharding.sequence_parallel) || p.sharding.tp_partial;
  };
  int64_t n = 0;
  for (const ParamSpec& p : store.layout().params())
    if (partial(p)) n += p.numel();
  if (n > 0 && g.tp->size() > 1) {
    // Packed into one buffer on the compute device: one all-reduce.
    const Device dev = ops::device();
    Tensor packed({n}, DType::F32, dev);
    auto move = [&](bool pack) {
      float* k = packed.data<float>();
      for (const ParamSpec& p : store.layout().params())
        if (partial(p)) {
          const size_t bytes = size_t(p.numel()) * sizeof(float);
          if (pack) ops::copy(k, dev, G + p.offset, dev, bytes);
          else ops::copy(G + p.offset, dev, k, dev, bytes);
          k += p.numel();
        }
    };
    move(true);
    g.tp->all_reduce(packed.data<float>(), n);
    move(false);
  }
  // The word embedding and its tied copy on the last stage (untied models share nothing).
  if (g.grid.pp > 1 && (g.first_stage() || g.last_stage()) && store.config().tied_output()) {
    timers::Scope timer(timers::kEmbeddingGradsAllReduce);
    const ParamSpec& p = store.layout().get(g.first_stage() ? "embedding.word_embeddings.weight"
                                                            : "output_layer.weight");
    g.embedding->all_reduce(G + p.offset, p.numel());
  }
}

void sync_tied_embedding_params(ParamStore& store, ProcessGroups& g) {
  if (g.grid.pp == 1 || !(g.first_stage() || g.last_stage()) || !store.config().tied_output())
    return;
  const ParamSpec& p = store.layout().get(g.first_stage() ? "embedding.word_embeddings.weight"
                                                          : "output_layer.weight");
  std::vector<float> w(size_t(p.numel()));  // f32 even for 16-bit models: one side is zero
  store.read_param(p, w.data());
  g.embedding->all_reduce(w.data(), p.numel());
  store.write_param(p, w.data());
}

double global_grad_norm(ParamStore& store, ProcessGroups& g) {
  // One download each for the dense and the expert params on a GPU. The experts differ
  // across EP ranks and expert-TP shards: their part is summed over their own model-parallel
  // ranks (ProcessGroups::model_sum).
  std::vector<ops::Range> dense, experts;
  for (const ParamSpec& p : store.layout().params())
    if (counted_once(p))
      (p.sharding.expert >= 0 ? experts : dense).push_back({p.offset, p.numel()});
  const double d = ops::sum_squares_ranges(store.grads(), dense.data(), int64_t(dense.size()));
  const double e = experts.empty() ? 0.0
                                   : ops::sum_squares_ranges(store.grads(), experts.data(),
                                                             int64_t(experts.size()));
  return std::sqrt(g.model_sum(d, e));
}

std::vector<float> gather_full_params(ParamStore& store, ProcessGroups& g) {
  const ParamLayout full = gpt_param_layout(store.config());
  std::vector<float> out(size_t(full.total_numel()), 0.f);
  // Dense params from DP x CP rank 0, experts from each EP rank's expert-DP rank 0.
  const bool dense_owner = g.dp_cp->rank() == 0, expert_owner = g.expert_dp().rank() == 0;
  if (dense_owner || expert_owner) {
    std::vector<float> local;
    for (const ParamSpec& p : store.layout().params()) {
      if (!counted_once(p)) continue;
      if (!(p.sharding.expert >= 0 ? expert_owner : dense_owner)) continue;
      const int64_t base = full.get(p.name).offset;
      local.resize(size_t(p.numel()));
      store.read_param(p, local.data());
      for (int64_t i = 0; i < p.numel(); ++i)
        out[size_t(base + global_index(p, i))] = local[size_t(i)];
    }
  }
  g.world->all_reduce(out.data(), int64_t(out.size()));  // disjoint pieces: a sum is a gather
  return out;
}

}  // namespace mg
