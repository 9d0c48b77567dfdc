// The step time of a training run, predicted: each pipeline rank's forward and backward time per
// micro-batch from its layers' GEMM shapes (the same LayerDims the layers compute with) against
// the device profile, the attention core, elementwise traffic at memory bandwidth, the TP / SP /
// CP / EP collectives and PP transfers from their volumes (docs/reference/formulas.md) over the links; those
// times run through the schedule table itself (pipeline/schedule_table.h) to give the pipeline's
// length with its bubble; then the DP gradient reduction (what overlap leaves exposed) and the
// optimizer step.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "plan/device_profile.h"
#include "train/train_config.h"

namespace mg {

// Seconds per iteration on the critical pipeline rank, by cause.
struct StepParts {
  double gemm = 0, attention = 0, elementwise = 0;  // compute (recompute included)
  double tp_comm = 0, cp_comm = 0, ep_comm = 0;     // exposed shares
  double pp_p2p = 0, bubble = 0;                    // pipeline transfers and idle time
  double dp_comm = 0, optimizer = 0;                // after the last backward
  std::vector<std::pair<std::string, double>> named() const;
  // += scale x o's compute and TP/CP/EP parts (those a micro-batch's chunk has).
  void add_compute(const StepParts& o, double scale);
};

struct StepEstimate {
  double iteration_seconds = 0;
  double tokens_per_second = 0;
  double model_tflops_per_gpu =
      0;           // model FLOPs (docs/reference/formulas.md, full s^2 attention) per second
  double mfu = 0;  // of the profile's peak in the model dtype
  double bubble_fraction = 0;  // idle share of the pipeline part on the critical rank
  StepParts parts;
};

// cfg has been through finalize_and_validate(world).
StepEstimate estimate_step(const TrainConfig& cfg, const DeviceProfile& profile);

// Seconds the pipeline of `times` takes under `shape`: rank r's chunk c needs times[r][c] =
// {forward, backward} per micro-batch, a transfer between stages takes p2p seconds. Every rank
// runs its schedule_table steps in order, each as soon as its input has arrived. Returns the
// length and, per rank, its busy seconds.
struct PipelineRun {
  double seconds = 0;
  std::vector<double> busy;
};
PipelineRun simulate_pipeline(const ScheduleShape& shape,
                              const std::vector<std::vector<std::pair<double, double>>>& times,
                              double p2p);

}  // namespace mg
