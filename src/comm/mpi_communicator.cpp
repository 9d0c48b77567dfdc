#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm/mpi_bf16.h"
#include "comm/mpi_split.h"
#include "comm/watchdog.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "tensor/bf16.h"

namespace mg {

namespace {

void check_mpi(int rc, const char* what) {
  MG_CHECK(rc == MPI_SUCCESS, "MPI call ", what, " failed with code ", rc);
}

// MPI counts are ints: larger transfers would silently wrap.
int count(int64_t n) {
  MG_CHECK(n >= 0 && n <= INT_MAX, "MPI transfer of ", n, " elements exceeds INT_MAX");
  return int(n);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;  // gathers only move bits
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

// The MPI type and op of a reduction (check_reducible: F32, or BF16 sum).
MPI_Datatype reduce_type(DType t) { return t == DType::BF16 ? mpi_bf16_sum().type : MPI_FLOAT; }
MPI_Op reduce_op(DType t, ReduceOp op) {
  check_reducible(t, op);
  if (t == DType::BF16) return mpi_bf16_sum().op;
  return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
}

class MpiRequest : public CommRequest {
 public:
  MpiRequest(const char* op, const GroupInfo& group) : op_(op), group_(group) {}
  ~MpiRequest() override {
    if (req_ != MPI_REQUEST_NULL) wait_mpi(&req_, 1, op_, group_);
  }
  // A wait that throws (the timeout) abandons the request: the destructor must not wait on it
  // again while the exception unwinds.
  void wait() override {
    MPI_Request r = req_;
    req_ = MPI_REQUEST_NULL;
    wait_mpi(&r, 1, op_, group_);
  }
  bool test() override {
    int done = 0;
    check_mpi(MPI_Test(&req_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  MPI_Request req_ = MPI_REQUEST_NULL;

 private:
  const char* op_;
  const GroupInfo& group_;
};

// Point-to-point sends in flight (MpiCommunicator::exchange).
class MpiRequests : public CommRequest {
 public:
  MpiRequests(const char* op, const GroupInfo& group) : op_(op), group_(group) {}
  // Waits for the sends (their buffers are freed after); a wait that fails while an exception
  // unwinds ends the process as every other timed-out wait does, never with a second throw.
  ~MpiRequests() override {
    try {
      if (!reqs_.empty()) wait_mpi(reqs_.data(), int(reqs_.size()), op_, group_, &ops_);
    } catch (...) {
    }
  }
  void wait() override {
    std::vector<MPI_Request> r;
    r.swap(reqs_);  // a wait that throws (the timeout) abandons them
    if (!r.empty()) wait_mpi(r.data(), int(r.size()), op_, group_, &ops_);
  }
  bool test() override {
    int done = 1;
    if (!reqs_.empty())
      check_mpi(MPI_Testall(int(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE),
                "MPI_Testall");
    return done != 0;
  }
  std::vector<MPI_Request> reqs_;
  std::vector<P2POp> ops_;

 private:
  const char* op_;
  const GroupInfo& group_;
};

class DoneRequest : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// Every collective is posted non-blocking and waited for within the deadline.
class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, GroupInfo group)
      : comm_(comm), owned_(owned), group_(std::move(group)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(void* data, int64_t n, ReduceOp op, DType t) override {
    iall_reduce_op(data, n, op, t)->wait();
  }
  std::unique_ptr<CommRequest> iall_reduce(void* data, int64_t n, DType t) override {
    return iall_reduce_op(data, n, ReduceOp::Sum, t);
  }
  std::unique_ptr<CommRequest> ireduce_scatter(const void* in, void* out, int64_t n_out,
                                               DType t) override {
    const MPI_Op op = reduce_op(t, ReduceOp::Sum);
    if (size_ == 1) {
      std::memcpy(out, in, size_t(n_out) * dtype_size(t));
      return std::make_unique<DoneRequest>();
    }
    auto r = std::make_unique<MpiRequest>("reduce-scatter", group_);
    check_mpi(MPI_Ireduce_scatter_block(in, out, count(n_out), reduce_type(t), op, comm_, &r->req_),
              "MPI_Ireduce_scatter_block");
    stats_.reduce_scatter_bytes += (size_ - 1) * n_out * int64_t(dtype_size(t));
    return r;
  }
  std::unique_ptr<CommRequest> iall_gather(const void* in, void* out, int64_t n_in,
                                           DType t) override {
    if (size_ == 1) {
      std::memcpy(out, in, size_t(n_in) * dtype_size(t));
      return std::make_unique<DoneRequest>();
    }
    auto r = std::make_unique<MpiRequest>("all-gather", group_);
    check_mpi(MPI_Iallgather(in, count(n_in), mpi_type(t), out, count(n_in), mpi_type(t), comm_,
                             &r->req_),
              "MPI_Iallgather");
    stats_.all_gather_bytes += (size_ - 1) * n_in * int64_t(dtype_size(t));
    return r;
  }
  void reduce_scatter(const void* in, void* out, int64_t n_out, DType t) override {
    ireduce_scatter(in, out, n_out, t)->wait();
  }
  void all_gather(const void* in, void* out, int64_t n_in, DType t) override {
    iall_gather(in, out, n_in, t)->wait();
  }
  void broadcast(float* data, int64_t n, int root) override {
    if (size_ == 1) return;
    MPI_Request r;
    check_mpi(MPI_Ibcast(data, count(n), MPI_FLOAT, root, comm_, &r), "MPI_Ibcast");
    wait_mpi(&r, 1, "broadcast", group_);
    if (rank_ == root) stats_.broadcast_bytes += n * 4;
  }
  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    if (size_ == 1) {
      std::memcpy(out, in, size_t(n) * dtype_size(t));
      return;
    }
    MPI_Request r;
    check_mpi(MPI_Ialltoall(in, count(n), mpi_type(t), out, count(n), mpi_type(t), comm_, &r),
              "MPI_Ialltoall");
    wait_mpi(&r, 1, "all-to-all", group_);
    stats_.all_to_all_bytes += (size_ - 1) * n * int64_t(dtype_size(t));
  }
  // MPI_Alltoallv's counts and offsets are ints: a chunk or offset past INT_MAX elements is
  // refused (count()) rather than wrapped.
  void all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                    const int64_t* recv_counts, DType t) override {
    const int64_t to_others = check_all_to_all_v(*this, send_counts, recv_counts);
    if (size_ == 1) {
      std::memcpy(out, in, size_t(send_counts[0]) * dtype_size(t));
      return;
    }
    const std::vector<int64_t> send_at = chunk_offsets(send_counts, size_),
                               recv_at = chunk_offsets(recv_counts, size_);
    const size_t p = size_t(size_);
    std::vector<int> sc(p), sd(p), rc(p), rd(p);
    for (size_t j = 0; j < sc.size(); ++j) {
      sc[j] = count(send_counts[j]);
      sd[j] = count(send_at[j]);
      rc[j] = count(recv_counts[j]);
      rd[j] = count(recv_at[j]);
    }
    MPI_Request r;
    check_mpi(MPI_Ialltoallv(in, sc.data(), sd.data(), mpi_type(t), out, rc.data(), rd.data(),
                             mpi_type(t), comm_, &r),
              "MPI_Ialltoallv");
    wait_mpi(&r, 1, "all-to-all-v", group_);
    stats_.all_to_all_bytes += checked_mul(to_others, int64_t(dtype_size(t)), "all-to-all-v bytes");
  }
  void batch_isend_irecv(const std::vector<P2POp>& ops) override {
    std::vector<MPI_Request> reqs(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& op = ops[i];
      MG_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_, "bad p2p peer ", op.peer);
      if (op.is_send) {
        check_mpi(MPI_Isend(op.data, count(op.n), MPI_FLOAT, op.peer, op.tag, comm_, &reqs[i]),
                  "MPI_Isend");
        stats_.p2p_bytes += op.n * 4;
      } else {
        check_mpi(MPI_Irecv(op.data, count(op.n), MPI_FLOAT, op.peer, op.tag, comm_, &reqs[i]),
                  "MPI_Irecv");
      }
    }
    wait_mpi(reqs.data(), int(reqs.size()), "send/recv", group_, &ops);
  }
  std::unique_ptr<CommRequest> exchange(const std::vector<P2POp>& ops) override {
    std::vector<MPI_Request> recvs;
    std::vector<P2POp> recv_ops, send_ops;
    auto sends = std::make_unique<MpiRequests>("send", group_);
    for (const P2POp& op : ops) {
      MG_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_, "bad p2p peer ", op.peer);
      if (op.is_send) {
        sends->reqs_.push_back(MPI_REQUEST_NULL);
        check_mpi(MPI_Isend(op.data, count(op.n), MPI_FLOAT, op.peer, op.tag, comm_,
                            &sends->reqs_.back()),
                  "MPI_Isend");
        stats_.p2p_bytes += op.n * 4;
        send_ops.push_back(op);
      } else {
        recvs.push_back(MPI_REQUEST_NULL);
        check_mpi(MPI_Irecv(op.data, count(op.n), MPI_FLOAT, op.peer, op.tag, comm_, &recvs.back()),
                  "MPI_Irecv");
        recv_ops.push_back(op);
      }
    }
    if (!recvs.empty()) wait_mpi(recvs.data(), int(recvs.size()), "send/recv", group_, &recv_ops);
    sends->ops_ = std::move(send_ops);
    return sends;
  }
  void barrier() override {
    MPI_Request r;
    check_mpi(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    wait_mpi(&r, 1, "barrier", group_);
  }

 private:
  std::unique_ptr<CommRequest> iall_reduce_op(void* data, int64_t n, ReduceOp op, DType t) {
    const MPI_Op mpi_op = reduce_op(t, op);
    if (size_ == 1 || n == 0) return std::make_unique<DoneRequest>();
    auto r = std::make_unique<MpiRequest>("all-reduce", group_);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, count(n), reduce_type(t), mpi_op, comm_, &r->req_),
              "MPI_Iallreduce");
    stats_.all_reduce_bytes += 2 * (size_ - 1) * n * int64_t(dtype_size(t)) / size_;
    return r;
  }

  MPI_Comm comm_;
  bool owned_;
  GroupInfo group_;
  int rank_ = 0, size_ = 1;
};

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16_from_f32(f32_from_bf16(a[i]) + f32_from_bf16(b[i]));
}

}  // namespace

const MpiBf16Sum& mpi_bf16_sum() {
  static const MpiBf16Sum cached = [] {
    MpiBf16Sum s;
    check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &s.type), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&s.type), "MPI_Type_commit");
    check_mpi(MPI_Op_create(&bf16_sum, /*commute=*/1, &s.op), "MPI_Op_create");
    return s;
  }();
  return cached;
}

// The wait's description is built only when the requests were not already complete.
void wait_mpi(MPI_Request* reqs, int n, const char* op, const GroupInfo& group,
              const std::vector<P2POp>* p2p) {
  int done = 0;
  check_mpi(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  if (done) return;
  WaitSite site{op, &group, {}, {}};
  if (p2p)
    for (const P2POp& o : *p2p) site.peers.push_back({o.is_send, o.peer});
  BoundedWait w(site);
  while (!done) {
    check_mpi(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done || !w.pause()) continue;
    if (p2p)  // name the transfers still pending
      for (int i = 0; i < n; ++i) {
        int flag = 0;
        MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        site.pending.push_back(flag == 0);
      }
    w.timed_out();
  }
}

MpiSession::MpiSession(int* argc, char*** argv) {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
                        std::getenv("PMIX_RANK") || std::getenv("MPI_LOCALNRANKS");
  if (!launched) return;
  active_ = true;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Every collective is non-blocking (bounded waits). Open MPI's libnbc runs an in-place
    // MPI_Iallreduce as a binomial tree, 1.5x to 2.5x slower than the blocking MPI_Allreduce
    // from 32K floats up on 2 ranks; its reduce-scatter + all-gather algorithm matches it
    // (docs/reliability.md). A value the user set wins; other MPIs ignore the variable.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    // Only the main thread calls MPI (the data loader's thread never does).
    MG_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI provides thread level ", provided,
             " < MPI_THREAD_FUNNELED");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  watchdog_start();
}

MpiSession::~MpiSession() {
  if (!active_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  watchdog_finish();
  MPI_Finalize();
}

void MpiSession::abort(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

namespace {
// This rank's place on its node: from MPI's shared-memory split when MPI runs (collective),
// else the launcher's variables.
struct NodePlace {
  int rank = 0, size = 1;
};
const NodePlace& node_place() {
  static const NodePlace cached = [] {
    NodePlace p;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &p.rank);
      MPI_Comm_size(node, &p.size);
      MPI_Comm_free(&node);
      return p;
    }
    for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
      if (const char* v = std::getenv(var)) {
        p.rank = std::atoi(v);
        break;
      }
    for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
      if (const char* v = std::getenv(var)) {
        p.size = std::max(1, std::atoi(v));
        break;
      }
    return p;
  }();
  return cached;
}
}  // namespace

int local_rank() { return node_place().rank; }
int local_size() { return node_place().size; }

std::unique_ptr<Communicator> mpi_world() {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false, world_group_info());
}

void mpi_broadcast_idle(std::vector<uint8_t>& bytes, int root) {
  static const MPI_Comm comm = [] {  // first used by every rank at the same point
    MPI_Comm c;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
    return c;
  }();
  auto wait = [](MPI_Request& r) {
    for (int done = 0;;) {
      check_mpi(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  };
  int me = 0;
  MPI_Comm_rank(comm, &me);
  int64_t n = me == root ? int64_t(bytes.size()) : 0;
  MPI_Request r;
  check_mpi(MPI_Ibcast(&n, 1, MPI_INT64_T, root, comm, &r), "MPI_Ibcast");
  wait(r);
  MG_CHECK(n >= 0 && n < (int64_t(1) << 31), "a broadcast command of ", n, " bytes");
  bytes.resize(size_t(n));
  if (n == 0) return;
  check_mpi(MPI_Ibcast(bytes.data(), int(n), MPI_BYTE, root, comm, &r), "MPI_Ibcast");
  wait(r);
}

MPI_Comm split_world(const std::vector<std::vector<int>>& groups) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int color = MPI_UNDEFINED, key = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto it = std::find(groups[g].begin(), groups[g].end(), me);
    if (it != groups[g].end()) {
      color = int(g);
      key = int(it - groups[g].begin());
    }
  }
  MPI_Comm comm;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "MPI_Comm_split");
  return comm;
}

std::vector<int> my_group(const std::vector<std::vector<int>>& groups) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  for (const std::vector<int>& g : groups)
    if (std::find(g.begin(), g.end(), me) != g.end()) return g;
  return {};
}

std::unique_ptr<Communicator> mpi_group(const std::vector<std::vector<int>>& groups,
                                        const std::string& name) {
  MPI_Comm comm = split_world(groups);
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(comm, true, GroupInfo{name, my_group(groups)});
}

}  // namespace mg
