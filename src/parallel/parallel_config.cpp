#include "parallel/parallel_config.h"

#include <string>

#include "core/checked_math.h"
#include "core/error.h"

namespace mg {

std::pair<int64_t, int64_t> ParallelConfig::stage_layers(int64_t L, int stage) const {
  const int P = pp();
  const int64_t first = decoder_first_pipeline_num_layers, last = decoder_last_pipeline_num_layers;
  if (first == 0 && last == 0) return {stage * L / P, (stage + 1) * L / P};
  // Uneven: the given first/last stage counts, the rest split evenly over the other stages.
  const int64_t middle_stages = P - (first > 0) - (last > 0);
  const int64_t rest = L - first - last;
  const int64_t per = middle_stages > 0 ? rest / middle_stages : 0;
  int64_t begin = 0;
  for (int s = 0; s < P; ++s) {
    const int64_t n = (s == 0 && first > 0) ? first : (s == P - 1 && last > 0) ? last : per;
    if (s == stage) return {begin, begin + n};
    begin += n;
  }
  return {L, L};
}

std::pair<int64_t, int64_t> ParallelConfig::chunk_layers(int64_t L, int stage, int chunk) const {
  const int v = virtual_stages;
  int64_t begin = 0;
  for (int s = 0; s < stage; ++s) {
    const auto [b, e] = stage_layers(L, s);
    begin += (e - b) / v;
  }
  const auto [b, e] = stage_layers(L, stage);
  begin += chunk * (L / v);  // every earlier chunk index: L / v layers over all ranks
  return {begin, begin + (e - b) / v};
}

std::string ParallelConfig::layout_string(int world) const {
  const int model = tp() * cp() * pp();
  return "TP " + std::to_string(tp()) + " x CP " + std::to_string(cp()) + " x PP " +
         std::to_string(pp()) + " x DP " + std::to_string(model > 0 ? world / model : 0) +
         (ep() > 1 ? " (experts: EP " + std::to_string(ep()) + ")" : "");
}

std::string ParallelConfig::validate(int world, const ModelDims& m, int64_t mbs, int64_t gbs) {
  const int T = tp(), P = pp(), CP = cp();
  MG_USER_CHECK(T >= 1, "--tensor-model-parallel-size must be >= 1 (got ", T, ")");
  MG_USER_CHECK(P >= 1, "--pipeline-model-parallel-size must be >= 1 (got ", P, ")");
  MG_USER_CHECK(CP >= 1, "--context-parallel-size must be >= 1 (got ", CP, ")");
  const int64_t model_ranks = int64_t(T) * CP * P;
  MG_USER_CHECK(model_ranks <= world && world % model_ranks == 0, "world size ", world,
                " is not divisible by --tensor-model-parallel-size ", T,
                " x --context-parallel-size ", CP, " x --pipeline-model-parallel-size ", P,
                " (launch a multiple of ", model_ranks, " ranks)");
  const int DP = int(world / model_ranks);
  // Megatron's get_batch_on_this_cp_rank cuts each sequence into 2 x CP equal chunks.
  if (CP > 1)
    MG_USER_CHECK(m.seq_length % (2 * CP) == 0, "--seq-length ", m.seq_length,
                  " must be divisible by 2 x --context-parallel-size ", CP,
                  " (each sequence is cut into 2 x CP chunks for load balancing)");
  MG_USER_CHECK(cp_comm_type == "p2p" || cp_comm_type == "a2a", "--cp-comm-type '", cp_comm_type,
                "' is not available; use p2p (a ring exchanging K/V blocks) or a2a (all-to-all "
                "over heads); Megatron's allgather and a2a+p2p, and one type per layer, are not "
                "supported yet");
  if (CP > 1 && cp_comm_type == "a2a") {
    MG_USER_CHECK((m.num_attention_heads / T) % CP == 0,
                  "--cp-comm-type a2a splits each TP "
                  "rank's heads across CP ranks: --num-attention-heads ",
                  m.num_attention_heads, " / --tensor-model-parallel-size ", T,
                  " must be divisible by --context-parallel-size ", CP);
    MG_USER_CHECK((m.num_query_groups / T) % CP == 0,
                  "--cp-comm-type a2a splits each TP rank's "
                  "query groups across CP ranks: --num-query-groups ",
                  m.num_query_groups, " / --tensor-model-parallel-size ", T,
                  " must be divisible by --context-parallel-size ", CP);
  }
  // Megatron's TransformerConfig rules: heads and query groups are split across TP ranks.
  MG_USER_CHECK(m.num_attention_heads % T == 0, "--num-attention-heads ", m.num_attention_heads,
                " must be a multiple of --tensor-model-parallel-size ", T);
  MG_USER_CHECK(m.num_query_groups % T == 0, "--num-query-groups ", m.num_query_groups,
                " must be a multiple of --tensor-model-parallel-size ", T,
                " (each TP rank holds whole query groups)");
  MG_USER_CHECK(m.ffn_hidden_size % T == 0, "--ffn-hidden-size ", m.ffn_hidden_size,
                " must be divisible by --tensor-model-parallel-size ", T);
  MG_USER_CHECK(m.padded_vocab_size % T == 0, "padded vocabulary ", m.padded_vocab_size,
                " is not divisible by --tensor-model-parallel-size ", T);
  MG_USER_CHECK(decoder_first_pipeline_num_layers >= 0 && decoder_last_pipeline_num_layers >= 0,
                "--decoder-first/last-pipeline-num-layers must be >= 0");
  const int64_t L = m.num_layers, first = decoder_first_pipeline_num_layers,
                last = decoder_last_pipeline_num_layers;
  MG_USER_CHECK(first <= L && last <= L, "--decoder-first/last-pipeline-num-layers (", first, ", ",
                last, ") must not exceed --num-layers ", L);
  if (first == 0 && last == 0) {
    MG_USER_CHECK(L % P == 0, "--num-layers ", L,
                  " is not divisible by --pipeline-model-parallel-size ", P,
                  "; use --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers "
                  "for an uneven split");
  } else {
    MG_USER_CHECK(P > 1,
                  "--decoder-first/last-pipeline-num-layers need "
                  "--pipeline-model-parallel-size > 1");
    const int64_t middle = P - (first > 0) - (last > 0);
    const int64_t rest = L - first - last;
    MG_USER_CHECK(rest >= 0 && (middle > 0 ? rest % middle == 0 && rest / middle > 0 : rest == 0),
                  "--num-layers ", L, " cannot be split as --decoder-first-pipeline-num-layers ",
                  first, ", --decoder-last-pipeline-num-layers ", last, " and ", middle,
                  " equal middle stage(s) of --pipeline-model-parallel-size ", P);
  }
  MG_USER_CHECK(L >= P, "--num-layers ", L, " is smaller than --pipeline-model-parallel-size ", P);
  MG_USER_CHECK(gbs % checked_mul(mbs, DP, "--micro-batch-size x data-parallel size") == 0,
                "--global-batch-size ", gbs, " must be a multiple of --micro-batch-size ", mbs,
                " x data-parallel size ", DP, " (world ", world, " / (TP ", T, " x CP ", CP,
                " x PP ", P, "))");
  MG_USER_CHECK(ddp_bucket_size >= 0,
                "--ddp-bucket-size must be positive, or 0 for Megatron's default "
                "max(40M, 1M x data-parallel size) (got ",
                ddp_bucket_size, ")");
  if (ddp_bucket_size == 0) ddp_bucket_size = default_ddp_bucket_size(DP);

  std::string warning;
  if (sequence_parallel && T == 1) {
    sequence_parallel = false;
    warning =
        "WARNING: --sequence-parallel has no effect with --tensor-model-parallel-size 1; "
        "ignoring it";
  }
  // Sequence parallelism splits each CP rank's S / CP tokens across the TP ranks.
  if (sequence_parallel)
    MG_USER_CHECK(m.seq_length % (int64_t(T) * CP) == 0, "--seq-length ", m.seq_length,
                  " must be divisible by --tensor-model-parallel-size ", T,
                  CP > 1 ? " x --context-parallel-size " + std::to_string(CP) : std::string(),
                  " with --sequence-parallel");
  return warning;
}

}  // namespace mg
