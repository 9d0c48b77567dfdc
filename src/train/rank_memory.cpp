#include "train/rank_memory.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/rank_grid.h"
#include "pipeline/schedule.h"

namespace mg {

namespace {
constexpr const char* kWhat = "bytes of this rank's params, grads, optimizer state and "
                              "activations";
}  // namespace

int64_t RankMemory::total(bool with_host) const {
  const int64_t model = checked_add(checked_add(params, grads, kWhat),
                                    checked_add(optimizer, activations, kWhat), kWhat);
  return with_host ? checked_add(model, checked_add(data, final_params, kWhat), kWhat) : model;
}

StageSpec train_stage_spec(const TrainConfig& cfg, int world_rank) {
  const RankGrid grid = cfg.rank_grid();
  const RankGrid::Coord c = grid.coord(world_rank);
  const auto [layer_begin, layer_end] = cfg.parallel.stage_layers(cfg.model.num_layers, c.pp);
  StageSpec spec;
  spec.shard = {grid.tp, c.tp, layer_begin, layer_end, c.pp == 0, c.pp == grid.pp - 1};
  spec.sequence_parallel = cfg.parallel.sequence_parallel;
  spec.cp_size = grid.cp;
  spec.cp_rank = c.cp;
  spec.num_slots = pipeline_slots(c.pp, grid.pp, cfg.num_micro_batches());
  spec.dtype = cfg.model_dtype();
  if (cfg.recompute_granularity == "full") {
    spec.recompute_method = cfg.recompute_method;
    spec.recompute_num_layers = cfg.recompute_num_layers;
  }
  // DP > 1 reduces bucket by bucket in Megatron's buffer layout (padded for the shards of the
  // distributed optimizer).
  if (grid.dp > 1 || cfg.use_distributed_optimizer) {
    spec.bucket_dp = cfg.use_distributed_optimizer ? grid.dp : 0;
    spec.bucket_size = cfg.parallel.ddp_bucket_size;
  }
  return spec;
}

RankMemory rank_memory(const TrainConfig& cfg, int world_rank) {
  const StageSpec spec = train_stage_spec(cfg, world_rank);
  const ParamCount count = shard_param_count(cfg.model, spec.shard);
  const int64_t n = count.elements, dp = cfg.data_parallel_size;
  const bool low_precision = spec.dtype != DType::F32;
  RankMemory m;
  m.params = checked_bytes(n, spec.dtype, kWhat);
  if (low_precision) m.params = checked_add(m.params, checked_bytes(count.vector_elements,
                                                                     DType::F32, kWhat), kWhat);
  m.grads = checked_bytes(n, DType::F32, kWhat);
  // formulas.md: Adam keeps 2 fp32 moments per parameter, SGD 1; a 16-bit model also an fp32
  // main copy. The distributed optimizer keeps 1/DP of them, plus a reduced grad shard and a
  // gathered param shard of each bucket.
  const int64_t per_element = (cfg.optimizer == "adam" ? 8 : 4) + (low_precision ? 4 : 0);
  m.optimizer = checked_mul(n, per_element, kWhat);
  if (cfg.use_distributed_optimizer) {
    m.optimizer = ceil_div(m.optimizer, dp);
    const int64_t shard = ceil_div(n, dp);
    m.grads = checked_add(m.grads, checked_bytes(shard, DType::F32, kWhat), kWhat);
    m.params = checked_add(m.params, checked_bytes(shard, spec.dtype, kWhat), kWhat);
  }
  m.activations = GPTModel::activation_bytes(cfg.model, cfg.micro_batch_size, spec);
  // The ranks that read batches build their splits' indices (train/batch_source.cpp):
  // sample_index, 2 int32 a sample, and shuffle_index, 1 int32 (the document index aside).
  if (spec.shard.first_stage || spec.shard.last_stage || cfg.reset_attention_mask) {
    const std::array<int64_t, 3> samples = cfg.split_samples();
    const char* what = "bytes of the dataset indices (--train-iters, --eval-iters x "
                       "--global-batch-size samples)";
    m.data = checked_mul(
        checked_add(samples[0], checked_add(samples[1], samples[2], what), what), 12, what);
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
                                ", --micro-batch-size ", cfg.micro_batch_size, ", --vocab-size ",
                                c.vocab_size, " (padded: ", c.padded_vocab_size(), ")");
  if (c.learned_positions())
    drivers += str_cat(", --max-position-embeddings ", c.max_positions());
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
