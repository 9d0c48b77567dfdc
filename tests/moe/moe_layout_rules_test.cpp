// Megatron's MoE layout rules (and what is not supported yet), through the binary: each
// refused with a message naming the flag, never an internal error.
#include <gtest/gtest.h>

#include <string>

#include "testing/mpirun.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

const std::string kMoe =
    " train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16"
    " --vocab-size 500 --micro-batch-size 2 --global-batch-size 8 --train-iters 2 --lr 1e-3"
    " --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01";

struct Rule {
  int ranks;
  std::string flags, message;
};

TEST(MoeLayoutRules, RefusedNamingTheFlag) {
  for (const Rule& r : {
           Rule{2, "--expert-model-parallel-size 2 --num-experts 3",
                "--num-experts 3 must be divisible by --expert-model-parallel-size 2"},
           Rule{4, "--expert-model-parallel-size 2 --tensor-model-parallel-size 2",
                "--sequence-parallel"},
           Rule{2, "--expert-model-parallel-size 4", "--expert-model-parallel-size 4"},
           Rule{2, "--context-parallel-size 2 --moe-expert-capacity-factor 1.0",
                "--moe-expert-capacity-factor does not yet rank"},
           Rule{1, "--moe-router-load-balancing-type global_aux_loss",
                "--moe-router-load-balancing-type 'global_aux_loss' is not supported"},
           // Parallel folding: the experts' grid must fit a stage's ranks, widths split.
           Rule{2, "--expert-tensor-parallel-size 4",
                "--expert-tensor-parallel-size 4 x --expert-model-parallel-size 1 = 4 must divide"},
           Rule{4, "--expert-tensor-parallel-size 2 --expert-model-parallel-size 4",
                "--expert-tensor-parallel-size 2 x --expert-model-parallel-size 4 = 8"},
           Rule{2, "--expert-tensor-parallel-size 2 --moe-ffn-hidden-size 33",
                "--moe-ffn-hidden-size 33 must be divisible by the experts' tensor parallelism 2"},
           Rule{1, "--expert-tensor-parallel-size -1", "--expert-tensor-parallel-size must be"},
           Rule{2, "--expert-tensor-parallel-size 1 --tensor-model-parallel-size 2",
                "other than --tensor-model-parallel-size 2 needs --sequence-parallel"},
           Rule{2, "--expert-tensor-parallel-size 2 --num-experts 0 --moe-router-topk 0",
                "--expert-tensor-parallel-size 2 splits the experts"},
       }) {
    SCOPED_TRACE(r.flags);
    const auto out =
        testing::run_command((r.ranks > 1 ? testing::mpirun_prefix(r.ranks) : std::string()) +
                             MG_BINARY + kMoe + " " + r.flags);
    EXPECT_NE(out.exit_code, 0) << out.output;
    EXPECT_NE(out.output.find(r.message), std::string::npos) << out.output;
    EXPECT_EQ(out.output.find("internal error"), std::string::npos) << out.output;
  }
}

}  // namespace
}  // namespace mg
