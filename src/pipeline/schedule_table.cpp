#include "pipeline/schedule_table.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace mg {

namespace {

void check_interleaving_has_pipeline(int pp_size, int64_t v) {
  MG_USER_CHECK(v == 1 || pp_size > 1,
                "When interleaved schedule is used, pipeline-model-parallel size should be "
                "greater than 1 (--pipeline-model-parallel-size ",
                pp_size, " with ", v, " virtual stages per pipeline rank)");
}

}  // namespace

ScheduleKind schedule_kind(int pp_size, int virtual_stages) {
  if (pp_size == 1) return ScheduleKind::NoPipelining;
  return virtual_stages == 1 ? ScheduleKind::OneFOneB : ScheduleKind::Interleaved;
}

void validate_schedule(const ScheduleShape& s) {
  MG_USER_CHECK(s.pp_size >= 1 && s.virtual_stages >= 1 && s.microbatches >= 1,
                "a pipeline schedule needs P, v and M >= 1 (got P=", s.pp_size,
                ", v=", s.virtual_stages, ", M=", s.microbatches, ")");
  check_interleaving_has_pipeline(s.pp_size, s.virtual_stages);
  if (s.virtual_stages == 1) return;  // upstream checks groups in the interleaved schedule only
  const int64_t g = s.group(), P = s.pp_size, M = s.microbatches;
  MG_USER_CHECK(g >= P && g <= M,
                "The number of contiguous micro-batches in a virtual pipeline stage "
                "(--microbatch-group-size-per-virtual-pipeline-stage ",
                g, ") should range in [PP=", P, ", M=", M, "]");
  const int64_t last_group = M % g;
  MG_USER_CHECK(last_group == 0 || last_group >= P, "The remainder of M (the total micro-batches, ",
                M, ") divided by N (the contiguous micro-batches in a virtual pipeline stage, ", g,
                ") should be 0, or at least the pipeline-parallel size ", P, ", but it is ",
                last_group,
                ". Otherwise the pipeline has dependency bubbles and loses throughput.");
}

int64_t warmup_forwards(const ScheduleShape& s, int rank) {
  const int64_t total = s.microbatches * s.virtual_stages;
  const int64_t later_ranks = s.pp_size - rank - 1;
  int64_t warmup = 0;
  switch (schedule_kind(s.pp_size, s.virtual_stages)) {
    case ScheduleKind::NoPipelining: warmup = 0; break;
    case ScheduleKind::OneFOneB: warmup = later_ranks; break;
    // Every rank first fills its chunks 0..v-2 with one group each; earlier ranks run two more
    // forwards per later rank, the time a micro-batch takes to come back as a gradient.
    case ScheduleKind::Interleaved:
      warmup = 2 * later_ranks + (s.virtual_stages - 1) * s.group();
      break;
  }
  return std::min(warmup, total);  // at the total: all forwards first, then all backwards
}

std::vector<ScheduleStep> forward_order(const ScheduleShape& s) {
  std::vector<ScheduleStep> order;
  order.reserve(size_t(s.microbatches * s.virtual_stages));
  for (int64_t begin = 0; begin < s.microbatches; begin += s.group()) {
    const int64_t end = std::min(begin + s.group(), s.microbatches);
    for (int c = 0; c < s.virtual_stages; ++c)
      for (int64_t m = begin; m < end; ++m) order.push_back({true, c, m});
  }
  return order;
}

ScheduleTable schedule_table(const ScheduleShape& s, int rank) {
  validate_schedule(s);
  MG_CHECK(rank >= 0 && rank < s.pp_size, "rank ", rank, " outside the ", s.pp_size,
           " pipeline ranks");
  ScheduleTable t;
  t.kind = schedule_kind(s.pp_size, s.virtual_stages);
  t.warmup = warmup_forwards(s, rank);
  const auto order = forward_order(s);
  const int64_t total = int64_t(order.size());
  // Backward k undoes the k-th forward slot's micro-batch in the mirrored chunk: the last
  // virtual stage's gradient comes back first.
  auto backward = [&](int64_t k) {
    return ScheduleStep{false, s.virtual_stages - 1 - order[k].chunk, order[k].microbatch};
  };
  t.steps.reserve(size_t(2 * total));
  for (int64_t k = 0; k < t.warmup; ++k) t.steps.push_back(order[k]);
  for (int64_t k = 0; k < total - t.warmup; ++k) {
    t.steps.push_back(order[k + t.warmup]);
    t.steps.push_back(backward(k));
  }
  for (int64_t k = total - t.warmup; k < total; ++k) t.steps.push_back(backward(k));
  return t;
}

std::string format_schedule(const ScheduleShape& s) {
  std::ostringstream os;
  for (int r = 0; r < s.pp_size; ++r) {
    const auto t = schedule_table(s, r);
    const int64_t n = int64_t(t.steps.size());
    os << "rank " << r << " |";
    for (int64_t i = 0; i < n; ++i) {
      if (t.warmup > 0 && (i == t.warmup || i == n - t.warmup)) os << " |";
      const auto& step = t.steps[size_t(i)];
      os << ' ' << (step.forward ? 'F' : 'B') << step.chunk << '.' << step.microbatch;
    }
    os << '\n';
  }
  return os.str();
}

int virtual_stages(const VirtualStageFlags& f) {
  const int64_t P = f.pp_size, L = f.num_layers;
  MG_USER_CHECK(f.layers_per_virtual_stage >= 0 && f.virtual_stages_per_rank >= 0,
                "--num-layers-per-virtual-pipeline-stage and "
                "--num-virtual-stages-per-pipeline-rank must be positive");
  MG_USER_CHECK(f.layers_per_virtual_stage == 0 || f.virtual_stages_per_rank == 0,
                "No more than one of --num-layers-per-virtual-pipeline-stage and "
                "--num-virtual-stages-per-pipeline-rank can be set at the same time (got ",
                f.layers_per_virtual_stage, " and ", f.virtual_stages_per_rank, ")");
  const bool uneven = f.first_stage_layers > 0 || f.last_stage_layers > 0;
  int64_t v = 1;
  if (f.layers_per_virtual_stage > 0) {
    MG_USER_CHECK(!uneven,
                  "use --num-virtual-stages-per-pipeline-rank to set the virtual pipeline degree "
                  "when the pipeline stages are uneven (--decoder-first/last-pipeline-num-layers)");
    MG_USER_CHECK(L % P == 0, "the number of layers (", L,
                  ") must be divisible by the pipeline-model-parallel size (", P, ")");
    MG_USER_CHECK((L / P) % f.layers_per_virtual_stage == 0,
                  "the number of layers per pipeline stage (", L / P,
                  ") must be divisible by --num-layers-per-virtual-pipeline-stage (",
                  f.layers_per_virtual_stage, ")");
    v = (L / P) / f.layers_per_virtual_stage;
  } else if (f.virtual_stages_per_rank > 0) {
    v = f.virtual_stages_per_rank;
  }
  check_interleaving_has_pipeline(f.pp_size, v);
  if (v == 1 || f.layers_per_virtual_stage > 0) return int(v);
  // --num-virtual-stages-per-pipeline-rank: every rank's layers must split into v chunks.
  if (!uneven) {
    MG_USER_CHECK(L % P == 0 && (L / P) % v == 0, "the number of layers (", L,
                  ") must split into pipeline-model-parallel size x virtual stages per rank (", P,
                  " x ", v, ") equal stages");
    return int(v);
  }
  for (const auto& [layers, which] :
       {std::pair{f.first_stage_layers, "first"}, std::pair{f.last_stage_layers, "last"}})
    MG_USER_CHECK(layers == 0 || layers % v == 0, "number of layers at ", which, " stage: ", layers,
                  " must be divisible by virtual pipeline parallel degree ", v);
  const int64_t middle_ranks =
      P - (f.first_stage_layers > 0 ? 1 : 0) - (f.last_stage_layers > 0 ? 1 : 0);
  const int64_t middle_layers = L - f.first_stage_layers - f.last_stage_layers;
  if (middle_ranks > 0 && middle_layers % middle_ranks == 0)  // else the uneven split refuses
    MG_USER_CHECK((middle_layers / middle_ranks) % v == 0,
                  "number of layers on each middle pipeline rank: ", middle_layers / middle_ranks,
                  " must be divisible by virtual pipeline parallel degree ", v);
  return int(v);
}

int64_t capped_microbatches(const ScheduleShape& shape) {
  return shape.group() * (int64_t(shape.pp_size) * shape.virtual_stages + 2);
}

}  // namespace mg
