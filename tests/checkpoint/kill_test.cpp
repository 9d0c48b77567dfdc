// SIGKILL during saves and --ckpt-keep-last cleanup (label `checkpoint`). Runs of
// `--save-interval 1 --ckpt-keep-last 2` are killed at random moments, and, under strace's
// fault injection, just before each of a save's file-system calls in turn. After every kill:
// the checkpoint latest_checkpointed_iteration.txt names verifies (metadata, indexes, shard
// CRCs), no directory under a final name iter_%07d is incomplete, a run resumes from the latest
// checkpoint, and its first save leaves no *.tmp or *.deleting behind. MG_KILL_TRIALS sets the
// number of random kills (10 in the suite; docs/reliability.md reports a run with 100).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace mg {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Tiny and quick to start (a long sequence keeps the mock dataset's sample index small).
const std::string kTiny =
    std::string(MG_BINARY) +
    " train --mock-data --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 512"
    " --vocab-size 60 --micro-batch-size 1 --global-batch-size 1 --lr 2e-3 --log-interval 1 --seed 3";
const std::string kKeep = " --save-interval 1 --ckpt-keep-last 2";

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// What a kill may leave in a --save directory: complete checkpoints under final names, the
// latest file, and names that only a crash leaves (removed by the next save). Returns the
// iteration the latest file names.
int64_t expect_sound(const fs::path& ck, bool leftovers_allowed, const std::string& when) {
  const std::regex leftover(
      R"(iter_[0-9]{7}\.(tmp|deleting)|latest_checkpointed_iteration\.txt\.tmp)");
  for (const auto& e : fs::directory_iterator(ck)) {
    const std::string n = e.path().filename().string();
    if (iteration_of_dir_name(n) >= 0) {  // a final name: must be complete and intact
      try {
        verify_checkpoint(e.path().string());
      } catch (const UsageError& err) {
        ADD_FAILURE() << when << ": " << n << " is not a complete checkpoint: " << err.what();
      }
    } else if (n != "latest_checkpointed_iteration.txt") {
      EXPECT_TRUE(leftovers_allowed && std::regex_match(n, leftover)) << when << ": " << n;
    }
  }
  const int64_t latest = read_latest_iteration(ck.string());
  EXPECT_GE(latest, 0) << when;
  EXPECT_TRUE(fs::is_directory(ck / checkpoint_dir_name(latest))) << when << ": latest " << latest;
  return latest;
}

// Resumes one iteration from the latest checkpoint, saving into the same directory: it must
// load exactly that checkpoint, and its save must clean up whatever the kill left.
void expect_resumes(const fs::path& ck, int64_t latest, const std::string& when,
                    const std::string& model = "") {
  const auto r = testing::run_command(kTiny + model + kKeep + " --train-iters " +
                                      std::to_string(latest + 1) + " --load " + ck.string() +
                                      " --save " + ck.string() + " --exit-on-missing-checkpoint");
  ASSERT_EQ(r.exit_code, 0) << when << "\n" << r.output;
  EXPECT_NE(r.output.find("loaded checkpoint '" + (ck / checkpoint_dir_name(latest)).string() +
                          "' (iteration " + std::to_string(latest)),
            std::string::npos)
      << when << "\n"
      << r.output;
  EXPECT_EQ(expect_sound(ck, false, when + ", after the resumed run's save"), latest + 1);
  int finals = 0;
  for (const auto& e : fs::directory_iterator(ck))
    finals += iteration_of_dir_name(e.path().filename()) >= 0;
  EXPECT_EQ(finals, 2) << when;  // --ckpt-keep-last 2
}

int trials_from_env(int fallback) {
  const char* s = std::getenv("MG_KILL_TRIALS");
  return s ? std::max(1, std::atoi(s)) : fallback;
}

// SIGKILL at a random moment of a run that saves every iteration: a third of the kills land
// anywhere, a third a few milliseconds into a save (after its .tmp directory appears), a third
// within 3 ms of the save's publishing rename (the latest file, then --ckpt-keep-last's removal).
TEST(CheckpointKill, RandomKillsNeverLeaveAnUnloadableOrPartialCheckpoint) {
  TempDir d("mg_kill");
  const fs::path ck = d.path / "ck";
  // A ~25 MB checkpoint: writing, fsyncing and deleting one takes longer than a step.
  const std::string model = " --hidden-size 128 --vocab-size 12000";
  const auto first =
      testing::run_command(kTiny + model + kKeep + " --train-iters 2 --save " + ck.string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::mt19937 gen(12345);
  const int trials = trials_from_env(10);
  std::map<std::string, int> landed;  // what each kill interrupted, judged by what it left
  for (int trial = 0; trial < trials; ++trial) {
    const std::string when = "trial " + std::to_string(trial);
    const fs::path log = d.path / "log";
    const auto started = fs::file_time_type::clock::now();
    const std::string cmd = kTiny + model + kKeep + " --train-iters 100000 --load " + ck.string() +
                            " --save " + ck.string();
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + log.string() + " 2>&1").c_str(),
            nullptr);
      _exit(127);
    }
    for (int i = 0; i < 1200 && slurp(log).find(" iteration ") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    auto saving = [&] {
      for (const auto& e : fs::directory_iterator(ck))
        if (e.path().extension() == ".tmp" && e.last_write_time() >= started) return true;
      return false;
    };
    auto wait_until = [](const std::function<bool()>& done) {
      for (int i = 0; i < 8000 && !done(); ++i)
        std::this_thread::sleep_for(std::chrono::microseconds(125));
    };
    if (trial % 3 == 0) {  // anywhere
      std::this_thread::sleep_for(std::chrono::milliseconds(gen() % 500));
    } else if (trial % 3 == 1) {  // a few ms into a save
      wait_until(saving);
      std::this_thread::sleep_for(std::chrono::milliseconds(gen() % 30));
    } else {  // as a save publishes: the rename, the latest file, the removal of the oldest
      wait_until(saving);
      wait_until([&] { return !saving(); });
      std::this_thread::sleep_for(std::chrono::microseconds(gen() % 3000));
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << when << ": the run ended before the kill\n" << slurp(log);
    std::string where = "between saves";
    for (const auto& e : fs::directory_iterator(ck)) {
      if (e.path().extension() == ".tmp") where = "inside a save";
      if (e.path().extension() == ".deleting") where = "inside a removal";
    }
    ++landed[where];
    const int64_t latest = expect_sound(ck, true, when + " (" + where + ")");
    expect_resumes(ck, latest, when, model);
    if (HasFatalFailure()) return;
  }
  std::string summary;
  for (const auto& [k, n] : landed) summary += " " + std::to_string(n) + " " + k + ";";
  std::printf("%d kills:%s every latest checkpoint loaded\n", trials, summary.c_str());
  EXPECT_GE(landed["inside a save"] + landed["inside a removal"], trials / 4) << summary;
}

// strace's fault injection kills the process on entering its n-th call of syscall s, for every
// (s, n) a save with --ckpt-keep-last makes: a save at iteration 3 over checkpoints 1 and 2 and
// a stale .tmp (so it also cleans up, publishes, replaces the latest file and removes 1).
TEST(CheckpointKill, KillAtEveryFileSystemCallOfASave) {
  if (testing::run_command("strace -V").exit_code != 0)
    GTEST_SKIP() << "strace is not installed (scripts/setup.sh installs it)";
  TempDir d("mg_strace");
  const fs::path base = d.path / "base", ck = d.path / "ck";
  const auto first =
      testing::run_command(kTiny + kKeep + " --train-iters 2 --save " + base.string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  fs::create_directories(base / "iter_0000007.tmp");  // a save killed earlier
  std::ofstream(base / "iter_0000007.tmp" / "rank_00000.bin") << "partial";
  const std::string run =
      kTiny + kKeep + " --train-iters 3 --load " + ck.string() + " --save " + ck.string();
  const std::string mutating =
      "openat,creat,mkdir,mkdirat,write,pwrite64,fsync,fdatasync,ftruncate,rename,renameat,"
      "renameat2,unlink,unlinkat,rmdir";
  auto fresh_copy = [&] {
    fs::remove_all(ck);
    fs::copy(base, ck, fs::copy_options::recursive);
  };
  // 1. Every path under ck the run touches (-y prints the path of each fd), to trace only them.
  fresh_copy();
  const fs::path trace = d.path / "trace";
  auto r = testing::run_command("strace -f -y -qq -o " + trace.string() + " -e trace=" + mutating +
                                ",newfstatat,statx,getdents64 " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> paths = {ck.string()};
  const std::string text = slurp(trace);
  const std::regex path_re(
      std::regex_replace(ck.string(), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
      R"([^"<>,)\s]*)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), path_re);
       it != std::sregex_iterator(); ++it)
    paths.insert(it->str());
  std::string path_flags;
  for (const std::string& p : paths) path_flags += " -P " + p;
  // 2. How often the run makes each mutating call on those paths.
  fresh_copy();
  r = testing::run_command("strace -f -qq -o " + trace.string() + path_flags +
                           " -e trace=" + mutating + " " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, int> calls;
  const std::regex call_re(R"(^(?:\d+\s+)?([a-z0-9_]+)\()");
  std::istringstream lines(slurp(trace));
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    if (std::regex_search(l, m, call_re)) ++calls[m[1]];
  }
  int renames = 0;
  for (const auto& [sys, n] : calls) renames += sys.find("rename") != std::string::npos ? n : 0;
  ASSERT_GE(renames, 3) << slurp(trace);  // publish, the latest file, a removal
  // 3. A kill before each of them in turn.
  int kills = 0, total = 0;
  std::string counts;
  for (const auto& [sys, n] : calls) {
    counts += " " + sys + " " + std::to_string(n) + ";";
    for (int k = 1; k <= n; ++k) {
      const std::string when = "SIGKILL at " + sys + " call " + std::to_string(k);
      fresh_copy();
      r = testing::run_command("strace -f -qq -o /dev/null" + path_flags + " -e trace=" + sys +
                               " -e inject=" + sys + ":signal=SIGKILL:when=" + std::to_string(k) +
                               " " + run);
      ++total;
      kills += r.exit_code != 0;
      EXPECT_NE(r.exit_code, 0) << when << ": not killed (the calls differ from the counting run)";
      const int64_t latest = expect_sound(ck, true, when);
      EXPECT_TRUE(latest == 2 || latest == 3) << when;
      expect_resumes(ck, latest, when);
      if (HasFatalFailure()) return;
    }
  }
  std::printf(
      "%d kills, one at each file-system call of the save (%s): every latest checkpoint "
      "loaded\n",
      kills, counts.c_str());
  EXPECT_EQ(kills, total);
}

}  // namespace
}  // namespace mg
