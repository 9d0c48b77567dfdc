// Pipeline schedule tables against an independent restatement of Megatron-LM's schedules.py
// (tests/pipeline/megatron_schedule_reference.py replays upstream's loops with per-chunk queues),
// the 1F1B order the current runner (pipeline/schedule.cpp) executes, the invariants every
// table must keep (each forward and backward once, backward after forward, runnable across
// ranks), and Megatron's refusals with their messages.
#include "pipeline/schedule_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "testing/subprocess.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

std::string step_text(const ScheduleStep& s) {
  return str_cat(s.forward ? 'F' : 'B', s.chunk, '.', s.microbatch);
}

std::string steps_text(const std::vector<ScheduleStep>& steps) {
  std::string out;
  for (const auto& s : steps) {
    if (!out.empty()) out += ' ';
    out += step_text(s);
  }
  return out;
}

// The reference's line per rank: "<warm-up> <step> <step> ...".
std::vector<std::string> reference(const ScheduleShape& s) {
  auto r = testing::run_command(
      str_cat(MG_PYTHON, " ", MG_SOURCE_DIR, "/tests/pipeline/megatron_schedule_reference.py ",
              s.pp_size, " ", s.virtual_stages, " ", s.microbatches, " ", s.group_size));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines;
  std::istringstream is(r.output);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

std::string shape_name(const ScheduleShape& s) {
  return str_cat("P=", s.pp_size, " v=", s.virtual_stages, " M=", s.microbatches,
                 " group=", s.group());
}

// The shapes, groups other than P, and the non-interleaved ones.
const std::vector<ScheduleShape> kShapes = {
    {2, 2, 4, 0}, {4, 2, 8, 0}, {4, 3, 12, 0}, {2, 4, 8, 0},  // interleaved, group P
    {2, 2, 8, 4}, {2, 2, 5, 3}, {4, 2, 10, 5}, {2, 3, 8, 3},  // groups other than P
    {4, 2, 4, 0}, {8, 2, 8, 0},                               // all-warm-up ranks (M = P)
    {2, 1, 4, 0}, {4, 1, 3, 0}, {4, 1, 8, 0},                 // 1F1B
    {1, 1, 5, 0},                                             // no pipelining
};

TEST(ScheduleTable, MatchesMegatronReference) {
  for (const auto& s : kShapes) {
    const auto ref = reference(s);
    ASSERT_EQ(ref.size(), size_t(s.pp_size)) << shape_name(s);
    for (int r = 0; r < s.pp_size; ++r) {
      const auto t = schedule_table(s, r);
      EXPECT_EQ(str_cat(t.warmup, " ", steps_text(t.steps)), ref[size_t(r)])
          << shape_name(s) << " rank " << r;
    }
  }
}

TEST(ScheduleTable, KindFollowsPipelineAndVirtualStages) {
  EXPECT_EQ(schedule_table({1, 1, 4, 0}, 0).kind, ScheduleKind::NoPipelining);
  EXPECT_EQ(schedule_table({4, 1, 4, 0}, 0).kind, ScheduleKind::OneFOneB);
  EXPECT_EQ(schedule_table({4, 2, 4, 0}, 0).kind, ScheduleKind::Interleaved);
}

// Each (chunk, micro-batch) forward and backward exactly once, its backward after its forward;
// warm-up forwards first, then forward-backward pairs, then the cool-down backwards; the warm-up
// count is upstream's: min(P - r - 1, M) for 1F1B, min(2 (P - r - 1) + (v - 1) group, M v)
// interleaved.
TEST(ScheduleTable, EveryStepOnceBackwardAfterForwardAndUpstreamWarmup) {
  for (const auto& s : kShapes) {
    const int64_t total = s.microbatches * s.virtual_stages;
    for (int r = 0; r < s.pp_size; ++r) {
      SCOPED_TRACE(shape_name(s) + " rank " + std::to_string(r));
      const auto t = schedule_table(s, r);
      const int64_t later = s.pp_size - r - 1;
      const int64_t expected_warmup =
          s.pp_size == 1          ? 0
          : s.virtual_stages == 1 ? std::min(later, s.microbatches)
                                  : std::min(2 * later + (s.virtual_stages - 1) * s.group(), total);
      EXPECT_EQ(t.warmup, expected_warmup);
      ASSERT_EQ(int64_t(t.steps.size()), 2 * total);
      std::map<std::pair<int, int64_t>, size_t> forward_at, backward_at;
      for (size_t i = 0; i < t.steps.size(); ++i) {
        const auto& st = t.steps[i];
        auto& seen = st.forward ? forward_at : backward_at;
        EXPECT_TRUE(seen.emplace(std::pair{st.chunk, st.microbatch}, i).second)
            << step_text(st) << " twice";
        EXPECT_TRUE(st.chunk >= 0 && st.chunk < s.virtual_stages && st.microbatch >= 0 &&
                    st.microbatch < s.microbatches);
        const int64_t steady_end = 2 * total - t.warmup;
        const bool expect_forward =
            int64_t(i) < t.warmup || (int64_t(i) < steady_end && (int64_t(i) - t.warmup) % 2 == 0);
        EXPECT_EQ(st.forward, expect_forward) << "step " << i;
      }
      EXPECT_EQ(int64_t(forward_at.size()), total);
      EXPECT_EQ(int64_t(backward_at.size()), total);
      for (const auto& [key, i] : backward_at) EXPECT_LT(forward_at.at(key), i);
      EXPECT_EQ(t.steady_pairs(), total - t.warmup);
    }
  }
}

// The order pipeline/schedule.cpp runs today, restated: no pipelining is F m, B m per
// micro-batch; 1F1B is warm-up = min(P - r - 1, M) forwards, then F(warm-up + i) followed by
// B(i), then the remaining backwards.
TEST(ScheduleTable, OneVirtualStageIsTheCurrentRunnersOrder) {
  for (int P : {1, 2, 3, 4, 8})
    for (int64_t M : {1, 2, 3, 4, 5, 8, 13})
      for (int r = 0; r < P; ++r) {
        const int64_t warmup = P == 1 ? 0 : std::min<int64_t>(P - r - 1, M);
        std::vector<ScheduleStep> runner;
        for (int64_t m = 0; m < warmup; ++m) runner.push_back({true, 0, m});
        for (int64_t i = 0; i < M - warmup; ++i) {
          runner.push_back({true, 0, warmup + i});
          runner.push_back({false, 0, i});
        }
        for (int64_t i = M - warmup; i < M; ++i) runner.push_back({false, 0, i});
        const auto t = schedule_table({P, 1, M, 0}, r);
        EXPECT_EQ(steps_text(t.steps), steps_text(runner))
            << "P=" << P << " M=" << M << " rank " << r;
        EXPECT_EQ(t.warmup, warmup);
      }
}

// All ranks' tables run to the end when each step waits only for its data: the forward of
// virtual stage c P + r needs that of stage c P + r - 1 (rank r - 1, or rank P - 1's chunk c - 1:
// the wrap-around neighbour), the backward needs stage c P + r + 1's backward (or, on the last
// virtual stage, its own forward). A wrong chunk or micro-batch order deadlocks here.
TEST(ScheduleTable, AllRanksRunToTheEndUnderDataDependencies) {
  for (const auto& s : kShapes) {
    const int P = s.pp_size, v = s.virtual_stages;
    std::vector<ScheduleTable> tables;
    for (int r = 0; r < P; ++r) tables.push_back(schedule_table(s, r));
    std::set<std::tuple<bool, int64_t, int64_t>> done;  // (forward, virtual stage, micro-batch)
    std::vector<size_t> next(size_t(P), 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < P; ++r) {
        auto& i = next[size_t(r)];
        if (i == tables[size_t(r)].steps.size()) continue;
        const auto& st = tables[size_t(r)].steps[i];
        const int64_t stage = int64_t(st.chunk) * P + r, last = int64_t(v) * P - 1;
        const bool ready =
            st.forward
                ? stage == 0 || done.count({true, stage - 1, st.microbatch})
                : done.count({stage == last, stage == last ? stage : stage + 1, st.microbatch});
        if (!ready) continue;
        done.insert({st.forward, stage, st.microbatch});
        ++i;
        progress = true;
      }
    }
    for (int r = 0; r < P; ++r)
      EXPECT_EQ(next[size_t(r)], tables[size_t(r)].steps.size())
          << shape_name(s) << ": rank " << r << " stuck at step " << next[size_t(r)];
  }
}

TEST(ScheduleTable, FormatsEveryRankWithPhaseBoundaries) {
  EXPECT_EQ(format_schedule({2, 2, 4, 0}),
            "rank 0 | F0.0 F0.1 F1.0 F1.1 | F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 | "
            "B1.2 B1.3 B0.2 B0.3\n"
            "rank 1 | F0.0 F0.1 | F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 | "
            "B0.2 B0.3\n");
  // No warm-up: no empty phases printed.
  EXPECT_EQ(format_schedule({1, 1, 2, 0}), "rank 0 | F0.0 B0.0 F0.1 B0.1\n");
}

TEST(ScheduleTable, RefusesShapesUpstreamRefuses) {
  using testing::usage_error_of;
  EXPECT_NE(usage_error_of([] {
              validate_schedule({1, 2, 4, 0});
            })
                .find("When interleaved schedule is used, pipeline-model-parallel size should "
                      "be greater than 1"),
            std::string::npos);
  // Group outside [P, M].
  for (const ScheduleShape s :
       {ScheduleShape{4, 2, 8, 2}, ScheduleShape{2, 2, 4, 5}, ScheduleShape{4, 2, 3, 0}})
    EXPECT_NE(usage_error_of([&] {
                validate_schedule(s);
              }).find(str_cat("should range in [PP=", s.pp_size, ", M=", s.microbatches, "]")),
              std::string::npos)
        << shape_name(s);
  // A last group shorter than P: M = 9, group 4 leaves 1 < P = 2.
  const auto msg = usage_error_of([] { validate_schedule({2, 2, 9, 4}); });
  EXPECT_NE(msg.find("The remainder of M"), std::string::npos) << msg;
  EXPECT_NE(msg.find("but it is 1."), std::string::npos) << msg;
  // Upstream no longer asks M to be a multiple of P: M = 5 with group 3 (remainder 2 = P) runs.
  EXPECT_EQ(usage_error_of([] { validate_schedule({2, 2, 5, 3}); }), "(no UsageError)");
  EXPECT_EQ(usage_error_of([] { validate_schedule({4, 2, 6, 0}); }).find("The remainder of M"), 0u);
  // Groups are an interleaving rule only: 1F1B takes any M.
  EXPECT_EQ(usage_error_of([] { validate_schedule({4, 1, 3, 0}); }), "(no UsageError)");
  EXPECT_NE(usage_error_of([] {
              validate_schedule({2, 1, 0, 0});
            }).find("M >= 1"),
            std::string::npos);
}

TEST(VirtualStages, FromEitherFlag) {
  EXPECT_EQ(virtual_stages({24, 4, 0, 0, 0, 0}), 1);
  EXPECT_EQ(virtual_stages({24, 4, 3, 0, 0, 0}), 2);  // 6 layers per rank, 3 per virtual stage
  EXPECT_EQ(virtual_stages({24, 4, 6, 0, 0, 0}), 1);  // one virtual stage: plain 1F1B
  EXPECT_EQ(virtual_stages({24, 4, 0, 3, 0, 0}), 3);
  EXPECT_EQ(virtual_stages({24, 2, 0, 4, 0, 0}), 4);
  // Uneven: first 4, last 4, the middle 2 ranks 8 layers each; all divisible by 2 or 4.
  EXPECT_EQ(virtual_stages({24, 4, 0, 2, 4, 4}), 2);
  EXPECT_EQ(virtual_stages({24, 4, 0, 4, 4, 4}), 4);
}

TEST(VirtualStages, RefusesWhatMegatronRefuses) {
  using testing::usage_error_of;
  auto refusal = [](const VirtualStageFlags& f) {
    return usage_error_of([&] { virtual_stages(f); });
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(refusal({24, 4, 3, 2, 0, 0}),
                  "No more than one of --num-layers-per-virtual-pipeline-stage and "
                  "--num-virtual-stages-per-pipeline-rank"));
  EXPECT_TRUE(has(refusal({24, 4, 2, 0, 4, 0}), "use --num-virtual-stages-per-pipeline-rank"));
  EXPECT_TRUE(has(refusal({26, 4, 2, 0, 0, 0}),
                  "the number of layers (26) must be divisible by the pipeline-model-parallel "
                  "size (4)"));
  EXPECT_TRUE(has(refusal({24, 4, 4, 0, 0, 0}),
                  "layers per pipeline stage (6) must be divisible by "
                  "--num-layers-per-virtual-pipeline-stage (4)"));
  EXPECT_TRUE(
      has(refusal({24, 1, 0, 2, 0, 0}), "pipeline-model-parallel size should be greater than 1"));
  EXPECT_TRUE(
      has(refusal({24, 1, 12, 0, 0, 0}), "pipeline-model-parallel size should be greater than 1"));
  EXPECT_TRUE(has(refusal({24, 4, 0, 4, 0, 0}), "(4 x 4) equal stages"));
  EXPECT_TRUE(has(refusal({24, 4, 0, 2, 3, 0}),
                  "number of layers at first stage: 3 must be divisible by virtual pipeline "
                  "parallel degree 2"));
  EXPECT_TRUE(has(refusal({24, 4, 0, 2, 4, 5}), "at last stage: 5"));
  // First 4, last 4, middle 20 layers on 2 ranks: 10 per rank, not divisible by 4.
  EXPECT_TRUE(has(refusal({28, 4, 0, 4, 4, 4}), "each middle pipeline rank: 10 must be divisible"));
  EXPECT_TRUE(has(refusal({24, 4, -1, 0, 0, 0}), "must be positive"));
}

}  // namespace
}  // namespace mg
