// Communicator over NCCL (see nccl_communicator.h). Non-blocking calls record a CUDA event after
// the collective; wait() synchronizes on it. NCCL moves any buffer in one call, so unlike MPI
// no count limit applies; point-to-point batches are one ncclGroupStart/End.
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "comm/mpi_split.h"
#include "comm/nccl_communicator.h"
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

class EventRequest : public CommRequest {
 public:
  EventRequest() {
    MG_CUDA_CHECK(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming));
    MG_CUDA_CHECK(cudaEventRecord(ev_, stream()));
  }
  ~EventRequest() override {
    cudaEventSynchronize(ev_);
    cudaEventDestroy(ev_);
  }
  void wait() override { MG_CUDA_CHECK(cudaEventSynchronize(ev_)); }
  bool test() override {
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaErrorNotReady) return false;
    MG_CUDA_CHECK(e);
    return true;
  }

 private:
  cudaEvent_t ev_ = nullptr;
};

class NcclCommunicator : public Communicator {
 public:
  // Takes ownership of comm (an MPI communicator of this group's ranks).
  explicit NcclCommunicator(MPI_Comm comm) : mpi_(comm) {
    MPI_Comm_rank(mpi_, &rank_);
    MPI_Comm_size(mpi_, &size_);
    ncclUniqueId id{};
    if (rank_ == 0) MG_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, mpi_);
    MG_NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream());
    ncclCommDestroy(nccl_);
    MPI_Comm_free(&mpi_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(float* data, int64_t n, ReduceOp op) override {
    if (size_ == 1 || n == 0) return;
    MG_NCCL_CHECK(ncclAllReduce(data, data, size_t(n), ncclFloat32,
                                op == ReduceOp::Sum ? ncclSum : ncclMax, nccl_, stream()));
    runtime::synchronize();
    stats_.all_reduce_bytes += 2 * (size_ - 1) * n * 4 / size_;
  }
  std::unique_ptr<CommRequest> iall_reduce(float* data, int64_t n) override {
    if (size_ > 1 && n > 0) {
      MG_NCCL_CHECK(ncclAllReduce(data, data, size_t(n), ncclFloat32, ncclSum, nccl_, stream()));
      stats_.all_reduce_bytes += 2 * (size_ - 1) * n * 4 / size_;
    }
    return std::make_unique<EventRequest>();
  }
  std::unique_ptr<CommRequest> ireduce_scatter(const float* in, float* out,
                                               int64_t n_out) override {
    queue_reduce_scatter(in, out, n_out);
    return std::make_unique<EventRequest>();
  }
  std::unique_ptr<CommRequest> iall_gather(const void* in, void* out, int64_t n_in,
                                           DType t) override {
    queue_all_gather(in, out, n_in, t);
    return std::make_unique<EventRequest>();
  }
  void reduce_scatter(const float* in, float* out, int64_t n_out) override {
    queue_reduce_scatter(in, out, n_out);
    runtime::synchronize();
  }
  void all_gather(const void* in, void* out, int64_t n_in, DType t) override {
    queue_all_gather(in, out, n_in, t);
    runtime::synchronize();
  }
  void broadcast(float* data, int64_t n, int root) override {
    if (size_ == 1 || n == 0) return;
    MG_NCCL_CHECK(ncclBroadcast(data, data, size_t(n), ncclFloat32, root, nccl_, stream()));
    runtime::synchronize();
    if (rank_ == root) stats_.broadcast_bytes += n * 4;
  }
  void batch_isend_irecv(const std::vector<P2POp>& ops) override {
    MG_NCCL_CHECK(ncclGroupStart());
    for (const P2POp& op : ops) {
      MG_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_, "bad p2p peer ", op.peer);
      if (op.is_send) {
        MG_NCCL_CHECK(ncclSend(op.data, size_t(op.n), ncclFloat32, op.peer, nccl_, stream()));
        stats_.p2p_bytes += op.n * 4;
      } else {
        MG_NCCL_CHECK(ncclRecv(op.data, size_t(op.n), ncclFloat32, op.peer, nccl_, stream()));
      }
    }
    MG_NCCL_CHECK(ncclGroupEnd());
    runtime::synchronize();
  }
  void barrier() override {
    runtime::synchronize();
    MPI_Barrier(mpi_);
  }

 private:
  void queue_reduce_scatter(const float* in, float* out, int64_t n_out) {
    if (size_ == 1) {
      runtime::copy(out, Device::CUDA, in, Device::CUDA, size_t(n_out) * sizeof(float));
      return;
    }
    MG_NCCL_CHECK(ncclReduceScatter(in, out, size_t(n_out), ncclFloat32, ncclSum, nccl_, stream()));
    stats_.reduce_scatter_bytes += (size_ - 1) * n_out * 4;
  }
  void queue_all_gather(const void* in, void* out, int64_t n_in, DType t) {
    if (size_ == 1) {
      runtime::copy(out, Device::CUDA, in, Device::CUDA, size_t(n_in) * dtype_size(t));
      return;
    }
    MG_NCCL_CHECK(ncclAllGather(in, out, size_t(n_in), nccl_type(t), nccl_, stream()));
    stats_.all_gather_bytes += (size_ - 1) * n_in * int64_t(dtype_size(t));
  }

  MPI_Comm mpi_;
  ncclComm_t nccl_ = nullptr;
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
  return std::make_unique<NcclCommunicator>(comm);
}

std::unique_ptr<Communicator> nccl_group(const std::vector<std::vector<int>>& groups) {
  MPI_Comm comm = split_world(groups);
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<NcclCommunicator>(comm);
}

}  // namespace mg
