// The pipeline bubble, measured: a rank's idle fraction is the time it spent in the p2p
// exchanges of the schedule (waiting for its neighbours) over its forward-backward time, and
// a stage's is the mean over its ranks; printed beside the interleaved 1F1B schedule's analytic
// bubble (p-1)/(v m) (Narayanan et al., SC21, section 2.2), at --timing-log-level 2.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mg {

// One rank's p2p exchange time over its forward-backward time, from timers::totals() of an
// interval (0 when forward-backward was not timed).
double idle_fraction(const std::vector<double>& phase_seconds);

// (p-1)/(v m): p pipeline stages, v virtual stages per rank, m micro-batches per iteration.
double analytic_bubble(int64_t p, int64_t v, int64_t m);

// " pipeline bubble (p2p wait / forward-backward time) per stage: stage 0 0.231 | stage 1
// 0.118 | analytic (p-1)/(v m) = (2-1)/(2*4) = 0.125". stage_sums[s]: the sum of stage s's
// ranks' idle fractions, ranks_per_stage ranks each.
std::string bubble_line(const std::vector<double>& stage_sums, int64_t ranks_per_stage, int64_t p,
                        int64_t v, int64_t m);

}  // namespace mg
