#include "core/timers.h"

#include <chrono>

namespace mg::timers {

namespace {
struct Info {
  const char* name;
  int level;
};
constexpr Info kInfo[kNumPhases] = {
    {"forward-backward", 1},
    {"all-grads-sync", 1},
    {"params-all-gather", 1},
    {"optimizer", 1},
    {"batch-generator", 1},
    {"forward-compute", 2},
    {"backward-compute", 2},
    {"forward-recv", 2},
    {"forward-send", 2},
    {"backward-recv", 2},
    {"backward-send", 2},
    {"forward-send-backward-recv", 2},
    {"backward-send-forward-recv", 2},
    {"forward-send-forward-recv", 2},
    {"backward-send-backward-recv", 2},
    {"forward-backward-send-forward-backward-recv", 2},
    {"embedding-grads-all-reduce", 2},
    {"optimizer-unscale-and-check-inf", 2},
    {"optimizer-clip-main-grad", 2},
    {"optimizer-inner-step", 2},
    {"compute/gemm", 2},
    {"compute/attention", 2},
    {"compute/layernorm", 2},
    {"compute/gelu-residual", 2},
    {"compute/cross-entropy", 2},
    {"compute/embedding", 2},
    {"compute/tp-comm", 2},
    {"compute/precision-casts", 2},
    {"moe/router", 2},
    {"moe/permute", 2},
    {"moe/experts", 2},
    {"moe/combine", 2},
};
int g_level = 0;
double g_total[kNumPhases] = {};
int g_depth[kNumPhases] = {};  // nested scopes of one phase count once
void (*g_sync)() = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* name(Phase p) { return kInfo[p].name; }
int level(Phase p) { return kInfo[p].level; }
void set_level(int l) { g_level = l; }
void set_sync(void (*sync)()) { g_sync = sync; }
int enabled_level() { return g_level; }
std::vector<double> totals() { return std::vector<double>(g_total, g_total + kNumPhases); }
void reset() {
  for (double& t : g_total) t = 0;
}

Scope::Scope(Phase p) : p_(p), start_ns_(-1) {
  if (kInfo[p].level > g_level || g_depth[p]++ > 0) return;
  if (g_sync) g_sync();
  start_ns_ = now_ns();
}

Scope::~Scope() { stop(); }

void Scope::stop() {
  if (stopped_ || kInfo[p_].level > g_level) return;
  stopped_ = true;
  --g_depth[p_];
  if (start_ns_ < 0) return;
  if (g_sync) g_sync();
  g_total[p_] += double(now_ns() - start_ns_) * 1e-9;
}

}  // namespace mg::timers
