// Communicator over NCCL (see nccl_communicator.h). Every call records a CUDA event after its
// collective; a wait polls that event (and NCCL's asynchronous error) within
// --distributed-timeout-minutes, and past it aborts the NCCL communicator (ncclCommAbort) and
// reports (comm/watchdog.h). NCCL moves any buffer in one call, so unlike MPI no count limit
// applies; point-to-point batches are one ncclGroupStart/End.
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "comm/mpi_split.h"
#include "comm/nccl_communicator.h"
#include "comm/nccl_watchdog.h"
#include "comm/watchdog.h"
#include "core/cuda_check.h"
#include "tensor/device_runtime.h"

#define MG_NCCL_CHECK(call)                                                              \
  do {                                                                                   \
    const ncclResult_t mg_nccl_r = (call);                                               \
    MG_CHECK(mg_nccl_r == ncclSuccess, #call, ": ", ncclGetErrorString(mg_nccl_r));      \
  } while (0)

namespace mg {

namespace {

// The compute stream every collective is queued on (tensor/device_runtime.h: the CUDA
// backend's, registered by ops::set_device).
cudaStream_t stream() { return static_cast<cudaStream_t>(runtime::stream()); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: MG_CHECK(false, "NCCL transfer of dtype ", dtype_name(t));
  }
  return ncclFloat32;
}

// Whether the work queued before ev is done; stops on an asynchronous NCCL error, and reports
// a timeout the watchdog thread found (it may have aborted this very communicator).
bool finished(cudaEvent_t ev, ncclComm_t comm, const char* op) {
  nccl_watchdog::check();
  const cudaError_t e = cudaEventQuery(ev);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) MG_CUDA_CHECK(e);
  ncclResult_t async = ncclSuccess;
  MG_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
  MG_CHECK(async == ncclSuccess, "NCCL ", op, " failed: ", ncclGetErrorString(async));
  return false;
}

// Waits for ev within the deadline; past it aborts comm (so no NCCL kernel keeps the GPU) and
// reports. p2p: the batch's transfers, for the report.
void wait_event(cudaEvent_t ev, ncclComm_t comm, const char* op, const GroupInfo& group,
                const std::vector<P2POp>* p2p = nullptr) {
  if (finished(ev, comm, op)) return;
  WaitSite site{op, &group, {}, {}};
  if (p2p)
    for (const P2POp& o : *p2p) site.peers.push_back({o.is_send, o.peer});
  BoundedWait w(site);
  while (!finished(ev, comm, op))
    if (w.pause()) {
      nccl_watchdog::abort(comm);
      w.timed_out();
    }
}

// A non-blocking call: the main thread polls it when it waits; until then the watchdog thread
// watches it.
class EventRequest : public CommRequest {
 public:
  EventRequest(ncclComm_t comm, const char* op, const GroupInfo& group)
      : comm_(comm), op_(op), group_(group) {
    MG_CUDA_CHECK(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming));
    MG_CUDA_CHECK(cudaEventRecord(ev_, stream()));
    watch_id_ = nccl_watchdog::watch(ev_, comm_, op_, &group_);
  }
  ~EventRequest() override {
    if (!done_) wait_event(ev_, comm_, op_, group_);
    nccl_watchdog::forget(watch_id_);
    cudaEventDestroy(ev_);
  }
  void wait() override {
    wait_event(ev_, comm_, op_, group_);
    done_ = true;
  }
  bool test() override { return done_ = done_ || finished(ev_, comm_, op_); }

 private:
  cudaEvent_t ev_ = nullptr;
  ncclComm_t comm_;
  const char* op_;
  const GroupInfo& group_;
  uint64_t watch_id_ = 0;
  bool done_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  // Takes ownership of comm (an MPI communicator of this group's ranks).
  NcclCommunicator(MPI_Comm comm, GroupInfo group) : mpi_(comm), group_(std::move(group)) {
    MPI_Comm_rank(mpi_, &rank_);
    MPI_Comm_size(mpi_, &size_);
    ncclUniqueId id{};
    if (rank_ == 0) MG_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Request r;
    MPI_Ibcast(&id, int(sizeof(id)), MPI_BYTE, 0, mpi_, &r);
    wait_mpi(&r, 1, "NCCL set-up", group_);
    MG_NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
    MG_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream());
    cudaEventDestroy(done_);
    ncclCommDestroy(nccl_);
    MPI_Comm_free(&mpi_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(void* data, int64_t n, ReduceOp op, DType t) override {
    if (!queue_all_reduce(data, n, op, t)) return;
    finish("all-reduce");
  }
  std::unique_ptr<CommRequest> iall_reduce(void* data, int64_t n, DType t) override {
    queue_all_reduce(data, n, ReduceOp::Sum, t);
    return std::make_unique<EventRequest>(comm(), "all-reduce", group_);
  }
  std::unique_ptr<CommRequest> ireduce_scatter(const void* in, void* out, int64_t n_out,
                                               DType t) override {
    queue_reduce_scatter(in, out, n_out, t);
    return std::make_unique<EventRequest>(comm(), "reduce-scatter", group_);
  }
  std::unique_ptr<CommRequest> iall_gather(const void* in, void* out, int64_t n_in,
                                           DType t) override {
    queue_all_gather(in, out, n_in, t);
    return std::make_unique<EventRequest>(comm(), "all-gather", group_);
  }
  void reduce_scatter(const void* in, void* out, int64_t n_out, DType t) override {
    queue_reduce_scatter(in, out, n_out, t);
    finish("reduce-scatter");
  }
  void all_gather(const void* in, void* out, int64_t n_in, DType t) override {
    queue_all_gather(in, out, n_in, t);
    finish("all-gather");
  }
  void broadcast(float* data, int64_t n, int root) override {
    if (size_ == 1 || n == 0) return;
    MG_NCCL_CHECK(ncclBroadcast(data, data, size_t(n), ncclFloat32, root, comm(), stream()));
    finish("broadcast");
    if (rank_ == root) stats_.broadcast_bytes += n * 4;
  }
  // One send and one receive per peer in one group; this rank's own chunk is a device copy.
  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    const size_t chunk = size_t(n) * dtype_size(t);
    const auto* src = static_cast<const char*>(in);
    auto* dst = static_cast<char*>(out);
    runtime::copy(dst + rank_ * chunk, Device::CUDA, src + rank_ * chunk, Device::CUDA, chunk);
    if (size_ == 1 || n == 0) return;
    MG_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      MG_NCCL_CHECK(ncclSend(src + peer * chunk, size_t(n), nccl_type(t), peer, comm(), stream()));
      MG_NCCL_CHECK(ncclRecv(dst + peer * chunk, size_t(n), nccl_type(t), peer, comm(), stream()));
    }
    MG_NCCL_CHECK(ncclGroupEnd());
    finish("all-to-all");
    stats_.all_to_all_bytes += (size_ - 1) * n * int64_t(dtype_size(t));
  }
  // One send and one receive per peer with a non-empty chunk, in one group; this rank's own
  // chunk is a device copy. (A zero count on one side is a zero count on the other.)
  void all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                    const int64_t* recv_counts, DType t) override {
    const int64_t to_others = check_all_to_all_v(*this, send_counts, recv_counts);
    const std::vector<int64_t> send_at = chunk_offsets(send_counts, size_),
                               recv_at = chunk_offsets(recv_counts, size_);
    const size_t e = dtype_size(t);
    const auto* src = static_cast<const char*>(in);
    auto* dst = static_cast<char*>(out);
    if (send_counts[rank_] > 0)
      runtime::copy(dst + recv_at[rank_] * e, Device::CUDA, src + send_at[rank_] * e,
                    Device::CUDA, size_t(send_counts[rank_]) * e);
    bool peers = false;
    for (int peer = 0; peer < size_; ++peer)
      peers |= peer != rank_ && (send_counts[peer] > 0 || recv_counts[peer] > 0);
    if (!peers) return;
    MG_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (send_counts[peer] > 0)
        MG_NCCL_CHECK(ncclSend(src + send_at[peer] * e, size_t(send_counts[peer]), nccl_type(t),
                               peer, comm(), stream()));
      if (recv_counts[peer] > 0)
        MG_NCCL_CHECK(ncclRecv(dst + recv_at[peer] * e, size_t(recv_counts[peer]), nccl_type(t),
                               peer, comm(), stream()));
    }
    MG_NCCL_CHECK(ncclGroupEnd());
    finish("all-to-all-v");
    stats_.all_to_all_bytes += to_others * int64_t(e);
  }
  void batch_isend_irecv(const std::vector<P2POp>& ops) override {
    MG_NCCL_CHECK(ncclGroupStart());
    for (const P2POp& op : ops) {
      MG_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_, "bad p2p peer ", op.peer);
      if (op.is_send) {
        MG_NCCL_CHECK(ncclSend(op.data, size_t(op.n), ncclFloat32, op.peer, comm(), stream()));
        stats_.p2p_bytes += op.n * 4;
      } else {
        MG_NCCL_CHECK(ncclRecv(op.data, size_t(op.n), ncclFloat32, op.peer, comm(), stream()));
      }
    }
    MG_NCCL_CHECK(ncclGroupEnd());
    finish("send/recv", &ops);
  }
  void barrier() override {
    finish("barrier");
    MPI_Request r;
    MPI_Ibarrier(mpi_, &r);
    wait_mpi(&r, 1, "barrier", group_);
  }

 private:
  // Waits for everything queued so far on the stream (the blocking calls' contract).
  void finish(const char* op, const std::vector<P2POp>* p2p = nullptr) {
    MG_CUDA_CHECK(cudaEventRecord(done_, stream()));
    wait_event(done_, comm(), op, group_, p2p);
  }
  // The NCCL communicator, for a new call: never one the watchdog thread aborted.
  ncclComm_t comm() const {
    nccl_watchdog::check();
    return nccl_;
  }

  // NCCL's bf16 sum rounds each partial sum to bf16 (communicator.h).
  // Whether anything was queued.
  bool queue_all_reduce(void* data, int64_t n, ReduceOp op, DType t) {
    check_reducible(t, op);
    if (size_ == 1 || n == 0) return false;
    MG_NCCL_CHECK(ncclAllReduce(data, data, size_t(n), nccl_type(t),
                                op == ReduceOp::Sum ? ncclSum : ncclMax, comm(), stream()));
    stats_.all_reduce_bytes += 2 * (size_ - 1) * n * int64_t(dtype_size(t)) / size_;
    return true;
  }
  void queue_reduce_scatter(const void* in, void* out, int64_t n_out, DType t) {
    check_reducible(t);
    if (size_ == 1) {
      runtime::copy(out, Device::CUDA, in, Device::CUDA, size_t(n_out) * dtype_size(t));
      return;
    }
    MG_NCCL_CHECK(
        ncclReduceScatter(in, out, size_t(n_out), nccl_type(t), ncclSum, comm(), stream()));
    stats_.reduce_scatter_bytes += (size_ - 1) * n_out * int64_t(dtype_size(t));
  }
  void queue_all_gather(const void* in, void* out, int64_t n_in, DType t) {
    if (size_ == 1) {
      runtime::copy(out, Device::CUDA, in, Device::CUDA, size_t(n_in) * dtype_size(t));
      return;
    }
    MG_NCCL_CHECK(ncclAllGather(in, out, size_t(n_in), nccl_type(t), comm(), stream()));
    stats_.all_gather_bytes += (size_ - 1) * n_in * int64_t(dtype_size(t));
  }

  MPI_Comm mpi_;
  GroupInfo group_;
  ncclComm_t nccl_ = nullptr;
  cudaEvent_t done_ = nullptr;  // recorded after each blocking call's work
  int rank_ = 0, size_ = 1;
};

}  // namespace

void check_one_gpu_per_rank() {
  constexpr int kIdLen = 32;
  int dev = 0;
  MG_CUDA_CHECK(cudaGetDevice(&dev));
  char id[kIdLen] = {};
  MG_CUDA_CHECK(cudaDeviceGetPCIBusId(id, kIdLen, dev));
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  std::vector<char> all(size_t(n) * kIdLen);
  MPI_Allgather(id, kIdLen, MPI_CHAR, all.data(), kIdLen, MPI_CHAR, node);
  MPI_Comm_free(&node);
  std::set<std::string> seen;
  for (int r = 0; r < n; ++r) seen.insert(std::string(&all[size_t(r) * kIdLen]));
  MG_USER_CHECK(int(seen.size()) == n, "--distributed-backend nccl needs a GPU per rank, but "
                "this node's ", n, " ranks share ", seen.size(), " GPU(s); start fewer ranks "
                "per node, or pass --distributed-backend mpi (GPU buffers staged through the "
                "host; ranks may share a GPU)");
}

std::unique_ptr<Communicator> nccl_world() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_unique<NcclCommunicator>(comm, world_group_info());
}

std::unique_ptr<Communicator> nccl_group(const std::vector<std::vector<int>>& groups,
                                         const std::string& name) {
  MPI_Comm comm = split_world(groups);
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<NcclCommunicator>(comm, GroupInfo{name, my_group(groups)});
}

}  // namespace mg
