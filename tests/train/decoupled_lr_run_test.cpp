// --decoupled-lr through the trainer: with a decoupled rate of 0 the word embeddings and the
// output layer keep their initial values over training (plain optimizer on 1 rank, the
// distributed optimizer on DP2, and TP2 x PP2), while every other parameter moves; without the
// flag they move too.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "testing/mpirun.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

const std::string kRun =
    " train --mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16"
    " --vocab-size 300 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2 --weight-decay 0.1"
    " --untie-embeddings-and-output-weights --log-interval 1 --seed 3";

// name -> values of every parameter after `iters` steps.
std::map<std::string, std::vector<float>> final_params(int ranks, int iters,
                                                       const std::string& flags) {
  testing::TempDir dir("mg_decoupled");
  const std::string dump = dir.str("p.bin");
  const std::string cmd = testing::mpirun_prefix(ranks) + MG_BINARY + kRun + " --train-iters " +
                          std::to_string(iters) + " " + flags + " --dump-final-params " + dump;
  const auto r = testing::run_command("timeout 300 " + cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  std::map<std::string, std::vector<float>> out;
  const auto meta = nlohmann::json::parse(testing::slurp(dump + ".json"), nullptr, false);
  if (meta.is_discarded()) return out;
  const std::string raw = testing::slurp(dump);
  const float* all = reinterpret_cast<const float*>(raw.data());
  for (const auto& p : meta["params"]) {
    int64_t n = 1;
    for (int64_t d : p["shape"]) n *= d;
    const float* begin = all + p["offset"].get<int64_t>();
    out[p["name"]] = std::vector<float>(begin, begin + n);
  }
  return out;
}

bool decoupled(const std::string& name) {
  return name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
}

TEST(DecoupledLRRun, ZeroRateFreezesTheEmbeddingAndOutputLayerOnly) {
  std::map<std::string, std::vector<float>> init;
  for (const std::string layout : {"1|", "2|--use-distributed-optimizer",
                                   "4|--tensor-model-parallel-size 2 "
                                   "--pipeline-model-parallel-size 2"}) {
    const int ranks = layout[0] - '0';
    // The initial values in this layout (TP pads the vocabulary further): nothing moves at lr 0.
    init = final_params(ranks, 1, "--decoupled-lr 0 --lr 0 --min-lr 0 " + layout.substr(2));
    ASSERT_FALSE(init.empty());
    const auto trained = final_params(ranks, 4, "--decoupled-lr 0 " + layout.substr(2));
    ASSERT_EQ(trained.size(), init.size()) << layout;
    for (const auto& [name, values] : trained)
      if (decoupled(name)) EXPECT_EQ(values, init.at(name)) << name << " moved, np " << layout;
      else EXPECT_NE(values, init.at(name)) << name << " did not move, np " << layout;
  }
  init = final_params(1, 1, "--lr 0 --min-lr 0");
  const auto coupled = final_params(1, 4, "");
  for (const auto& [name, values] : coupled)
    EXPECT_NE(values, init.at(name)) << name << " did not move without --decoupled-lr";
}

}  // namespace
}  // namespace mg
