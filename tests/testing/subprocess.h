// Runs a shell command, capturing stdout+stderr and the exit code (for CLI and oracle tests).
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace mg::testing {

struct RunResult {
  int exit_code = -1;
  std::string output;
};

inline RunResult run_command(const std::string& cmd) {
  RunResult r;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace mg::testing
