// TensorBoard event files of real training runs, read back by an independent reader
// (tests/train/read_tfevents.js: the TFRecord framing and CRC-32C of npm @roboflow/tfrecords,
// the Event protobuf decoded by protobufjs from TensorBoard's published field numbers), and
// every scalar checked against the value the same run printed in its Megatron log lines.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "testing/mpirun.h"
#include "testing/subprocess.h"

namespace mg {
namespace {

namespace fs = std::filesystem;

// Scalars by tag: step -> value.
using Events = std::map<std::string, std::map<int64_t, double>>;

struct EventFile {
  std::string version;
  Events scalars;  // a step written twice keeps its last value
  std::map<std::string, std::vector<std::pair<int64_t, double>>> in_order;  // as written
};

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) v.push_back(e.path());
  return v;
}

// Runs the independent reader on the one event file under dir.
EventFile read_events(const fs::path& dir) {
  EventFile f;
  const auto files = event_files(dir);
  EXPECT_EQ(files.size(), 1u) << dir;
  if (files.size() != 1) return f;
  const auto r = testing::run_command("NODE_PATH=" + std::string(MG_SOURCE_DIR) +
                                      "/third_party/npm/node_modules node " + MG_SOURCE_DIR +
                                      "/tests/train/read_tfevents.js " + files[0].string());
  EXPECT_EQ(r.exit_code, 0) << r.output;  // a bad CRC, a truncated record, an unknown event
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> col;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, '\t');) col.push_back(c);
    if (col.size() == 2 && col[0] == "version") {
      EXPECT_TRUE(f.version.empty() && f.scalars.empty()) << "the version record comes first";
      f.version = col[1];
    } else if (col.size() == 5 && col[0] == "scalar") {
      f.scalars[col[2]][std::stoll(col[1])] = std::stod(col[3]);
      f.in_order[col[2]].emplace_back(std::stoll(col[1]), std::stod(col[3]));
    } else {
      ADD_FAILURE() << "reader line: " << line;
    }
  }
  return f;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mg_tb_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The printed value's last digit bounds the difference (plus float32 rounding in the file).
void expect_printed(double tb, double printed, double last_digit, const std::string& what) {
  EXPECT_NEAR(tb, printed, 0.5 * last_digit + 1e-7 * std::fabs(printed)) << what;
}
// %.6E: 7 significant digits.
void expect_printed_e(double tb, double printed, const std::string& what) {
  expect_printed(tb, printed, std::pow(10.0, std::floor(std::log10(std::fabs(printed))) - 6), what);
}

const std::string kModel =
    " train --mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64"
    " --vocab-size 512 --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --min-lr 3e-4"
    " --lr-decay-style cosine --lr-warmup-iters 4 --seed 1234 --max-position-embeddings 96";
// Position rows 64..95 are never looked up: their 32 x 64 gradient elements are exactly zero.
constexpr double kUnusedPositionGrads = 32 * 64;

// Every tag the flags ask for, each value equal to the run's log lines, from a 1-rank fp16 run
// (whose loss scale moves: --loss-scale-window 3).
TEST(TensorBoardE2E, EveryTagEqualsTheLogLines) {
  const fs::path d = fresh_dir("tags");
  const int64_t iters = 12, G = 8;
  const auto r = testing::run_command(
      std::string(MG_BINARY) + kModel +
      " --train-iters 12 --log-interval 1 --eval-interval 6 --eval-iters 2 --fp16"
      " --initial-loss-scale 4096 --loss-scale-window 3 --timing-log-level 1"
      " --tensorboard-dir " +
      (d / "tb").string() +
      " --log-params-norm --log-num-zeros-in-grad --log-validation-ppl-to-tensorboard"
      " --log-timers-to-tensorboard --log-throughput --log-memory-to-tensorboard"
      " --log-world-size-to-tensorboard"
      " --dump-final-params " +
      (d / "p.bin").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const EventFile f = read_events(d / "tb");
  EXPECT_EQ(f.version, "brain.Event:2");
  const Events& e = f.scalars;

  // The log line's fields, per iteration.
  using testing::log_values;
  const auto loss = log_values(r.output, "lm loss"), lr = log_values(r.output, "learning rate"),
             scale = log_values(r.output, "loss scale"), gnorm = log_values(r.output, "grad norm"),
             zeros = log_values(r.output, "num zeros"), pnorm = log_values(r.output, "params norm"),
             ms = log_values(r.output, "elapsed time per iteration \\(ms\\)"),
             tflops = log_values(r.output, "throughput per GPU \\(TFLOP/s/GPU\\)");
  for (const auto* v : {&loss, &lr, &scale, &gnorm, &zeros, &pnorm, &ms, &tflops})
    ASSERT_EQ(v->size(), size_t(iters)) << r.output;
  std::vector<double> fb_max_ms;  // the timers' printout: forward-backward (min, max) ms
  const std::regex fb(R"(forward-backward \.+: \(([0-9.]+), ([0-9.]+)\))");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), fb);
       it != std::sregex_iterator(); ++it)
    fb_max_ms.push_back(std::stod((*it)[2]));
  ASSERT_EQ(fb_max_ms.size(), size_t(iters)) << r.output;

  // Each tag of the iteration, and its "vs samples" twin at the consumed samples.
  auto check = [&](const std::string& tag, int64_t i, double printed, double digit) {
    ASSERT_TRUE(e.count(tag) && e.at(tag).count(i)) << tag << " at " << i;
    if (digit > 0)
      expect_printed(e.at(tag).at(i), printed, digit, tag + " at " + std::to_string(i));
    else expect_printed_e(e.at(tag).at(i), printed, tag + " at " + std::to_string(i));
    const std::string twin = tag + " vs samples";
    ASSERT_TRUE(e.count(twin) && e.at(twin).count(i * G)) << twin << " at " << i * G;
    EXPECT_EQ(e.at(twin).at(i * G), e.at(tag).at(i)) << twin;
  };
  bool scale_moved = false;
  for (int64_t i = 1; i <= iters; ++i) {
    const size_t k = size_t(i - 1);
    check("lm loss", i, loss[k], 0);
    check("learning-rate", i, lr[k], 0);
    check("loss-scale", i, scale[k], 0.1);
    check("grad-norm", i, gnorm[k], 1e-3);
    check("num-zeros", i, zeros[k], 0.1);
    check("params-norm", i, pnorm[k], 1e-3);
    check("batch-size", i, double(G), 1);
    check("world-size", i, 1, 1);
    scale_moved |= scale[k] != scale[0];
    // The log-interval scalars: seconds per iteration, TFLOP/s per GPU, phase timers (s).
    expect_printed(e.at("iteration-time").at(i) * 1e3, ms[k], 0.1, "iteration-time");
    expect_printed(e.at("throughput").at(i), tflops[k], 1e-3, "throughput");
    expect_printed(e.at("forward-backward-time").at(i) * 1e3, fb_max_ms[k], 0.01,
                   "forward-backward-time");
    EXPECT_TRUE(e.at("optimizer-time").count(i));
    // Memory: the allocator's live and peak bytes, the resident set.
    EXPECT_GT(e.at("mem-allocated-bytes").at(i), 0);
    EXPECT_GE(e.at("mem-max-allocated-bytes").at(i), e.at("mem-allocated-bytes").at(i));
    EXPECT_GT(e.at("mem-reserved-bytes").at(i), 0);
  }
  EXPECT_TRUE(scale_moved) << "the loss scale should grow every 3 clean steps";
  EXPECT_EQ(e.at("lm loss").size(), size_t(iters));

  // Validation at 6 and 12, then after training (as Megatron) the last validation and the test
  // evaluation at 12, all under the validation tags: loss and PPL as printed, in that order,
  // each also against the consumed training samples (Megatron's x axis).
  const auto vloss = log_values(r.output, "lm loss value"),
             vppl = log_values(r.output, "lm loss PPL");
  ASSERT_EQ(vloss.size(), 4u) << r.output;
  ASSERT_EQ(vppl.size(), 4u);
  EXPECT_NE(r.output.find("validation loss at iteration 12 on validation set"), std::string::npos);
  EXPECT_NE(r.output.find("validation loss at iteration 12 on test set"), std::string::npos);
  const auto& series = f.in_order.at("lm loss validation");
  const auto& ppl_series = f.in_order.at("lm loss validation ppl");
  ASSERT_EQ(series.size(), 4u);
  ASSERT_EQ(ppl_series.size(), 4u);
  const int64_t steps[] = {6, 12, 12, 12};
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(series[k].first, steps[k]);
    expect_printed_e(series[k].second, vloss[k], "lm loss validation " + std::to_string(k));
    expect_printed_e(ppl_series[k].second, vppl[k], "lm loss validation ppl " + std::to_string(k));
  }
  const auto& vs = f.in_order.at("lm loss validation vs samples");
  ASSERT_EQ(vs.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(vs[k].first, steps[k] * G);
    EXPECT_EQ(vs[k].second, series[k].second);
  }

  // params-norm at the end is the L2 norm of the final parameters, as dumped.
  std::ifstream pf(d / "p.bin", std::ios::binary);
  std::vector<float> p(fs::file_size(d / "p.bin") / sizeof(float));
  pf.read(reinterpret_cast<char*>(p.data()), std::streamsize(p.size() * sizeof(float)));
  double ss = 0;
  for (float x : p) ss += double(x) * double(x);
  EXPECT_NEAR(e.at("params-norm").at(iters), std::sqrt(ss), 1e-5 * std::sqrt(ss));
  fs::remove_all(d);
}

// Multi-rank layouts: only the last rank writes, and what it writes equals rank 0's log lines;
// params-norm and num-zeros count each parameter once, so they equal the 1-rank run's, and
// num-zeros is the unused position rows (the TP-replicated table counted once). Under TP2 x PP2
// the tied output layer is a second copy; with the distributed optimizer over DP 2 each rank
// counts its grad shard and the parameters are all-gathered first (--overlap-param-gather
// defers that gather).
struct Layout {
  const char* name;
  int ranks;
  const char* flags;
};
void PrintTo(const Layout& l, std::ostream* os) { *os << "np " << l.ranks << " " << l.flags; }
class TensorBoardLayout : public ::testing::TestWithParam<Layout> {};

TEST_P(TensorBoardLayout, LastRankWritesWhatTheLogSaysAndOneRankStatistics) {
  const Layout& l = GetParam();
  const fs::path d = fresh_dir(l.name);
  const std::string flags = kModel +
                            " --train-iters 6 --log-interval 1 --log-params-norm"
                            " --log-num-zeros-in-grad --tensorboard-dir ";
  const auto one = testing::run_command(std::string(MG_BINARY) + flags + (d / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto many = testing::run_command(testing::mpirun_prefix(l.ranks) + MG_BINARY + flags +
                                         (d / "many").string() + " " + l.flags);
  ASSERT_EQ(many.exit_code, 0) << many.output;
  EXPECT_NE(many.output.find(" > tensorboard: rank " + std::to_string(l.ranks - 1) + " writes " +
                             (d / "many").string()),
            std::string::npos)
      << many.output;
  const Events a = read_events(d / "one").scalars, b = read_events(d / "many").scalars;
  const auto loss = testing::log_values(many.output, "lm loss"),
             gnorm = testing::log_values(many.output, "grad norm"),
             lr = testing::log_values(many.output, "learning rate"),
             zeros = testing::log_values(many.output, "num zeros"),
             pnorm = testing::log_values(many.output, "params norm");
  for (const auto* v : {&loss, &gnorm, &lr, &zeros, &pnorm})
    ASSERT_EQ(v->size(), 6u) << many.output;
  for (int64_t i = 1; i <= 6; ++i) {
    const size_t k = size_t(i - 1);
    expect_printed_e(b.at("lm loss").at(i), loss[k], "lm loss");
    expect_printed(b.at("grad-norm").at(i), gnorm[k], 1e-3, "grad-norm");
    expect_printed_e(b.at("learning-rate").at(i), lr[k], "learning-rate");
    expect_printed(b.at("params-norm").at(i), pnorm[k], 1e-3, "params-norm");
    EXPECT_NEAR(b.at("params-norm").at(i), a.at("params-norm").at(i),
                1e-5 * a.at("params-norm").at(i));
    EXPECT_EQ(zeros[k], kUnusedPositionGrads) << "iteration " << i;
    EXPECT_EQ(a.at("num-zeros").at(i), kUnusedPositionGrads) << "iteration " << i;
    EXPECT_EQ(b.at("num-zeros").at(i), kUnusedPositionGrads) << "iteration " << i;
  }
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(
    E2E, TensorBoardLayout,
    ::testing::Values(
        Layout{"tp2pp2", 4, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"},
        Layout{"dp2_distopt", 2, "--use-distributed-optimizer --overlap-param-gather"}),
    [](const ::testing::TestParamInfo<Layout>& i) { return std::string(i.param.name); });

// A run killed at iteration 13 (stopped there, then SIGKILLed) with --log-interval 5 leaves a
// whole, readable file holding every iteration up to the last flushed interval (10); the
// queued 11 and 12 are what it may lose. The logged interval means equal the file's losses.
TEST(TensorBoardE2E, KilledRunKeepsEveryFlushedInterval) {
  const fs::path d = fresh_dir("kill");
  const auto r = testing::run_command(
      "MG_FAULT_STOP=0:forward:13 " + std::string(MG_BINARY) + kModel +
      " --train-iters 100 --log-interval 5 --tensorboard-dir " + (d / "tb").string() + " > " +
      (d / "log").string() +
      " 2>&1 & p=$!; s=; for i in $(seq 1200); do"
      " s=$(awk '{print $3}' /proc/$p/stat 2>/dev/null); [ \"$s\" = T ] && break; sleep 0.05;"
      " done; { kill -9 $p; wait $p; } 2>/dev/null; echo \"state $s\"");
  ASSERT_NE(r.output.find("state T"), std::string::npos) << r.output;
  std::ifstream lf(d / "log");
  const std::string log((std::istreambuf_iterator<char>(lf)), std::istreambuf_iterator<char>());
  const auto logged = testing::log_values(log, "lm loss");
  ASSERT_EQ(logged.size(), 2u) << log;
  const Events e = read_events(d / "tb").scalars;
  std::vector<int64_t> steps;
  for (const auto& [s, v] : e.at("lm loss")) steps.push_back(s);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  for (int k = 0; k < 2; ++k) {
    double mean = 0;
    for (int64_t i = 5 * k + 1; i <= 5 * k + 5; ++i) mean += e.at("lm loss").at(i) / 5;
    EXPECT_NEAR(mean, logged[size_t(k)], 1e-5 * logged[size_t(k)]);
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace mg
