// Bad input to the `megatron` binary: exit code 2 and one line naming the offending flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "backend/dispatch.h"
#include "cli/commands.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

const std::string kTiny =
    " train --mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8"
    " --vocab-size 64 --micro-batch-size 2 --train-iters 1 --lr 1e-3";

// Every run is bounded: a refusal must come before any work (timeout's exit code is 124).
testing::RunResult megatron(const std::string& args) {
  return testing::run_command("timeout 120 " + std::string(MG_BINARY) + args);
}

void expect_usage_error(const std::string& args, const std::string& must_mention) {
  auto r = megatron(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(must_mention), std::string::npos) << args << "\n" << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one line:\n" << r.output;
  EXPECT_EQ(r.output.find("iteration"), std::string::npos) << "must fail before training";
}

TEST(Cli, TinyRunSucceeds) {
  auto r = megatron(kTiny);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" iteration        1/       1 |"), std::string::npos) << r.output;
}

TEST(Cli, HeadsMustDivideHidden) {
  expect_usage_error(kTiny + " --num-attention-heads 3", "--num-attention-heads");
}
TEST(Cli, UnknownFlag) { expect_usage_error(kTiny + " --hiden-size 8", "--hiden-size"); }
TEST(Cli, MissingValue) { expect_usage_error(kTiny + " --lr", "--lr"); }
TEST(Cli, NotANumber) { expect_usage_error(kTiny + " --hidden-size big", "--hidden-size"); }
TEST(Cli, UnknownDevice) { expect_usage_error(kTiny + " --device tpu", "--device"); }
TEST(Cli, CudaDeviceNamesTheHeadDimsItTakes) {  // 16 / 2 = 8: checked before any GPU is used
  expect_usage_error(kTiny + " --device cuda", "head dims 32, 64 and 128");
}
TEST(Cli, CudaDeviceWithoutAGpuSaysWhy) {
  // No GPU visible to the run: an empty CUDA_VISIBLE_DEVICES hides them from the CUDA runtime
  // and from the emulator alike (a build without the backend has none to hide).
  const char* was = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = was ? was : "";
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  expect_usage_error(kTiny + " --device cuda --hidden-size 64", "--device cuda");
  if (was) setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else unsetenv("CUDA_VISIBLE_DEVICES");
}
TEST(Cli, TrailingGarbage) { expect_usage_error(kTiny + " --seq-length 8x", "--seq-length"); }
TEST(Cli, GlobalBatchMultipleOfMicroBatch) {
  expect_usage_error(kTiny + " --global-batch-size 5", "--global-batch-size");
}
TEST(Cli, NeedsData) {
  auto args = kTiny;
  args.erase(args.find(" --mock-data"), 12);
  expect_usage_error(args, "--mock-data");
}
TEST(Cli, PositionTableCoversSequence) {
  expect_usage_error(kTiny + " --max-position-embeddings 4", "--max-position-embeddings");
}
TEST(Cli, DecayStyle) { expect_usage_error(kTiny + " --lr-decay-style steps", "--lr-decay-style"); }
TEST(Cli, SwitchTakesNoValue) { expect_usage_error(kTiny + " --mock-data=1", "--mock-data"); }
TEST(Cli, OnePrecisionOnly) { expect_usage_error(kTiny + " --bf16 --fp16", "--bf16 and --fp16"); }
TEST(Cli, LossScalerSettings) {
  expect_usage_error(kTiny + " --fp16 --hysteresis 0", "--hysteresis");
  expect_usage_error(kTiny + " --fp16 --loss-scale-window 0", "--loss-scale-window");
  expect_usage_error(kTiny + " --fp16 --min-loss-scale 0", "--min-loss-scale");
  expect_usage_error(kTiny + " --fp16 --inject-grad-overflow 0", "--inject-grad-overflow");
  expect_usage_error(kTiny + " --inject-grad-overflow 1", "needs --fp16");
}
// Found by fuzzing (tests/fuzz/corpus/cli/regress-preprocess-input-name-too-long): a name the
// file system refuses ended as an internal error (an uncaught filesystem_error).
TEST(Cli, PreprocessInputNameTooLong) {
  expect_usage_error(" preprocess --input " + std::string(300, 'x') +
                         " --output-prefix o "
                         "--tokenizer-type NullTokenizer --vocab-size 10",
                     "File name too long");
}
TEST(Cli, UnknownCommand) { expect_usage_error(" trian", "trian"); }

// The Llama flags' values are checked with Megatron's rules before any allocation.
TEST(Cli, LlamaFlagsAreValidated) {
  expect_usage_error(kTiny + " --normalization BatchNorm", "--normalization 'BatchNorm'");
  expect_usage_error(kTiny + " --position-embedding-type alibi", "--position-embedding-type");
  expect_usage_error(kTiny + " --group-query-attention --num-query-groups 3",
                     "--num-query-groups 3 must divide --num-attention-heads 2");
  expect_usage_error(kTiny + " --position-embedding-type rope --rotary-percent 0.1",
                     "--rotary-percent");
  expect_usage_error(kTiny + " --position-embedding-type rope --rotary-percent 1.5",
                     "--rotary-percent must be in (0, 1]");
  expect_usage_error(kTiny + " --kv-channels -4", "--kv-channels");
  expect_usage_error(kTiny + " --swiglu=1", "--swiglu");
  // With --kv-channels the hidden size need not divide into the heads (NH * HD != H).
  auto r = megatron(kTiny + " --num-attention-heads 3 --kv-channels 8");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Cli, HelpListsCommandsAndFlagsWithDefaults) {
  auto top = megatron(" --help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.output.find("train"), std::string::npos);
  auto train = megatron(" train --help");
  EXPECT_EQ(train.exit_code, 0);
  for (const char* flag :
       {"--num-layers", "--global-batch-size", "--lr-decay-style", "--init-method-std",
        "--eval-iters", "--mock-data", "--swiglu", "--normalization", "--num-query-groups",
        "--rotary-base", "--untie-embeddings-and-output-weights", "--disable-bias-linear"})
    EXPECT_NE(train.output.find(flag), std::string::npos) << flag;
  EXPECT_NE(train.output.find("[default: 1234]"), std::string::npos) << train.output;
}

// ---- issue 23: sizes, overflow and non-finite values refused up front, naming the flag ----

// The inputs, exactly. Each run must end within megatron()'s timeout (the old behaviour
// of --num-layers 2147483648 was to allocate for 108 s until the kernel killed it) with exit 2
// and one line naming the flag, never "internal error".
TEST(CliSizes, PositionTableOverflowIsRefused) {
  // Trained with a negative-size table and exited 0.
  expect_usage_error(kTiny + " --max-position-embeddings 9223372036854775807",
                     "--max-position-embeddings (default: --seq-length) x --hidden-size): "
                     "9223372036854775807 x 16 overflows a 64-bit integer");
  expect_usage_error(kTiny + " --max-position-embeddings -1",
                     "--max-position-embeddings must be positive (got -1)");
}

TEST(CliSizes, LayerCountThatCannotFitIsRefusedBeforeAllocating) {
  const auto r = testing::run_command("timeout 60 " + std::string(MG_BINARY) + kTiny +
                                      " --num-layers 2147483648");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // 124: still running after 60 s
  for (const char* part :
       {"megatron: error: needs ", " TiB on rank 0 (params ", ", grads ", ", optimizer ",
        ", activations ", "driven by --num-layers 2147483648", " available ("})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

TEST(CliSizes, TenTerabyteModelIsRefusedWithTheBytesAndTheFlags) {
  // 8 TB of params, grads and Adam state on one rank: refused, not allocated.
  const auto r = testing::run_command(
      "timeout 60 " + std::string(MG_BINARY) +
      " train --mock-data --num-layers 96 --hidden-size 20480 --num-attention-heads 160"
      " --seq-length 2048 --micro-batch-size 1 --train-iters 1 --lr 1e-4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* part :
       {" TiB on rank 0", "--num-layers 96", "--hidden-size 20480", "--seq-length 2048",
        "--micro-batch-size 1", "only ", "--tensor-model-parallel-size"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  EXPECT_EQ(r.output.find("iteration"), std::string::npos);
}

TEST(CliSizes, HugeSizesEndAsUsageErrorsNamingTheirFlag) {
  // Before: "internal error: ... negative dimension" or "... out of memory allocating ...".
  for (const auto& [extra, flag] : std::vector<std::pair<std::string, std::string>>{
           {"--hidden-size 2147483648", "--hidden-size"},
           {"--ffn-hidden-size 9223372036854775807", "--ffn-hidden-size"},
           {"--ffn-hidden-size 2147483648", "--ffn-hidden-size"},
           {"--kv-channels 9223372036854775807", "--kv-channels"},
           {"--kv-channels 2147483648", "--kv-channels"},
           {"--seq-length 9223372036854775807", "--seq-length"},
           {"--vocab-size 9223372036854775807", "--vocab-size"},
           {"--vocab-size 2147483648", "--vocab-size"},
           {"--make-vocab-size-divisible-by 2147483648", "--vocab-size 64 (padded: 2147483648)"},
           {"--micro-batch-size 9223372036854775807", "--micro-batch-size"},
           {"--num-layers 9223372036854775807", "--num-layers"},
           {"--train-iters 9223372036854775807", "--train-iters"},
           {"--train-iters 1000000000000", "--train-iters 1000000000000"},
           {"--eval-interval 1 --eval-iters 9223372036854775807", "--eval-iters"},
           {"--tensor-model-parallel-size 2147483648", "--tensor-model-parallel-size"},
           {"--decoder-first-pipeline-num-layers 9223372036854775807",
            "--decoder-first/last-pipeline-num-layers"}}) {
    SCOPED_TRACE(extra);
    expect_usage_error(kTiny + " " + extra, flag);
  }
}

TEST(CliSizes, EachScheduleLengthIsNamedAsGiven) {
  expect_usage_error(kTiny + " --lr-warmup-samples -1", "--lr-warmup-samples must be >= 0");
  expect_usage_error(kTiny + " --lr-decay-samples -1", "--lr-decay-samples must be >= 0");
  expect_usage_error(kTiny + " --lr-wsd-decay-iters -1", "--lr-wsd-decay-iters must be >= 0");
  expect_usage_error(kTiny + " --lr-warmup-fraction -1", "--lr-warmup-fraction must be in [0, 1]");
  expect_usage_error(kTiny + " --end-weight-decay -1", "--end-weight-decay must be >= 0");
  expect_usage_error(kTiny + " --lr-warmup-iters 2",
                     "the decay horizon (--train-iters: 2 samples) must be longer than the "
                     "warmup (--lr-warmup-iters: 4 samples)");
}

TEST(CliSizes, NonFiniteValuesAreRefusedNamingTheFlag) {
  for (const char* flag : {"--lr", "--norm-epsilon", "--adam-eps"})
    expect_usage_error(kTiny + " " + flag + " inf",
                       std::string(flag) + " expects a finite number, got 'inf'");
  expect_usage_error(kTiny + " --norm-epsilon 1e39", "--norm-epsilon 1e39 is out of range");
}

// Every valued train flag (paths aside) refuses values it cannot hold, naming itself: nan, inf
// and 1e999 (past a double) for numbers and names alike.
TEST(CliSizes, EveryFlagRefusesNonFiniteAndOutOfRangeValues) {
  for (const auto& o : train_options()) {
    if (o.metavar.empty() || o.metavar == "PATH" || o.metavar == "DIR" ||
        o.metavar.find("PREFIX") != std::string::npos)
      continue;
    for (const char* v : {"nan", "inf", "1e999"}) {
      SCOPED_TRACE(o.flag + " " + v);
      const auto r = megatron(kTiny + " " + o.flag + " " + v);
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(r.output.find(o.flag), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
    }
  }
}

}  // namespace
}  // namespace mg
