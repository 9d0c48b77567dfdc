// Checkpoints through the real binary (label `checkpoint`): resuming is bitwise exact, a
// checkpoint reloads into other TP/PP/DP layouts and continues within 1e-5 of the uninterrupted
// run, corruption is reported naming the file, and the resume/exit flags behave as documented.
// (SIGKILL sweeps: kill_test.cpp; malformed metadata and outputs: hardening_test.cpp.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "data/indexed_dataset.h"
#include "testing/mpirun.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

const std::string kModel =
    " train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16"
    " --vocab-size 500 --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 2e-3"
    " --lr-warmup-iters 2 --lr-decay-style cosine --weight-decay 0.1 --log-interval 1 --seed 7";

using testing::TempDir;

testing::RunResult run(int ranks, const std::string& flags, const std::string& model = kModel) {
  const std::string launcher = ranks > 1 ? testing::mpirun_prefix(ranks) : "";
  return testing::run_command(launcher + MG_BINARY + model + " " + flags);
}
std::vector<double> losses(const testing::RunResult& r) {
  return testing::log_values(r.output, "lm loss");
}
std::vector<double> tail(const std::vector<double>& v, size_t n) {
  return std::vector<double>(v.end() - std::min(n, v.size()), v.end());
}

// 20 steps straight vs 10 steps + save (exit) + load + 10 steps: the same bits.
void expect_bitwise_resume(int ranks, const std::string& flags, const std::string& model = kModel) {
  TempDir d;
  const auto full = run(ranks, flags, model);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto first = run(ranks, flags + " --save " + d.str("ck") + " --exit-interval 10", model);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("exiting at iteration 10"), std::string::npos) << first.output;
  const auto second = run(ranks, flags + " --load " + d.str("ck"), model);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("loaded checkpoint"), std::string::npos) << second.output;
  const auto want = losses(full);
  ASSERT_EQ(want.size(), 20u);
  EXPECT_EQ(losses(first), std::vector<double>(want.begin(), want.begin() + 10)) << flags;
  EXPECT_EQ(losses(second), tail(want, 10)) << flags << "\n" << second.output;
}

TEST(Checkpoint, ResumeIsBitwiseExact) { expect_bitwise_resume(1, ""); }
TEST(Checkpoint, ResumeIsBitwiseExactWithTheDistributedOptimizer) {
  expect_bitwise_resume(4, "--tensor-model-parallel-size 2 --use-distributed-optimizer");
}
TEST(Checkpoint, ResumeIsBitwiseExactWithFp16LossScaling) {
  // The scaler's scale and trackers survive: the scale doubles on the same iterations.
  expect_bitwise_resume(1, "--fp16 --initial-loss-scale 1024 --loss-scale-window 3");
}

TEST(Checkpoint, ResumeIsBitwiseExactWithDataBlending) {
  TempDir d;
  std::mt19937 gen(3);
  for (const char* name : {"a", "b"}) {
    IndexedDatasetWriter w(d.str(name), TokenDType::U16);
    for (int doc = 0; doc < 300; ++doc) {
      std::vector<int32_t> ids(size_t(5 + gen() % 60));
      for (int32_t& t : ids) t = int32_t(gen() % 499);
      w.add_document(ids, {int32_t(ids.size())});
    }
    w.finalize();
  }
  std::string model = kModel;
  model.replace(model.find("--mock-data"), 11,
                "--data-path 0.3 " + d.str("a") + " 0.7 " + d.str("b") +
                    " --tokenizer-type NullTokenizer --data-cache-path " + d.str("cache"));
  expect_bitwise_resume(2, "", model);
}

struct Target {
  int ranks;
  std::string flags;
};

// Save under `from` ((TP, PP, DP) = (2, 2, 2) by default) at iteration 10; load under other
// layouts and continue within 1e-5 of the uninterrupted run.
void expect_reshard(const std::vector<Target>& targets, const std::string& model = kModel,
                    const Target& from = {8,
                                          "--tensor-model-parallel-size 2 "
                                          "--pipeline-model-parallel-size 2"}) {
  TempDir d;
  const std::string& layout = from.flags;
  const auto full = run(from.ranks, layout, model);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto want = tail(losses(full), 10);
  const auto save =
      run(from.ranks, layout + " --save " + d.str("ck") + " --exit-interval 10", model);
  ASSERT_EQ(save.exit_code, 0) << save.output;
  for (const Target& t : targets) {
    const auto r = run(t.ranks, t.flags + " --load " + d.str("ck"), model);
    ASSERT_EQ(r.exit_code, 0) << t.flags << "\n" << r.output;
    const auto got = losses(r);
    ASSERT_EQ(got.size(), 10u) << r.output;
    for (size_t i = 0; i < 10; ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * want[i])
          << "np " << t.ranks << " " << t.flags << " step " << i + 11;
  }
}

TEST(Checkpoint, ReshardsIntoOtherLayouts) {
  expect_reshard({Target{1, ""}, Target{8, "--tensor-model-parallel-size 4"},
                  Target{4, "--pipeline-model-parallel-size 4"},
                  Target{8, "--tensor-model-parallel-size 2 --use-distributed-optimizer"}});
}

// Saved by the interleaved schedule (two model chunks per pipeline rank, one parameter store):
// continued on one rank, without interleaving, and under another virtual-stage layout with the
// distributed optimizer.
TEST(Checkpoint, InterleavedPipelineReshards) {
  const std::string vp2 =
      "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2";
  expect_reshard(
      {Target{1, ""}, Target{2, "--pipeline-model-parallel-size 2"},
       Target{4,
              "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
              " --use-distributed-optimizer"}},
      kModel, Target{2, vp2});
}

// Saved under context parallelism (CP 2 x DP 2, distributed optimizer sharded over DP x CP):
// continued on one rank, under CP 4 with the all-to-all attention, and under PP 2 x VP 2.
TEST(Checkpoint, ContextParallelReshards) {
  expect_reshard({Target{1, ""}, Target{4, "--context-parallel-size 4 --cp-comm-type a2a"},
                  Target{2,
                         "--pipeline-model-parallel-size 2 "
                         "--num-virtual-stages-per-pipeline-rank 2"}},
                 kModel, Target{4, "--context-parallel-size 2 --use-distributed-optimizer"});
}

// The same for a Llama: the grouped QKV rows and SwiGLU's stacked [gate; up] fc1 (partition
// stride 2) reshard from TP 2 to TP 1 and TP 4.
TEST(Checkpoint, LlamaReshardsIntoOtherLayouts) {
  const std::string llama =
      kModel +
      " --hidden-size 64 --num-attention-heads 8 --group-query-attention"
      " --num-query-groups 4 --normalization RMSNorm --swiglu --ffn-hidden-size 96"
      " --position-embedding-type rope --disable-bias-linear"
      " --untie-embeddings-and-output-weights";
  expect_reshard({Target{1, ""}, Target{8, "--tensor-model-parallel-size 4"}}, llama);
}

// A Mixtral-like MoE: 4 SwiGLU experts, top 2, aux and z losses.
const std::string kMoe =
    kModel +
    " --hidden-size 64 --num-attention-heads 8 --group-query-attention"
    " --num-query-groups 4 --normalization RMSNorm --swiglu --ffn-hidden-size 96"
    " --position-embedding-type rope --disable-bias-linear"
    " --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2"
    " --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001";

// The MoE (experts named by global index) saved under TP 2 x SP x DP 2 with the distributed optimizer, continued on one rank and under
// PP 2 x TP 2; and saved under expert parallelism.
TEST(Checkpoint, MoeReshardsIntoOtherLayouts) {
  expect_reshard({Target{1, ""}, Target{4,
                                        "--tensor-model-parallel-size 2 --sequence-parallel "
                                        "--pipeline-model-parallel-size 2"}},
                 kMoe,
                 Target{4,
                        "--tensor-model-parallel-size 2 --sequence-parallel "
                        "--use-distributed-optimizer"});
  // Saved under EP 4 with the distributed optimizer (each rank one expert, the expert
  // shards over expert-DP 1): continued on one rank (every expert local), under EP 2 x TP 2
  // and under EP 2 with the allgather dispatcher.
  expect_reshard({Target{1, ""},
                  Target{4,
                         "--expert-model-parallel-size 2 --tensor-model-parallel-size 2 "
                         "--sequence-parallel --moe-token-dispatcher-type alltoall"},
                  Target{2, "--expert-model-parallel-size 2 --use-distributed-optimizer"}},
                 kMoe,
                 Target{4,
                        "--expert-model-parallel-size 4 --use-distributed-optimizer "
                        "--moe-token-dispatcher-type alltoall"});
}

// Parallel folding: experts split over their own TP (--expert-tensor-parallel-size), so their
// shards are recorded by expert TP. Saved under EP 2 x ETP 2 with TP 1 (distributed optimizer
// over expert DP 1): continued on one rank, under TP 2 x EP 2 (experts split by TP), and under
// TP 2 with whole experts (ETP 1).
TEST(Checkpoint, FoldedExpertsReshard) {
  expect_reshard({Target{1, ""},
                  Target{4,
                         "--expert-model-parallel-size 2 --tensor-model-parallel-size 2 "
                         "--sequence-parallel --moe-token-dispatcher-type alltoall"},
                  Target{2,
                         "--tensor-model-parallel-size 2 --sequence-parallel "
                         "--expert-tensor-parallel-size 1 --use-distributed-optimizer"}},
                 kMoe,
                 Target{4,
                        "--expert-model-parallel-size 2 --expert-tensor-parallel-size 2 "
                        "--use-distributed-optimizer --moe-token-dispatcher-type alltoall"});
}

// An untied output layer is padded like the word embedding: vocab 1100 pads to 1152 rows at
// TP 1 and to 1280 at TP 2. A TP-1 checkpoint loads at TP 2 (shared rows copied, new rows zero),
// and `generate --load` of a TP-2 checkpoint rebuilds the single-rank model.
TEST(Checkpoint, UntiedOutputLayerReshardsAcrossVocabularyPadding) {
  TempDir d;
  const std::string llama =
      kModel +
      " --vocab-size 1100 --normalization RMSNorm --swiglu --ffn-hidden-size 64"
      " --position-embedding-type rope --untie-embeddings-and-output-weights";
  const auto save = run(1, "--save " + d.str("ck") + " --exit-interval 10", llama);
  ASSERT_EQ(save.exit_code, 0) << save.output;
  const auto tp2 = run(2,
                       "--tensor-model-parallel-size 2 --train-iters 12 --load " + d.str("ck") +
                           " --save " + d.str("ck"),
                       llama);
  ASSERT_EQ(tp2.exit_code, 0) << tp2.output;
  EXPECT_NE(tp2.output.find("loaded checkpoint"), std::string::npos) << tp2.output;
  const auto l = losses(tp2);
  ASSERT_EQ(l.size(), 2u) << tp2.output;
  EXPECT_TRUE(std::isfinite(l[0]) && std::isfinite(l[1]));
  const auto g = testing::run_command(std::string(MG_BINARY) +
                                      " generate --tokenizer-type NullTokenizer --vocab-size 1100"
                                      " --load " +
                                      d.str("ck") + " --prompt '1 2 3' --max-new-tokens 2");
  EXPECT_EQ(g.exit_code, 0) << g.output;
}

// The model record names every differing setting as its flags, in one message.
TEST(Checkpoint, LlamaIntoGpt2RunNamesEveryDifference) {
  TempDir d;
  const std::string llama = kModel +
                            " --normalization RMSNorm --swiglu --ffn-hidden-size 64"
                            " --position-embedding-type rope --train-iters 4";
  ASSERT_EQ(run(1, "--save " + d.str("ck"), llama).exit_code, 0);
  // Model flags not given come from the checkpoint (--swiglu here); the given ones must agree.
  const auto r = run(1,
                     "--train-iters 5 --normalization LayerNorm --ffn-hidden-size 128 "
                     "--position-embedding-type learned_absolute --load " +
                         d.str("ck"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* want : {"normalization: checkpoint --normalization RMSNorm, this run "
                           "--normalization LayerNorm",
                           "--position-embedding-type rope", "ffn_hidden_size"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}

std::string latest(const TempDir& d) {
  std::ifstream f(d.str("ck/latest_checkpointed_iteration.txt"));
  std::string s;
  f >> s;
  return s;
}

TEST(Checkpoint, CorruptionIsReportedNamingTheFile) {
  TempDir d;
  ASSERT_EQ(run(1, "--train-iters 4 --save " + d.str("ck")).exit_code, 0);
  const fs::path ck = d.path / "ck", bin = ck / "iter_0000004" / "rank_00000.bin";
  const fs::path good = d.path / "good.bin";
  fs::copy_file(bin, good);
  auto load = [&] { return run(1, "--train-iters 5 --load " + ck.string()); };
  {  // a flipped byte
    std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1000);
    char c;
    f.get(c);
    f.seekp(1000);
    f.put(char(c ^ 0x10));
  }
  auto r = load();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(bin.string() + "' is corrupt"), std::string::npos) << r.output;
  fs::resize_file(bin, fs::file_size(good) - 100);  // truncated
  r = load();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(bin.string() + "' has"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  fs::remove(bin);  // missing
  r = load();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(bin.string() + "' is missing"), std::string::npos) << r.output;
  fs::copy_file(good, bin);
  r = load();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Checkpoint, MissingCheckpointStartsFreshOrFails) {
  TempDir d;
  fs::create_directories(d.path / "empty");
  auto r = run(1, "--train-iters 4 --load " + d.str("empty"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("starting from scratch"), std::string::npos);
  r = run(1, "--train-iters 4 --load " + d.str("empty") + " --exit-on-missing-checkpoint");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--exit-on-missing-checkpoint"), std::string::npos) << r.output;
}

TEST(Checkpoint, KeepLastRemovesOnlyOlderCompleteCheckpoints) {
  TempDir d;
  ASSERT_EQ(run(1,
                "--train-iters 10 --save " + d.str("ck") + " --save-interval 2 --ckpt-keep-last 2")
                .exit_code,
            0);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d.path / "ck")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"iter_0000008", "iter_0000010",
                                             "latest_checkpointed_iteration.txt"}));
}

TEST(Checkpoint, SigtermSavesAndExitsZero) {
  TempDir d;
  const std::string log = d.str("log");
  const std::string cmd = std::string(MG_BINARY) + kModel + " --train-iters 100000 --save " +
                          d.str("ck") + " --exit-signal-handler";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + log + " 2>&1").c_str(), nullptr);
    _exit(127);
  }
  // Signal only once training runs (the handler is installed before the first iteration): a
  // fixed delay raced with a slow start-up on a loaded machine, killing the process outright.
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream f(log);
    const std::string so_far((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (so_far.find(" iteration ") != std::string::npos) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(120)) << so_far;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream f(log);
  const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("exiting at iteration"), std::string::npos) << out;
  const std::string it = latest(d);
  ASSERT_FALSE(it.empty()) << out;
  EXPECT_NE(out.find("saved checkpoint at iteration " + std::to_string(std::stoll(it))),
            std::string::npos);
}

// --finetune keeps the loaded weights for every step, not just the first: in bf16 the fp32 main
// params the optimizer steps must start from the loaded weights too, or the first update puts
// the model back at its random init (each loss then equals the fresh run's).
class CheckpointFinetune : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointFinetune, LoadsWeightsAndStartsAtIterationOne) {
  TempDir d;
  const std::string precision = GetParam();
  ASSERT_EQ(run(1, precision + " --train-iters 10 --save " + d.str("ck")).exit_code, 0);
  const auto r = run(1, precision + " --train-iters 4 --load " + d.str("ck") + " --finetune");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("iteration        1/"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("weights only"), std::string::npos) << r.output;
  const auto fresh = losses(run(1, precision + " --train-iters 4"));
  const auto tuned = losses(r);
  ASSERT_EQ(tuned.size(), 4u) << r.output;
  ASSERT_EQ(fresh.size(), 4u);
  for (size_t i = 0; i < tuned.size(); ++i)  // the trained weights stay in
    EXPECT_LT(tuned[i], fresh[i] - 0.1) << "iteration " << i + 1 << "\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(, CheckpointFinetune, ::testing::Values("", "--bf16"),
                         [](const auto& info) { return info.index == 0 ? "f32" : "bf16"; });

TEST(Checkpoint, ModelMismatchNamesTheSetting) {
  TempDir d;
  ASSERT_EQ(run(1, "--train-iters 4 --save " + d.str("ck")).exit_code, 0);
  const auto r = run(1, "--train-iters 5 --num-layers 2 --load " + d.str("ck"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("num_layers"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mg
