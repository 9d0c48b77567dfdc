// Launching the real binary under mpirun from a test, and reading its Megatron-format log.
#pragma once
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "testing/subprocess.h"

namespace mg::testing {

// The ranks run without LeakSanitizer's exit check: Open MPI never frees its operator and
// component tables, which the sanitizer build (ctest --preset debug) would report as leaks of
// every multi-rank run. Single-process runs keep the leak check; elsewhere the variable is inert.
inline std::string mpirun_prefix(int ranks) {
  return std::string(MG_MPIEXEC) + (geteuid() == 0 ? " --allow-run-as-root" : "") +
         " --oversubscribe -x ASAN_OPTIONS=detect_leaks=0 -np " + std::to_string(ranks) + " ";
}

// Every value of `field` (e.g. "lm loss") in the log's iteration lines, in order.
inline std::vector<double> log_values(const std::string& log, const std::string& field) {
  std::vector<double> v;
  const std::regex re("\\| " + field + ": +([0-9.E+-]+) \\|");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

}  // namespace mg::testing
