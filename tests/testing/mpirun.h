// Launching the real binary under mpirun from a test, and reading its Megatron-format log.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "testing/subprocess.h"

namespace mg::testing {

// This test process's directory for its jobs' Open MPI session files (orte_tmpdir_base). Two
// mpiruns starting at once race to create the shared /tmp/ompi.<host>.<uid>, and Open MPI 4.1
// fails the loser ("mkdir ... File exists", orte_init failed: seen once in CI under ctest -j2);
// a directory per test process leaves nothing to race for. Removed at exit (Open MPI empties it
// when each job ends).
inline const std::string& mpi_session_base() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/mg-ompi-XXXXXX";
    const char* made = mkdtemp(tmpl);
    if (made) std::atexit([] { rmdir(mpi_session_base().c_str()); });
    return std::string(made ? made : "/tmp");
  }();
  return dir;
}

// The ranks run without LeakSanitizer's exit check: Open MPI never frees its operator and
// component tables, which the sanitizer build (ctest --preset sanitize) would report as leaks
// of every multi-rank run. Single-process runs keep the leak check; elsewhere the variable is
// inert.
inline std::string mpirun_prefix(int ranks) {
  return std::string(MG_MPIEXEC) + (geteuid() == 0 ? " --allow-run-as-root" : "") +
         " --oversubscribe --mca orte_tmpdir_base " + mpi_session_base() +
         " -x ASAN_OPTIONS=detect_leaks=0 -np " + std::to_string(ranks) + " ";
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
