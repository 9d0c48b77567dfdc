// `megatron plan`: what a training run needs on each rank and how fast it would go, before the
// cluster hour. Memory is train's own estimate (train/rank_memory.h: the allocator's shapes,
// exact to the byte on the CPU); time is plan/step_time.h's model against a device profile.
// search_layouts enumerates the layouts of a model on a number of devices and ranks them.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "plan/device_profile.h"
#include "plan/step_time.h"
#include "train/rank_memory.h"
#include "train/train_config.h"

namespace mg {

struct StagePlan {
  int stage = 0;       // pipeline rank
  int world_rank = 0;  // the rank shown (TP, CP and DP index 0: the largest shard)
  RankMemory memory;
};

struct Plan {
  TrainConfig cfg;  // finalized for `world`
  int world = 1;
  bool with_host = false;         // a CPU run: its host-side data indices count too
  std::vector<StagePlan> stages;  // every pipeline stage
  int64_t peak_bytes = 0;         // the largest stage's total
  int peak_stage = 0;
  bool fits = false;  // peak_bytes within the profile's memory
  StepEstimate step;
};

// cfg as parsed (not yet finalized); the device holds with_host memory too on the CPU.
Plan make_plan(TrainConfig cfg, int world, const DeviceProfile& profile);

struct SearchResult {
  std::vector<Plan> top;   // fitting layouts, fastest first
  int64_t candidates = 0;  // layouts enumerated
  int64_t invalid = 0;     // refused by train's validation
  int64_t too_large = 0;   // over the profile's memory
  double seconds = 0;
};
// Varies TP, PP, VP, CP, EP, micro-batch size, full recompute and the distributed optimizer
// (SP on whenever TP > 1) over `world` devices; keeps the model, batch and precision.
SearchResult search_layouts(const TrainConfig& base, int world, const DeviceProfile& profile,
                            int top_n);

// `mpirun -np W megatron train ...` for the plan's layout: the user's flags with the layout
// flags replaced.
std::string train_command(const Plan& plan, const std::vector<std::string>& user_args);

// The readable report and the JSON (--json) of one plan.
std::string plan_report(const Plan& plan, const DeviceProfile& profile);
std::string plan_json(const Plan& plan, const DeviceProfile& profile);
std::string search_report(const SearchResult& r, const DeviceProfile& profile,
                          const std::vector<std::string>& user_args);
std::string search_json(const SearchResult& r, const DeviceProfile& profile,
                        const std::vector<std::string>& user_args);

}  // namespace mg
