// The CUDA emulator's kernel threads (tests/cuda_emu/README.md): each thread of a block is a
// fiber; the scheduler runs them until they wait, releases warps and blocks at their barriers,
// and reports a deadlock with every thread's state.
#include <sys/mman.h>
#include <ucontext.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "emu.h"

using mg_emu::fatal;
using mg_emu::kMaxThreads;
using mg_emu::kSmemOptin;

namespace {

// ---- kernel threads as fibers ----
// A fiber switch on x86-64 saves the callee-saved registers on the old stack and loads them
// from the new one: no signal-mask syscall, unlike swapcontext, which made the emulator spend
// most of its time in the kernel (the floating-point control words are never changed here, so
// they need no saving). Under AddressSanitizer each switch is announced to it, so it knows
// which stack is live. Elsewhere than x86-64, ucontext does the switch.
#if defined(__x86_64__)
extern "C" void mg_emu_switch(void** save_sp, void* to_sp);
asm(R"(
  .text
  .globl mg_emu_switch
  .type mg_emu_switch, @function
mg_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mg_emu_switch, .-mg_emu_switch
)");
struct Context {
  void* sp = nullptr;
  const void* bottom = nullptr;  // the stack, for AddressSanitizer
  size_t size = 0;
};
// A fresh stack that mg_emu_switch "returns" into entry, with the stack aligned as after a call.
void context_init(Context& c, void* stack, size_t bytes, void (*entry)()) {
  auto* top =
      reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15));
  top[-1] = 0;                                  // entry's return address: it never returns
  top[-2] = reinterpret_cast<uint64_t>(entry);  // popped by ret
  for (int r = 3; r <= 8; ++r) top[-r] = 0;     // rbp, rbx, r12..r15
  c.sp = &top[-8];
  c.bottom = stack;
  c.size = bytes;
}
// final: `from` never runs again (an exited thread), so ASan may drop its fake stack.
void context_switch(Context& from, Context& to, bool final = false) {
#ifdef __SANITIZE_ADDRESS__
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(final ? nullptr : &fake, to.bottom, to.size);
  mg_emu_switch(&from.sp, to.sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void) final;
  mg_emu_switch(&from.sp, to.sp);
#endif
}
// Called first on a fresh fiber: `from` (the scheduler) learns its own stack for later switches.
void context_started(Context& from) {
#ifdef __SANITIZE_ADDRESS__
  __sanitizer_finish_switch_fiber(nullptr, &from.bottom, &from.size);
#else
  (void)from;
#endif
}
#else
struct Context {
  ucontext_t uc;
};
void context_init(Context& c, void* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
void context_switch(Context& from, Context& to, bool = false) { swapcontext(&from.uc, &to.uc); }
void context_started(Context&) {}
#endif

constexpr size_t kStackBytes = size_t(256) << 10;

enum class State { Ready, AtWarp, AtBlock, Done };
struct Fiber {
  Context ctx;
  void* stack = nullptr;
  State state = State::Ready;
  bool pred = false;
  uint3 tid{};
};

struct Grid {
  std::mutex mu;  // one launch at a time
  std::vector<Fiber> fibers;
  Context sched;
  int current = 0;
  bool fiber_mode = true;
  bool barrier_seen = false;
  bool or_result = false;
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
  uint3 tid{}, bid{};
  dim3 grid, block;
  std::vector<unsigned char> smem_store;
  unsigned char* smem = nullptr;
  uint64_t slots[kMaxThreads / 32][32];
  bool reverse = false;      // threads, warps and blocks in reverse order
  bool warps_ahead = false;  // each warp runs to its next block barrier before the next starts
  // Static __shared__ arrays: one copy, repoisoned when a new block first touches it.
  struct Shared {
    void* p;
    size_t bytes;
    uint64_t block;
  };
  std::map<const void*, Shared> shared;
  uint64_t block_serial = 0;  // counts blocks across launches
};
Grid* make_grid() {
  auto* x = new Grid;
  const char* o = std::getenv("MG_CUDA_EMU_ORDER");
  const std::string order = o ? o : "forward";
  if (order != "forward" && order != "reverse" && order != "warps-ahead")
    fatal("MG_CUDA_EMU_ORDER=" + order + ": use forward, reverse or warps-ahead");
  x->reverse = order != "forward";
  x->warps_ahead = order == "warps-ahead";
  return x;
}
Grid* const g_grid = make_grid();  // never destroyed: kernels may run from static destructors
inline Grid& G() { return *g_grid; }

int linear(const uint3& t, const dim3& b) { return int(t.x + b.x * (t.y + b.y * t.z)); }

[[noreturn]] void fiber_entry() {
  Grid& g = G();
  context_started(g.sched);
  g.body(g.ctx);
  Fiber& f = g.fibers[g.current];
  f.state = State::Done;
  context_switch(f.ctx, g.sched, true);
  fatal("an exited kernel thread was resumed");
}

void wait_here(State s) {
  Grid& g = G();
  if (!g.fiber_mode)
    fatal(
        "a kernel thread reached a barrier although no thread of the launch's first block "
        "did; the emulator runs such kernels without fibers (a kernel whose first block skips "
        "every barrier is not supported)");
  g.barrier_seen = true;
  Fiber& f = g.fibers[g.current];
  f.state = s;
  context_switch(f.ctx, g.sched);
}

const char* state_name(State s) {
  switch (s) {
    case State::Ready: return "ready";
    case State::AtWarp: return "at __syncwarp/shuffle";
    case State::AtBlock: return "at __syncthreads";
    case State::Done: return "exited";
  }
  return "?";
}

void run_block_fibers(Grid& g, int n) {
  if (g.fibers.size() < size_t(n)) g.fibers.resize(n);
  for (int i = 0; i < n; ++i) {
    Fiber& f = g.fibers[i];
    if (!f.stack) {  // with an inaccessible page below: an overflow faults, not corrupts
      constexpr size_t kGuard = 4096;
      void* m = mmap(nullptr, kGuard + kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED || mprotect(m, kGuard, PROT_NONE) != 0)
        fatal("no memory for a kernel thread's stack");
      f.stack = static_cast<char*>(m) + kGuard;
    }
    context_init(f.ctx, f.stack, kStackBytes, fiber_entry);
    f.state = State::Ready;
    f.tid = uint3{unsigned(i % g.block.x), unsigned(i / g.block.x % g.block.y),
                  unsigned(i / (g.block.x * g.block.y))};
  }
  const int warps = (n + 31) / 32;
  // Runs the ready lanes of warp w; returns whether they then all wait at a warp barrier, which
  // releases them.
  auto run_warp = [&](int w) {
    const int lo = w * 32, hi = std::min(n, lo + 32);
    for (int k = lo; k < hi; ++k) {
      const int i = g.reverse ? lo + hi - 1 - k : k;
      if (g.fibers[i].state != State::Ready) continue;
      g.current = i;
      g.tid = g.fibers[i].tid;
      context_switch(g.sched, g.fibers[i].ctx);
    }
    int live = 0, waiting = 0;
    for (int i = lo; i < hi; ++i) {
      live += g.fibers[i].state != State::Done;
      waiting += g.fibers[i].state == State::AtWarp;
    }
    if (live == 0 || waiting != live) return false;
    for (int i = lo; i < hi; ++i)
      if (g.fibers[i].state == State::AtWarp) g.fibers[i].state = State::Ready;
    return true;
  };
  for (;;) {
    // In step (the default and reverse orders), every warp advances to its next barrier before
    // any goes on; warps ahead lets each warp run on to its next block barrier before the next
    // warp starts, so a race between warps across warp-level steps shows too.
    bool released = false;
    for (int k = 0; k < warps; ++k) {
      const int w = g.reverse ? warps - 1 - k : k;
      if (g.warps_ahead)
        while (run_warp(w)) {
        }
      else released = run_warp(w) || released;
    }
    int done = 0, at_block = 0;
    for (int i = 0; i < n; ++i) {
      done += g.fibers[i].state == State::Done;
      at_block += g.fibers[i].state == State::AtBlock;
    }
    if (done == n) return;
    if (released) continue;
    if (at_block == n - done) {
      bool any = false;
      for (int i = 0; i < n; ++i)
        if (g.fibers[i].state == State::AtBlock) {
          any = any || g.fibers[i].pred;
          g.fibers[i].state = State::Ready;
        }
      g.or_result = any;
      continue;
    }
    std::string why = "deadlock in block (" + std::to_string(g.bid.x) + "," +
                      std::to_string(g.bid.y) + "," + std::to_string(g.bid.z) + "):";
    for (int w = 0; w < warps; ++w) {
      why += " warp " + std::to_string(w) + " [";
      for (int i = w * 32; i < std::min(n, w * 32 + 32); ++i)
        why += std::string(i > w * 32 ? " " : "") + state_name(g.fibers[i].state);
      why += "]";
    }
    fatal(why);
  }
}

}  // namespace

namespace mg_emu {

const uint3& thread_idx() { return G().tid; }
const uint3& block_idx() { return G().bid; }
const dim3& block_dim() { return G().block; }
const dim3& grid_dim() { return G().grid; }
void* dynamic_smem() { return G().smem; }
void* shared_storage(const void* key, size_t bytes) {
  Grid& g = G();
  auto it = g.shared.find(key);
  if (it == g.shared.end()) {
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes) != 0) fatal("no memory for a __shared__ array");
    it = g.shared.emplace(key, Grid::Shared{p, bytes, ~uint64_t(0)}).first;
  }
  Grid::Shared& sh = it->second;
  if (sh.bytes != bytes) fatal("a __shared__ array changed size");
  if (sh.block != g.block_serial) {
    std::memset(sh.p, 0xff, bytes);
    sh.block = g.block_serial;
  }
  return sh.p;
}
void sync_block() { wait_here(State::AtBlock); }
bool sync_block_or(bool pred) {
  Grid& g = G();
  if (g.fiber_mode) g.fibers[g.current].pred = pred;
  wait_here(State::AtBlock);
  return g.or_result;
}
void sync_warp() { wait_here(State::AtWarp); }
int lane_id() { return linear(G().tid, G().block) % 32; }
uint64_t* warp_slots() { return G().slots[linear(G().tid, G().block) / 32]; }

void run_grid(dim3 grid, dim3 block, size_t smem, void (*body)(void*), void* ctx) {
  nccl_drain();  // the stream's NCCL calls come first
  Grid& g = G();
  std::lock_guard<std::mutex> lock(g.mu);
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > uint64_t(kMaxThreads) || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (smem > size_t(kSmemOptin)) {
    set_last_error(cudaErrorInvalidValue);
    return;
  }
  g.grid = grid;
  g.block = block;
  g.body = body;
  g.ctx = ctx;
  g.smem_store.assign(smem + 128, 0xff);  // poisoned: shared memory starts undefined
  g.smem = g.smem_store.data() + (128 - reinterpret_cast<uintptr_t>(g.smem_store.data()) % 128);
  g.barrier_seen = false;
  const int n = int(threads);
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  for (uint64_t k = 0; k < blocks; ++k) {
    const uint64_t b = g.reverse ? blocks - 1 - k : k;
    g.bid = uint3{unsigned(b % grid.x), unsigned(b / grid.x % grid.y),
                  unsigned(b / (uint64_t(grid.x) * grid.y))};
    ++g.block_serial;
    if (smem && k > 0) std::fill(g.smem_store.begin(), g.smem_store.end(), 0xff);
    // The first block runs on fibers; when none of its threads met a barrier, the kernel has
    // none and the other blocks run thread after thread on this stack.
    g.fiber_mode = k == 0 || g.barrier_seen;
    if (g.fiber_mode) {
      run_block_fibers(g, n);
    } else {
      for (int j = 0; j < n; ++j) {
        const int i = g.reverse ? n - 1 - j : j;
        g.tid = uint3{unsigned(i % block.x), unsigned(i / block.x % block.y),
                      unsigned(i / (block.x * block.y))};
        body(ctx);
      }
    }
  }
}

}  // namespace mg_emu
