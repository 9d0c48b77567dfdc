// The measured pipeline bubble of train/pipeline_bubble.h.
#include "train/pipeline_bubble.h"

#include <cstdio>

#include "core/timers.h"

namespace mg {

namespace {
// Every phase in which the pipeline runner exchanges activations or gradients with its
// neighbours (src/pipeline/schedule.cpp): a stage idles there until its neighbour is ready.
constexpr timers::Phase kP2pPhases[] = {
    timers::kForwardRecv,
    timers::kForwardSend,
    timers::kBackwardRecv,
    timers::kBackwardSend,
    timers::kForwardSendBackwardRecv,
    timers::kBackwardSendForwardRecv,
    timers::kForwardSendForwardRecv,
    timers::kBackwardSendBackwardRecv,
    timers::kForwardBackwardSendForwardBackwardRecv,
};
}  // namespace

double idle_fraction(const std::vector<double>& phase_seconds) {
  const double fb = phase_seconds.at(timers::kForwardBackward);
  if (fb <= 0) return 0;
  double wait = 0;
  for (timers::Phase p : kP2pPhases) wait += phase_seconds.at(p);
  return wait / fb;
}

double analytic_bubble(int64_t p, int64_t v, int64_t m) { return double(p - 1) / double(v * m); }

std::string bubble_line(const std::vector<double>& stage_sums, int64_t ranks_per_stage, int64_t p,
                        int64_t v, int64_t m) {
  std::string out = " pipeline bubble (p2p wait / forward-backward time) per stage:";
  char buf[128];
  for (size_t s = 0; s < stage_sums.size(); ++s) {
    std::snprintf(buf, sizeof(buf), " stage %zu %.3f |", s,
                  stage_sums[s] / double(ranks_per_stage));
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), " analytic (p-1)/(v m) = (%lld-1)/(%lld*%lld) = %.3f",
                (long long)p, (long long)v, (long long)m, analytic_bubble(p, v, m));
  return out + buf;
}

}  // namespace mg
