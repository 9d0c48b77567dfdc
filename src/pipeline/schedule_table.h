// The pipeline schedule as data: the ordered forward/backward steps (model chunk, micro-batch) one
// pipeline rank runs in an iteration, as Megatron-LM's pipeline_parallel/schedules.py orders them
// (no pipelining; 1F1B with warm-up min(P - r - 1, M); interleaved 1F1B over v model chunks with
// micro-batches taken in groups, warm-up 2 (P - r - 1) + (v - 1) group forwards capped at M v).
// Also Megatron's validity rules for virtual stages and micro-batch groups, with its messages.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mg {

enum class ScheduleKind { NoPipelining, OneFOneB, Interleaved };

// The kind Megatron picks: no pipelining when P = 1, 1F1B when v = 1, interleaved otherwise.
ScheduleKind schedule_kind(int pp_size, int virtual_stages);

struct ScheduleShape {
  int pp_size = 1;           // P: pipeline ranks
  int virtual_stages = 1;    // v: model chunks per rank (virtual stage c P + r on rank r)
  int64_t microbatches = 1;  // M: micro-batches per iteration
  int64_t group_size = 0;    // micro-batches per virtual stage in a row (0: P, Megatron's default)
  int64_t group() const { return group_size > 0 ? group_size : pp_size; }
};

// Refuses (UsageError) a shape the interleaved schedule cannot run: P = 1 with v > 1, a group
// outside [P, M], or a last group of fewer than P micro-batches.
void validate_schedule(const ScheduleShape& shape);

struct ScheduleStep {
  bool forward = true;
  int chunk = 0;           // model chunk on this rank, 0..v-1
  int64_t microbatch = 0;  // 0..M-1
  bool operator==(const ScheduleStep&) const = default;
};

// One rank's steps: `warmup` forwards, then (M v - warmup) forward-backward pairs (the forward
// first), then `warmup` backwards.
struct ScheduleTable {
  ScheduleKind kind = ScheduleKind::NoPipelining;
  int64_t warmup = 0;
  std::vector<ScheduleStep> steps;
  int64_t steady_pairs() const { return int64_t(steps.size()) / 2 - warmup; }
};

// Forwards that pipeline rank `rank` runs before its first backward.
int64_t warmup_forwards(const ScheduleShape& shape, int rank);
// Forward order of the (chunk, micro-batch) pairs on every rank (Megatron's get_schedule_table):
// per group of micro-batches, chunk 0 over the group, then chunk 1, ...
std::vector<ScheduleStep> forward_order(const ScheduleShape& shape);
// A micro-batch count past which a rank's activations in flight no longer grow and the steady
// state repeats per group: group x (P v + 2). Memory estimates and the planner's simulation
// build tables of at most this many micro-batches (a table of M steps would take O(M) memory).
int64_t capped_microbatches(const ScheduleShape& shape);

// The steps of pipeline rank `rank` (validates the shape first).
ScheduleTable schedule_table(const ScheduleShape& shape, int rank);

// The table of every rank as text, one line per rank: "rank 0 | F0.0 F0.1 | ... | B0.1" with
// F/B<chunk>.<micro-batch> and "|" between warm-up, steady state and cool-down.
std::string format_schedule(const ScheduleShape& shape);

// The interleaving flags and the layer split they must divide (0: flag unset).
struct VirtualStageFlags {
  int64_t num_layers = 0;
  int pp_size = 1;
  int64_t layers_per_virtual_stage = 0;  // --num-layers-per-virtual-pipeline-stage
  int64_t virtual_stages_per_rank = 0;   // --num-virtual-stages-per-pipeline-rank
  int64_t first_stage_layers = 0;        // --decoder-first-pipeline-num-layers
  int64_t last_stage_layers = 0;         // --decoder-last-pipeline-num-layers
};

// v from the flags (1: not interleaved), refusing what Megatron's arguments.py and
// TransformerConfig refuse, with their messages.
int virtual_stages(const VirtualStageFlags& flags);

}  // namespace mg
