// Megatron's rank grid against the worked 16-rank example of parallel_state's docstring
// (TP = 2, PP = 4, DP = 2; docs/reference/megatron-reference.md §3) and context-parallel grids, and the stage
// split.
#include "parallel/rank_grid.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/config.h"
#include "parallel/parallel_config.h"

namespace mg {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST(RankGrid, SixteenRankWorkedExample) {
  RankGrid g{2, 4, 2};
  EXPECT_EQ(g.groups("tp"),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.groups("dp"),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.groups("pp"), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.embedding_groups(), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  // Model-parallel groups (tp-pp): one model replica each.
  EXPECT_EQ(g.groups("tp-pp"), (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  // rank = tp + TP * (dp + DP * pp)
  for (int r = 0; r < 16; ++r) {
    const auto c = g.coord(r);
    EXPECT_EQ(r, c.tp + 2 * (c.dp + 2 * c.pp));
    EXPECT_EQ(g.rank_of(c), r);
  }
}

// Context parallelism, written out by hand from upstream's rule (parallel_state's
// generate_masked_orthogonal_rank_groups over the order tp-cp-ep-dp-pp): a group's members
// enumerate its dimensions in that order, first fastest; groups enumerate the other dimensions
// the same way. rank = tp + TP * (cp + CP * (dp + DP * pp)).
TEST(RankGrid, ContextParallelTP2CP2DP2) {
  RankGrid g{2, 1, 2, 2};
  ASSERT_EQ(g.world(), 8);
  EXPECT_EQ(g.groups("tp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups("cp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.groups("dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.groups("dp-cp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(g.groups("tp-cp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // Model parallel stays tp-pp: CP ranks hold the same parameters, like DP replicas.
  EXPECT_EQ(g.groups("tp-pp"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.groups("pp"), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  const RankGrid::Coord c6 = g.coord(6);  // 6 = 0 + 2 * (1 + 2 * 1)
  EXPECT_EQ(c6.tp, 0);
  EXPECT_EQ(c6.cp, 1);
  EXPECT_EQ(c6.dp, 1);
  EXPECT_EQ(c6.pp, 0);
  for (int r = 0; r < 8; ++r) {
    const auto c = g.coord(r);
    EXPECT_EQ(r, c.tp + 2 * (c.cp + 2 * c.dp));
    EXPECT_EQ(g.rank_of(c), r);
  }
}

TEST(RankGrid, ContextParallelCP2PP2) {
  RankGrid g{1, 2, 1, 2};
  ASSERT_EQ(g.world(), 4);
  EXPECT_EQ(g.groups("cp"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(g.groups("pp"), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(g.groups("dp"), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(g.groups("dp-cp"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(g.groups("tp-cp"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(g.groups("tp-pp"), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(g.embedding_groups(), (Groups{{0, 2}, {1, 3}}));
  const RankGrid::Coord c3 = g.coord(3);  // 3 = 1 + 2 * 1
  EXPECT_EQ(c3.cp, 1);
  EXPECT_EQ(c3.pp, 1);
  EXPECT_EQ(c3.dp, 0);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(g.rank_of(g.coord(r)), r);
}

// The experts' grid (parallel folding), written out by hand from upstream's expert rank
// generator (order tp-ep-dp-pp with tp = expert TP, dp = expert DP = stage ranks / (ETP x EP)):
// TP 2 x DP 2 x PP 2 with whole experts (ETP 1) over EP 2, and TP 1 x DP 4 with ETP 2 x EP 2.
TEST(RankGrid, ExpertGridFoldsOverTheStageRanks) {
  RankGrid g{2, 2, 2, 1, 2, 1};
  ASSERT_TRUE(g.folded());
  EXPECT_EQ(g.edp(), 2);
  EXPECT_EQ(g.expert_groups("ep"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.expert_groups("edp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.expert_groups("etp-ep"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.expert_groups("etp-ep-pp"), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  for (int r = 0; r < 8; ++r) {  // within a stage, j = r % 4 = etp + ETP (ep + EP edp)
    const auto c = g.coord(r);
    EXPECT_EQ(g.etp_rank(c), 0);
    EXPECT_EQ(g.ep_rank(c), r % 2);
    EXPECT_EQ(g.edp_rank(c), r % 4 / 2);
  }
  RankGrid h{1, 1, 4, 1, 2, 2};
  EXPECT_EQ(h.edp(), 1);
  EXPECT_EQ(h.expert_groups("etp"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(h.expert_groups("ep"), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(h.expert_groups("etp-ep"), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(h.expert_groups("edp"), (Groups{{0}, {1}, {2}, {3}}));
  const auto c3 = h.coord(3);
  EXPECT_EQ(h.etp_rank(c3), 1);
  EXPECT_EQ(h.ep_rank(c3), 1);
  // Expert TP = TP (unfolded): the dense CP x DP ranks split into EP x EDP, as before.
  RankGrid u{2, 1, 2, 1, 2};
  EXPECT_FALSE(u.folded());
  EXPECT_EQ(u.expert_groups("ep"), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(u.expert_groups("edp"), (Groups{{0}, {1}, {2}, {3}}));
}

TEST(RankGrid, PipelineOfOneHasSingleEmbeddingRank) {
  RankGrid g{2, 1, 2};
  EXPECT_EQ(g.embedding_groups(), (Groups{{0}, {1}, {2}, {3}}));
}

using Range = std::pair<int64_t, int64_t>;

TEST(ParallelConfig, StageSplits) {
  ParallelConfig p;
  p.pipeline_model_parallel_size = 4;
  EXPECT_EQ(p.stage_layers(8, 0), Range(0, 2));
  EXPECT_EQ(p.stage_layers(8, 3), Range(6, 8));
  p.decoder_first_pipeline_num_layers = 1;
  p.decoder_last_pipeline_num_layers = 3;
  EXPECT_EQ(p.stage_layers(8, 0), Range(0, 1));
  EXPECT_EQ(p.stage_layers(8, 1), Range(1, 3));
  EXPECT_EQ(p.stage_layers(8, 2), Range(3, 5));
  EXPECT_EQ(p.stage_layers(8, 3), Range(5, 8));
}

std::string layout_error(int world, int tp, int pp, int64_t layers, int64_t heads, int64_t gbs,
                         int64_t first = 0) {
  ParallelConfig p;
  p.tensor_model_parallel_size = tp;
  p.pipeline_model_parallel_size = pp;
  p.decoder_first_pipeline_num_layers = first;
  GPTConfig m;
  m.num_layers = layers;
  m.hidden_size = 64;
  m.num_attention_heads = heads;
  try {
    p.validate(world, m.layout_dims(tp), 2, gbs);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelConfig, InvalidLayoutsNameTheFlag) {
  EXPECT_NE(layout_error(3, 2, 1, 4, 4, 8).find("world size 3"), std::string::npos);
  EXPECT_NE(layout_error(4, 4, 1, 4, 2, 8).find("--num-attention-heads"), std::string::npos);
  EXPECT_NE(layout_error(2, 1, 2, 3, 4, 8).find("--num-layers 3"), std::string::npos);
  EXPECT_NE(layout_error(4, 1, 1, 4, 4, 6).find("--global-batch-size 6"), std::string::npos);
  EXPECT_NE(layout_error(3, 1, 3, 4, 4, 8, 3).find("--decoder-first-pipeline-num-layers"),
            std::string::npos);
  EXPECT_EQ(layout_error(8, 2, 2, 4, 4, 8), "");
}

TEST(ParallelConfig, SequenceParallelWithoutTPIsIgnoredWithAWarning) {
  ParallelConfig p;
  p.sequence_parallel = true;
  GPTConfig m;
  EXPECT_NE(p.validate(1, m.layout_dims(1), 1, 1).find("WARNING"), std::string::npos);
  EXPECT_FALSE(p.sequence_parallel);
}

}  // namespace
}  // namespace mg
