#include "train/rank_memory.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/log.h"
#include "distributed/distributed_optimizer.h"
#include "model/param_store.h"
#include "parallel/rank_grid.h"
#include "pipeline/schedule.h"

namespace mg {

namespace {
constexpr const char* kWhat =
    "bytes of this rank's params, grads, optimizer state and "
    "activations";
}  // namespace

int64_t RankMemory::total(bool with_host) const {
  const int64_t model = checked_add(checked_add(params, grads, kWhat),
                                    checked_add(optimizer, activations, kWhat), kWhat);
  return with_host ? checked_add(model, checked_add(data, final_params, kWhat), kWhat) : model;
}

std::vector<StageSpec> train_chunk_specs(const TrainConfig& cfg, int world_rank) {
  const RankGrid grid = cfg.rank_grid();
  const RankGrid::Coord c = grid.coord(world_rank);
  const int v = cfg.parallel.virtual_stages;
  // In-flight counts stop growing past capped_microbatches: the table of those suffices.
  ScheduleShape shape = cfg.schedule_shape(cfg.num_micro_batches());
  validate_schedule(shape);
  shape.microbatches = std::min(shape.microbatches, capped_microbatches(shape));
  const ScheduleTable table = schedule_table(shape, c.pp);
  std::vector<StageSpec> chunks;
  for (int chunk = 0; chunk < v; ++chunk) {
    const auto [layer_begin, layer_end] =
        cfg.parallel.chunk_layers(cfg.model.num_layers, c.pp, chunk);
    StageSpec spec;
    spec.shard = {grid.tp,
                  c.tp,
                  layer_begin,
                  layer_end,
                  c.pp == 0 && chunk == 0,
                  c.pp == grid.pp - 1 && chunk == v - 1,
                  grid.ep,
                  grid.ep_rank(c),
                  grid.folded() ? grid.expert_tp() : 0,
                  grid.etp_rank(c)};
    spec.sequence_parallel = cfg.parallel.sequence_parallel;
    spec.cp_size = grid.cp;
    spec.cp_rank = c.cp;
    spec.cp_comm_type = cfg.parallel.cp_comm_type;
    spec.num_slots = in_flight(table, chunk);
    spec.dtype = cfg.model_dtype();
    if (cfg.recompute_granularity == "full") {
      spec.recompute_method = cfg.recompute_method;
      spec.recompute_num_layers = cfg.recompute_num_layers;
    }
    chunks.push_back(spec);
  }
  return chunks;
}

StoreSpec train_store_spec(const TrainConfig& cfg, int world_rank) {
  StoreSpec store;
  store.chunks.clear();
  for (const StageSpec& chunk : train_chunk_specs(cfg, world_rank))
    store.chunks.push_back(chunk.shard);
  store.dtype = cfg.model_dtype();
  store.sequence_parallel = cfg.parallel.sequence_parallel && cfg.parallel.tp() > 1;
  // DP x CP > 1 (or expert DP > 1) reduces bucket by bucket in Megatron's buffer layout
  // (padded for the shards of the distributed optimizer, which shards over DP x CP, and the
  // experts' over expert DP).
  const int64_t dp_cp = int64_t(cfg.data_parallel_size) * cfg.parallel.cp();
  const int64_t edp = cfg.model.num_experts > 0 ? cfg.rank_grid().edp() : 1;
  if (dp_cp > 1 || edp > 1 || cfg.use_distributed_optimizer) {
    store.bucket_dp = cfg.use_distributed_optimizer ? dp_cp : 0;
    store.bucket_expert_dp = cfg.use_distributed_optimizer ? edp : 0;
    store.bucket_size = cfg.parallel.ddp_bucket_size;
  }
  return store;
}

RankMemory rank_memory(const TrainConfig& cfg, int world_rank) {
  const std::vector<StageSpec> chunks = train_chunk_specs(cfg, world_rank);
  const StoreSpec store = train_store_spec(cfg, world_rank);
  const DType dtype = store.dtype;
  const bool low_precision = dtype != DType::F32;
  const int64_t state_slots = int64_t(optimizer_kind(cfg.optimizer).state_slots.size());
  auto bytes = [](int64_t n, DType t) { return tensor_alloc_bytes(n, t, kWhat); };
  auto add = [](int64_t& to, int64_t b) { to = checked_add(to, b, kWhat); };
  RankMemory m;
  ParamCount count;
  for (const StageSpec& chunk : chunks) {
    const ParamCount c = shard_param_count(cfg.model, chunk.shard);
    add(count.elements, c.elements);
    add(count.tensors, c.tensors);
  }
  // Past a million parameter tensors (a layer count no machine holds) the layout is not built:
  // the unpadded arithmetic, a lower bound, refuses such a run just as well.
  if (count.tensors > 1000000) {
    const int64_t dp = int64_t(cfg.data_parallel_size) * cfg.parallel.cp();
    const int64_t stepped =
        cfg.use_distributed_optimizer ? ceil_div(count.elements, dp) : count.elements;
    m.params = checked_bytes(count.elements, dtype, kWhat);
    m.grads = checked_bytes(count.elements, DType::F32, kWhat);
    m.optimizer = checked_mul(stepped, 4 * (state_slots + (low_precision ? 1 : 0)), kWhat);
    for (const StageSpec& chunk : chunks)
      add(m.activations, GPTModel::activation_bytes(cfg.model, cfg.micro_batch_size, chunk));
    return m;
  }
  // The store's own layout (bucket padding included) and the tensors the trainer allocates
  // from it, each as the allocator counts it (tensor_alloc_bytes).
  const ParamLayout layout = store_layout(cfg.model, store);
  m.params = bytes(layout.total_numel(), dtype);
  m.grads = bytes(layout.total_numel(), DType::F32);
  // Each chunk keeps f32 copies of its 1-D params under mixed precision (GPTModel::small_).
  for (const StageSpec& chunk : chunks)
    if (low_precision)
      add(m.params, bytes(shard_param_count(cfg.model, chunk.shard).vector_elements, DType::F32));
  // The optimizer: Adam's 2 fp32 moments (SGD's 1) per parameter it steps, + an fp32 main
  // copy of a 16-bit model (docs/reference/formulas.md's bytes per parameter). The distributed optimizer steps
  // this rank's shard of each bucket (DP x CP ranks, expert buckets expert-DP ranks) and keeps
  // each shard's reduced grads and gathered params.
  const DType reduce_dtype = cfg.parallel.grad_reduce_in_bf16 ? DType::BF16 : DType::F32;
  int64_t stepped = 0;
  if (cfg.use_distributed_optimizer) {
    const RankGrid grid = cfg.rank_grid();
    const bool own_expert_group = grid.ep > 1 || grid.folded();
    // The rank's place in its DP x CP group (CP fastest, as grid.groups("dp-cp") orders it)
    // and in its expert-DP group.
    const RankGrid::Coord c = grid.coord(world_rank);
    const int64_t dense_rank = c.cp + int64_t(grid.cp) * c.dp;
    const int64_t expert_rank = own_expert_group ? grid.edp_rank(c) : dense_rank;
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      const bool expert = layout.bucket_is_expert(b);
      const int64_t dp = expert && own_expert_group ? grid.edp() : int64_t(grid.dp) * grid.cp;
      const auto [begin, end] = layout.buckets()[b];
      const auto shard = bucket_shard({begin, end}, dp, expert ? expert_rank : dense_rank);
      add(stepped, owned_param_elements(layout, shard));
      add(m.grads, bytes(shard.second - shard.first, reduce_dtype));
      add(m.params, bytes(shard.second - shard.first, dtype));
      if (reduce_dtype == DType::BF16) add(m.grads, bytes(end - begin, DType::BF16));
    }
  } else {
    for (const ParamSpec& p : layout.params()) add(stepped, p.numel());
    // The data-parallel reducer's bf16 copy of each bucket (--grad-reduce-in-bf16).
    const RankGrid grid = cfg.rank_grid();
    const bool reduces =
        int64_t(grid.dp) * grid.cp > 1 ||
        (cfg.model.num_experts > 0 && (grid.ep > 1 || grid.folded()) && grid.edp() > 1);
    if (reduces && reduce_dtype == DType::BF16)
      for (const auto& [begin, end] : layout.buckets())
        add(m.grads, bytes(end - begin, DType::BF16));
  }
  m.optimizer = bytes(checked_mul(stepped, state_slots, kWhat), DType::F32);
  if (low_precision) add(m.optimizer, bytes(stepped, DType::F32));
  for (const StageSpec& chunk : chunks)
    m.activations =
        checked_add(m.activations,
                    GPTModel::activation_bytes(cfg.model, cfg.micro_batch_size, chunk), kWhat);
  // The ranks that read batches build their splits' indices (train/batch_source.cpp):
  // sample_index, 2 int32 a sample, and shuffle_index, 1 int32 (the document index aside).
  if (chunks.front().shard.first_stage || chunks.back().shard.last_stage ||
      cfg.reset_attention_mask) {
    const std::array<int64_t, 3> samples = cfg.split_samples();
    const char* what =
        "bytes of the dataset indices (--train-iters, --eval-iters x "
        "--global-batch-size samples)";
    m.data = checked_mul(checked_add(samples[0], checked_add(samples[1], samples[2], what), what),
                         12, what);
  }
  if (!cfg.dump_final_params.empty())
    m.final_params = checked_bytes(cfg.model.num_parameters(), DType::F32, kWhat);
  return m;
}

void check_rank_memory(const TrainConfig& cfg, int world_rank, int64_t available,
                       const std::string& where) {
  const RankMemory m = rank_memory(cfg, world_rank);
  // A GPU run's data indices live on the host, apart from the GPU memory checked here.
  const bool with_data = cfg.device == "cpu";
  if (available < 0 || m.total(with_data) <= available) return;
  const GPTConfig& c = cfg.model;
  std::string drivers = str_cat("--num-layers ", c.num_layers, ", --hidden-size ", c.hidden_size,
                                ", --num-attention-heads ", c.num_attention_heads);
  if (c.kv_channels > 0) drivers += str_cat(", --kv-channels ", c.kv_channels);
  if (c.group_query_attention) drivers += str_cat(", --num-query-groups ", c.num_query_groups);
  drivers += str_cat(", --ffn-hidden-size ", c.ffn(), ", --seq-length ", c.seq_length,
                     ", --micro-batch-size ", cfg.micro_batch_size, ", --vocab-size ", c.vocab_size,
                     " (padded: ", c.padded_vocab_size(), ")");
  if (c.learned_positions()) drivers += str_cat(", --max-position-embeddings ", c.max_positions());
  throw UsageError(str_cat(
      "needs ", format_bytes(m.total(with_data)), " on rank ", world_rank, " (params ",
      format_bytes(m.params), ", grads ", format_bytes(m.grads), ", optimizer ",
      format_bytes(m.optimizer), ", activations ", format_bytes(m.activations),
      with_data && m.data > 0 ? ", data indices " + format_bytes(m.data) : "",
      with_data && m.final_params > 0 ? ", --dump-final-params " + format_bytes(m.final_params)
                                      : "",
      ": driven by ", drivers, ", --train-iters ", cfg.train_iters, ", --global-batch-size ",
      cfg.global_batch_size, "), only ", format_bytes(available), " available (", where,
      with_data && m.data > m.total(false)
          ? "); lower --train-iters, --eval-iters or --global-batch-size"
          : "); lower those sizes, or spread the model over more ranks "
            "(--tensor-model-parallel-size, --pipeline-model-parallel-size, "
            "--use-distributed-optimizer, --recompute-granularity full)"));
}

}  // namespace mg
