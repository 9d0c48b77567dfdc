// MG_FAULT_STOP (core/fault.h): parsed once by arm(); point() stops at most once per process.
#include "core/fault.h"

#include <signal.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"

namespace mg::fault {

namespace {

constexpr const char* kSiteNames[] = {"forward", "backward", "optimizer", "checkpoint-save"};

bool g_armed = false;  // this rank stops once, at g_site of g_stop_iteration
int g_rank = 0;
Site g_site = Site::Forward;
int64_t g_stop_iteration = 0, g_iteration = 0;

}  // namespace

void arm(int world_rank) {
  const char* env = std::getenv("MG_FAULT_STOP");
  if (!env || !*env) return;
  const std::string v = env;
  const size_t a = v.find(':'), b = a == std::string::npos ? a : v.find(':', a + 1);
  int rank = -1;
  long long iter = 0;
  int site = -1;
  if (b != std::string::npos) {
    const std::string name = v.substr(a + 1, b - a - 1);
    for (int s = 0; s < 4; ++s)
      if (name == kSiteNames[s]) site = s;
    char* end = nullptr;
    rank = int(std::strtol(v.substr(0, a).c_str(), &end, 10));
    if (a == 0 || *end) rank = -1;
    iter = std::strtoll(v.c_str() + b + 1, &end, 10);
    if (b + 1 == v.size() || *end) iter = 0;
  }
  MG_USER_CHECK(rank >= 0 && site >= 0 && iter >= 1, "MG_FAULT_STOP='", v,
                "': expected "
                "RANK:SITE:ITERATION (SITE one of forward, backward, optimizer, checkpoint-save; "
                "ITERATION >= 1), e.g. 3:forward:2");
  g_armed = rank == world_rank;
  g_rank = world_rank;
  g_site = Site(site);
  g_stop_iteration = iter;
}

void set_iteration(int64_t iteration) { g_iteration = iteration; }

void point(Site site) {
  if (!g_armed || site != g_site || g_iteration != g_stop_iteration) return;
  g_armed = false;
  log_error(str_cat("MG_FAULT_STOP: rank ", g_rank, " stops (SIGSTOP) in ", kSiteNames[int(site)],
                    " of iteration ", g_iteration));
  raise(SIGSTOP);
}

}  // namespace mg::fault
