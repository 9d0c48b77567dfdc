// --context-parallel-size and --cp-comm-type through the train command line: the world is
// TP x CP x PP x DP (CP ranks are not data-parallel replicas), each sequence must cut into
// 2 x CP chunks, a2a needs whole heads per CP rank, and every refusal names its flag.
#include <gtest/gtest.h>

#include <sstream>

#include "cli/commands.h"
#include "testing/usage_error.h"

namespace mg {
namespace {

// A tiny model: 4 heads, 2 query groups, seq 16.
TrainConfig config(const std::string& flags, int world) {
  std::vector<std::string> args;
  std::istringstream in(
      "--mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --group-query-attention "
      "--num-query-groups 2 --seq-length 16 --max-position-embeddings 16 --vocab-size 64 "
      "--micro-batch-size 1 --lr 1e-3 --train-iters 1 " +
      flags);
  for (std::string a; in >> a;) args.push_back(a);
  TrainConfig c = parse_train_args(args);
  c.finalize_and_validate(world);
  return c;
}

std::string refusal(const std::string& flags, int world) {
  return testing::usage_error_of([&] { config(flags, world); });
}

TEST(ContextParallelFlags, DefaultsAreMegatrons) {
  const TrainConfig c = config("", 1);
  EXPECT_EQ(c.parallel.context_parallel_size, 1);
  EXPECT_EQ(c.parallel.cp_comm_type, "p2p");
}

TEST(ContextParallelFlags, CPRanksAreNotDataParallelReplicas) {
  const TrainConfig c = config("--context-parallel-size 2 --tensor-model-parallel-size 2", 8);
  EXPECT_EQ(c.data_parallel_size, 2);  // 8 / (TP 2 x CP 2)
  EXPECT_EQ(c.global_batch_size, 2);   // Megatron's default: B x DP
  const RankGrid g = c.rank_grid();
  EXPECT_EQ(g.cp, 2);
  EXPECT_EQ(g.dp, 2);
  EXPECT_EQ(g.world(), 8);
  EXPECT_EQ(c.parallel.layout_string(8), "TP 2 x CP 2 x PP 1 x DP 2");
  EXPECT_EQ(config("--context-parallel-size 2 --cp-comm-type a2a", 2).parallel.cp_comm_type, "a2a");
}

TEST(ContextParallelFlags, InvalidLayoutsNameTheFlag) {
  EXPECT_EQ(refusal("--context-parallel-size 2 --tensor-model-parallel-size 2", 6),
            "world size 6 is not divisible by --tensor-model-parallel-size 2 x "
            "--context-parallel-size 2 x --pipeline-model-parallel-size 1 (launch a multiple of "
            "4 ranks)");
  EXPECT_EQ(refusal("--context-parallel-size 0", 1),
            "--context-parallel-size must be >= 1 (got 0)");
  // 16 tokens cut into 2 x 3 chunks do not divide.
  EXPECT_EQ(refusal("--context-parallel-size 3", 3),
            "--seq-length 16 must be divisible by 2 x --context-parallel-size 3 (each sequence "
            "is cut into 2 x CP chunks for load balancing)");
  EXPECT_EQ(refusal("--context-parallel-size 16", 16)
                .find("--seq-length 16 must be divisible "
                      "by 2 x --context-parallel-size 16"),
            0u);
  EXPECT_NE(refusal("--cp-comm-type allgather", 1)
                .find("--cp-comm-type 'allgather' is not "
                      "available; use p2p"),
            std::string::npos);
  // a2a: 4 heads / TP 2 = 2 heads per TP rank, not divisible by CP 4 ...
  EXPECT_EQ(refusal("--context-parallel-size 4 --tensor-model-parallel-size 2 --cp-comm-type a2a",
                    8),
            "--cp-comm-type a2a splits each TP rank's heads across CP ranks: "
            "--num-attention-heads 4 / --tensor-model-parallel-size 2 must be divisible by "
            "--context-parallel-size 4");
  // ... and 2 query groups not by CP 4 (heads 4 / TP 1 are).
  EXPECT_NE(refusal("--context-parallel-size 4 --cp-comm-type a2a", 4).find("--num-query-groups 2"),
            std::string::npos);
  // p2p has no head rule.
  EXPECT_EQ(config("--context-parallel-size 4 --tensor-model-parallel-size 2", 8).parallel.cp(), 4);
  // Sequence parallelism splits the CP rank's S / CP tokens across TP: 16 / (CP 4 x TP 8).
  EXPECT_NE(refusal("--context-parallel-size 4 --tensor-model-parallel-size 8 "
                    "--num-attention-heads 8 --num-query-groups 8 --sequence-parallel",
                    32)
                .find("--seq-length 16 must be divisible by --tensor-model-parallel-size 8 x "
                      "--context-parallel-size 4 with --sequence-parallel"),
            std::string::npos);
  EXPECT_NE(refusal("--context-parallel-size 2 --global-batch-size 3", 4)
                .find("(world 4 / (TP 1 x CP 2 x PP 1))"),
            std::string::npos);
}

// The CP attention runs on host memory only: a GPU run with CP is refused at validation, before
// any rank allocates. The same run with --context-parallel-size 1 passes this check.
TEST(ContextParallelFlags, CudaWithContextParallelIsRefused) {
  EXPECT_EQ(refusal("--device cuda --context-parallel-size 2", 2),
            "--context-parallel-size 2 runs its attention (ring and all-to-all) on the CPU for "
            "now: train with --device cpu, or --device cuda with --context-parallel-size 1");
  const TrainConfig c = config("--device cuda --hidden-size 128", 1);  // head dim 32
  EXPECT_EQ(c.device, "cuda");
  EXPECT_EQ(c.parallel.cp(), 1);
}

}  // namespace
}  // namespace mg
