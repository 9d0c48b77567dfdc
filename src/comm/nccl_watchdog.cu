// The NCCL watchdog thread of comm/nccl_watchdog.h. It calls no MPI (the main thread does, under
// MPI_THREAD_FUNNELED): it only queries events and aborts communicators; the report, with its
// census over MPI, is the main thread's, at its next NCCL call.
#include "comm/nccl_watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace mg::nccl_watchdog {

namespace {

using Clock = std::chrono::steady_clock;

struct Work {
  cudaEvent_t ev;
  ncclComm_t comm;
  const char* op;
  const GroupInfo* group;
  Clock::time_point since;
};

class Watchdog {
 public:
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  uint64_t watch(const Work& w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    work_[++next_id_] = w;
    return next_id_;
  }
  void forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    work_.erase(id);
  }
  void abort(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mu_);
    abort_locked(comm);
  }
  void check() {
    if (!aborted_.load(std::memory_order_acquire)) return;
    WaitSite site{aborted_work_.op, aborted_work_.group, {}, {}};
    report_timeout(site, std::chrono::duration<double>(Clock::now() - aborted_work_.since).count());
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ && !aborted_) {
      const double period = std::clamp(comm_timeout() / 10, 0.02, 1.0);
      wake_.wait_for(lock, std::chrono::duration<double>(period));
      for (const auto& [id, w] : work_) {
        const double age = std::chrono::duration<double>(Clock::now() - w.since).count();
        if (age <= comm_timeout() || cudaEventQuery(w.ev) != cudaErrorNotReady) continue;
        abort_locked(w.comm);
        aborted_work_ = w;
        aborted_.store(true, std::memory_order_release);
        break;
      }
    }
  }

  void abort_locked(ncclComm_t comm) {
    if (aborted_comms_.insert(comm).second) ncclCommAbort(comm);
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::set<ncclComm_t> aborted_comms_;
  std::map<uint64_t, Work> work_;
  uint64_t next_id_ = 0;
  bool stop_ = false;
  std::atomic<bool> aborted_{false};
  Work aborted_work_{};  // written before aborted_ is set, read after
  std::thread thread_;
};

Watchdog& dog() {
  static Watchdog d;
  return d;
}

}  // namespace

uint64_t watch(cudaEvent_t ev, ncclComm_t comm, const char* op, const GroupInfo* group) {
  return dog().watch({ev, comm, op, group, Clock::now()});
}
void forget(uint64_t id) { dog().forget(id); }
void abort(ncclComm_t comm) { dog().abort(comm); }
void check() { dog().check(); }

}  // namespace mg::nccl_watchdog
