// No hang, ever: every blocking wait of a communicator (MPI requests, NCCL's stream events) is a
// poll loop with a deadline (--distributed-timeout-minutes, process-wide) that also answers
// liveness probes. A wait past its deadline runs a census of all ranks over a private duplicate
// of MPI_COMM_WORLD (each live rank answers with what it waits on), reports the waiting rank, the
// operation, its group, and the ranks that do not answer, and ends the job with MPI_Abort.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mg {

// The job's exit code when a wait timed out.
constexpr int kCommTimeoutExitCode = 3;

// Every wait's limit in seconds, for the whole process (Megatron's default: 10 minutes).
void set_comm_timeout(double seconds);
double comm_timeout();
// How long a timed-out rank waits for the census answers: 10 % of the timeout, in [1 s, 30 s].
double census_grace();

// A process group as messages name it: "tensor-parallel", and its members' world ranks.
struct GroupInfo {
  std::string name;
  std::vector<int> world_ranks;
};
// The whole job (after watchdog_start()).
const GroupInfo& world_group_info();
// "[0,2]", runs collapsed ("[0-7,16]"), long lists cut short.
std::string format_ranks(const std::vector<int>& ranks);

// One peer of a wait on point-to-point transfers.
struct WaitPeer {
  bool is_send;
  int peer;  // rank within the group
};

// What a rank waits for: an operation over a group, or (ops == "send/recv") a batch of
// point-to-point transfers, of which `pending` flags the unfinished ones when known.
struct WaitSite {
  const char* op;
  const GroupInfo* group;
  std::vector<WaitPeer> peers;
  std::vector<bool> pending;
  // "all-reduce over the tensor-parallel group [0,1]", "recv from rank 2 (pipeline group [0,2])".
  std::string describe() const;
};

// The poll loop of one wait: busy, as MPI_Wait's (MPI's non-blocking collectives advance only
// while polled); once the wait is past 1 ms it also answers liveness probes. Usage:
// `BoundedWait w(site); while (!done()) if (w.pause()) w.timed_out();` (the caller may fill
// site.pending, or abort an NCCL communicator, before timed_out()).
class BoundedWait {
 public:
  explicit BoundedWait(WaitSite& site);
  ~BoundedWait();
  BoundedWait(const BoundedWait&) = delete;
  BoundedWait& operator=(const BoundedWait&) = delete;
  // Returns true once the deadline passed (the caller then calls timed_out()).
  bool pause();
  // Runs the census, reports and ends the job.
  [[noreturn]] void timed_out();
  double seconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  WaitSite& site_;
  const WaitSite* outer_;
  Clock::time_point start_;
  uint32_t polls_ = 0;
};

// Runs the census for a wait that lasted `waited` seconds, reports and ends the job.
[[noreturn]] void report_timeout(const WaitSite& site, double waited);

// Before anything waits (MpiSession, after MPI_Init; collective): the census communicator.
void watchdog_start();
// Before MPI_Finalize: a bounded barrier (a rank stopped at the very end cannot hang the
// others inside MPI_Finalize), then the census communicator is freed.
void watchdog_finish();
// How a timeout ends the process: by default the report on stderr, then
// MPI_Abort(kCommTimeoutExitCode). Tests of the watchdog itself install a handler that returns
// (it gets the report); the timed-out wait then throws std::runtime_error(report).
using TimeoutHandler = void (*)(const std::string& report);
void set_timeout_handler(TimeoutHandler handler);

}  // namespace mg
