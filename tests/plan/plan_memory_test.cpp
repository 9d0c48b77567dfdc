// `megatron plan`'s memory per rank against what `megatron train` allocates for the same flags:
// for each configuration, every pipeline stage's planned params + grads + optimizer +
// activations bytes equal the tensor allocator's own count of what the model, optimizer and
// grad reducer took on that rank (train's " > tensor bytes of rank R: N allocated" line), to
// the byte. Also plan's refusals of bad input, each naming what to fix.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "testing/mpirun.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

const std::string kGpt =
    " --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32"
    " --max-position-embeddings 32 --vocab-size 500 --global-batch-size 8 --train-iters 1"
    " --lr 1e-3 --mock-data --log-interval 1";
const std::string kLlama =
    kGpt +
    " --normalization RMSNorm --swiglu --ffn-hidden-size 128 --position-embedding-type rope"
    " --untie-embeddings-and-output-weights --disable-bias-linear --group-query-attention"
    " --num-query-groups 2";
const std::string kMoe = kLlama + " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64";

struct Case {
  const char* name;
  int ranks;
  std::string flags;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"gpt2_fp32", 1, kGpt + " --micro-batch-size 2"},
      {"gpt2_bf16", 1, kGpt + " --micro-batch-size 2 --bf16"},
      {"gpt2_fp16", 1, kGpt + " --micro-batch-size 2 --fp16"},
      {"gpt2_sgd", 1, kGpt + " --micro-batch-size 2 --optimizer sgd"},
      {"gpt2_full_recompute_uniform", 1,
       kGpt + " --micro-batch-size 2 --bf16 --recompute-granularity full --recompute-method "
              "uniform --recompute-num-layers 2"},
      {"gpt2_full_recompute_block", 1,
       kGpt + " --micro-batch-size 2 --recompute-granularity full --recompute-method block "
              "--recompute-num-layers 1"},
      {"gpt2_dp2", 2, kGpt + " --micro-batch-size 2"},
      {"gpt2_dp2_distopt_bf16", 2,
       kGpt + " --micro-batch-size 2 --bf16 --use-distributed-optimizer"},
      {"gpt2_dp2_distopt_bf16_reduce", 2,
       kGpt + " --micro-batch-size 2 --bf16 --use-distributed-optimizer --grad-reduce-in-bf16"},
      {"gpt2_dp2_bf16_reduce", 2, kGpt + " --micro-batch-size 2 --bf16 --grad-reduce-in-bf16"},
      {"gpt2_dp2_small_buckets", 2,
       kGpt + " --micro-batch-size 1 --use-distributed-optimizer --ddp-bucket-size 5000"},
      {"gpt2_tp2", 2, kGpt + " --micro-batch-size 2 --tensor-model-parallel-size 2"},
      {"gpt2_tp2_sp", 2,
       kGpt + " --micro-batch-size 2 --tensor-model-parallel-size 2 --sequence-parallel"},
      {"gpt2_pp2", 2, kGpt + " --micro-batch-size 2 --pipeline-model-parallel-size 2"},
      {"gpt2_pp2_vp2", 2,
       kGpt + " --micro-batch-size 1 --pipeline-model-parallel-size 2 "
              "--num-layers-per-virtual-pipeline-stage 1"},
      {"gpt2_tp2_pp2_distopt_dp2", 8,
       kGpt + " --micro-batch-size 1 --tensor-model-parallel-size 2 --sequence-parallel "
              "--pipeline-model-parallel-size 2 --use-distributed-optimizer --bf16"},
      {"llama_fp32", 1, kLlama + " --micro-batch-size 2"},
      {"llama_bf16_tp2", 2, kLlama + " --micro-batch-size 2 --bf16 --tensor-model-parallel-size 2"},
      {"llama_cp2", 2, kLlama + " --micro-batch-size 2 --context-parallel-size 2"},
      {"llama_cp2_distopt", 2,
       kLlama + " --micro-batch-size 2 --context-parallel-size 2 --use-distributed-optimizer"},
      {"llama_pp2_recompute", 2,
       kLlama + " --micro-batch-size 2 --pipeline-model-parallel-size 2 --recompute-granularity "
                "full --recompute-method uniform --recompute-num-layers 1"},
      {"mixtral_ep2", 2, kMoe + " --micro-batch-size 2 --expert-model-parallel-size 2"},
      {"mixtral_ep2_distopt_bf16", 2,
       kMoe + " --micro-batch-size 2 --expert-model-parallel-size 2 --use-distributed-optimizer "
              "--bf16"},
      {"mixtral_tp2_sp_etp1", 2,
       kMoe + " --micro-batch-size 2 --tensor-model-parallel-size 2 --sequence-parallel "
              "--expert-tensor-parallel-size 1 --moe-token-dispatcher-type alltoall"},
  };
  return c;
}

class PlanMemory : public ::testing::TestWithParam<Case> {};

TEST_P(PlanMemory, PlannedBytesEqualWhatTrainAllocates) {
  const Case& c = GetParam();
  const testing::RunResult plan =
      testing::run_command(std::string(MG_BINARY) + " plan --device cpu --json --num-gpus " +
                           std::to_string(c.ranks) + c.flags + " 2>&1");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const nlohmann::json j = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
  const testing::RunResult train = testing::run_command(testing::mpirun_prefix(c.ranks) +
                                                        MG_BINARY + " train" + c.flags + " 2>&1");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  std::map<int, int64_t> allocated;
  const std::regex re("tensor bytes of rank ([0-9]+): ([0-9]+) allocated");
  for (auto it = std::sregex_iterator(train.output.begin(), train.output.end(), re);
       it != std::sregex_iterator(); ++it)
    allocated[std::stoi((*it)[1])] = std::stoll((*it)[2]);
  ASSERT_EQ(int(allocated.size()), c.ranks) << train.output;
  ASSERT_FALSE(j["memory"]["stages"].empty());
  for (const auto& s : j["memory"]["stages"]) {
    const int rank = s["world_rank"].get<int>();
    const int64_t planned = s["params"].get<int64_t>() + s["grads"].get<int64_t>() +
                            s["optimizer"].get<int64_t>() + s["activations"].get<int64_t>();
    EXPECT_EQ(planned, allocated.at(rank)) << c.name << " stage " << s["stage"] << "\n"
                                           << plan.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, PlanMemory, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

std::string plan_error(const std::string& flags) {
  const testing::RunResult r =
      testing::run_command(std::string(MG_BINARY) + " plan" + flags + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  return r.output;
}

TEST(PlanErrors, BadInputIsRefusedNamingWhatToFix) {
  const std::string model = kGpt + " --micro-batch-size 2";
  EXPECT_NE(plan_error(model + " --num-gpus 3 --tensor-model-parallel-size 2")
                .find("--tensor-model-parallel-size"),
            std::string::npos);
  EXPECT_NE(plan_error(model + " --num-gpus 3 --tensor-model-parallel-size 3")
                .find("--num-attention-heads"),
            std::string::npos);
  EXPECT_NE(plan_error(model + " --device-profile tpu-v9").find("neither a built-in profile"),
            std::string::npos);
  EXPECT_NE(plan_error(model + " --num-gpus -4").find("--num-gpus"), std::string::npos);
  testing::TempDir dir("plan_profile");
  const std::string path = dir.str("profile.json");
  // The built-in profile without one field, then with a string where a number belongs.
  std::string text = testing::run_command(std::string(MG_BINARY) + " plan --show-profile").output;
  const nlohmann::json full = nlohmann::json::parse(text);
  nlohmann::json missing = full;
  missing["inter_node"].erase("bandwidth_gbs");
  std::ofstream(path) << missing.dump();
  EXPECT_NE(plan_error(model + " --device-profile " + path)
                .find("missing field \"inter_node.bandwidth_gbs\""),
            std::string::npos);
  nlohmann::json wrong = full;
  wrong["memory_gib"] = "eighty";
  std::ofstream(path) << wrong.dump();
  EXPECT_NE(plan_error(model + " --device-profile " + path).find("\"memory_gib\" must be a number"),
            std::string::npos);
  std::ofstream(path) << "{\"name\": ";
  EXPECT_NE(plan_error(model + " --device-profile " + path).find("not valid JSON"),
            std::string::npos);
  // The edited profile file, well formed, is taken.
  nlohmann::json mine = full;
  mine["memory_gib"] = 0.001;  // 1 MiB: the model does not fit
  std::ofstream(path) << mine.dump();
  const testing::RunResult r = testing::run_command(std::string(MG_BINARY) + " plan --device cpu" +
                                                    model + " --device-profile " + path + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("DOES NOT FIT"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mg
