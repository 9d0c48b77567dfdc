// Runs a shell command (e.g. an mpirun job that may hang) with a hard time limit, capturing its
// output as it comes, and timing when a marker line appears and when the command ends. Every
// process the command started is SIGKILLed afterwards, whatever happened: MPI ranks live in
// process groups of their own, so they are found by a tag in their environment.
#pragma once
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "testing/subprocess.h"

namespace mg::testing {

struct BoundedRun {
  int exit_code = -1;  // -1: killed at the limit
  bool hit_limit = false;
  std::string output;        // stdout + stderr
  double seconds = 0;        // start to end
  double after_marker = -1;  // marker's arrival to end (-1: no marker)
  int leftovers = 0;         // processes still alive at the end (then killed)
  bool marker_late = false;  // the marker had not come by its deadline (then killed)
};

// The live processes whose environment holds tag (SIGKILLed when kill_them); how many.
inline int find_tagged(const std::string& tag, bool kill_them) {
  int found = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return 0;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (env.find(tag + '\0') == std::string::npos) continue;
    // A zombie (already dead, not yet reaped) needs no signal.
    std::ifstream st(std::string("/proc/") + e->d_name + "/stat");
    std::string stat_line;
    std::getline(st, stat_line);
    const size_t paren = stat_line.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat_line.size() && stat_line[paren + 2] == 'Z')
      continue;
    if (kill_them) kill(pid, SIGKILL);
    ++found;
  }
  closedir(proc);
  return found;
}

// With marker_deadline > 0 the command is killed when the marker has not come by then, after
// `diagnose` (a shell command, e.g. listing the job's processes) has run and its output has been
// appended: a stall is told apart from a slow end.
inline BoundedRun run_bounded(const std::string& cmd, double limit_seconds,
                              const std::string& marker = "", double marker_deadline = 0,
                              const std::string& diagnose = "") {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  static int runs = 0;
  const std::string tag =
      "MG_BOUNDED_RUN_TAG=" + std::to_string(getpid()) + "_" + std::to_string(++runs);
  BoundedRun r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  const Clock::time_point start = Clock::now();
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    putenv(const_cast<char*>(tag.c_str()));
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  Clock::time_point marked{};
  bool eof = false;
  while (!eof) {
    const double left = limit_seconds - since(start);
    if (left <= 0) {
      r.hit_limit = true;
      break;
    }
    if (marker_deadline > 0 && marked == Clock::time_point{} && since(start) > marker_deadline) {
      r.marker_late = true;
      r.output += "\n--- no '" + marker + "' after " + std::to_string(int(marker_deadline)) +
                  " s; " + diagnose + ":\n";
      if (!diagnose.empty()) r.output += run_command(diagnose).output;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, marker_deadline > 0 ? 500 : int(left * 1000) + 1) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) {
      eof = true;
      break;
    }
    r.output.append(buf, size_t(n));
    if (!marker.empty() && marked == Clock::time_point{} &&
        r.output.find(marker) != std::string::npos)
      marked = Clock::now();
  }
  if (r.hit_limit || r.marker_late) kill(-child, SIGKILL);
  int status = 0;
  // After EOF the command has closed its output; it ends within moments (bounded all the same).
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (since(start) > limit_seconds + 5) {
      r.hit_limit = true;
      kill(-child, SIGKILL);
    }
    usleep(10000);
  }
  const Clock::time_point end = Clock::now();
  r.seconds = std::chrono::duration<double>(end - start).count();
  if (marked != Clock::time_point{})
    r.after_marker = std::chrono::duration<double>(end - marked).count();
  if (!r.hit_limit && !r.marker_late && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  close(fds[0]);
  // The job's processes end with it (an aborting MPI job takes a moment to reap its ranks).
  for (int i = 0; i < 200 && find_tagged(tag, false) > 0; ++i) usleep(10000);
  r.leftovers = find_tagged(tag, true);
  return r;
}

}  // namespace mg::testing
