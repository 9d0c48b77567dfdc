#include "core/log.h"

#include <cstdio>
#include <string>

namespace mg {

namespace {
int g_rank = 0;  // set once at start-up, read-only afterwards
}

void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }

void log_line(const std::string& line, bool all_ranks) {
  if (g_rank != 0 && !all_ranks) return;
  if (g_rank != 0) std::printf("[rank %d] ", g_rank);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void log_error(const std::string& line) {
  // One write, so the lines of ranks failing together do not interleave.
  const std::string text =
      (g_rank != 0 ? "[rank " + std::to_string(g_rank) + "] " : std::string()) + line + "\n";
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

std::string format_bytes(int64_t bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld bytes", (long long)bytes);
  else
    std::snprintf(buf, sizeof buf,
                  v >= 100  ? "%.0f %s"
                  : v >= 10 ? "%.1f %s"
                            : "%.2f %s",
                  v, units[u]);
  return buf;
}

}  // namespace mg
