#include "comm/communicator.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "tensor/device_runtime.h"

namespace mg {

namespace {

// out = in, wherever each lives (GPU buffers under --device cuda).
void move(void* out, const void* in, size_t bytes) {
  runtime::copy(out, runtime::where(out), in, runtime::where(in), bytes);
}

class Done : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SelfCommunicator : public Communicator {
 public:
  std::unique_ptr<CommRequest> iall_reduce(void*, int64_t, DType t) override {
    check_reducible(t);
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommRequest> ireduce_scatter(const void* in, void* out, int64_t n,
                                               DType t) override {
    reduce_scatter(in, out, n, t);
    return std::make_unique<Done>();
  }
  std::unique_ptr<CommRequest> iall_gather(const void* in, void* out, int64_t n, DType t) override {
    move(out, in, size_t(n) * dtype_size(t));
    return std::make_unique<Done>();
  }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(void*, int64_t, ReduceOp op, DType t) override { check_reducible(t, op); }
  void reduce_scatter(const void* in, void* out, int64_t n, DType t) override {
    check_reducible(t);
    move(out, in, size_t(n) * dtype_size(t));
  }
  void all_gather(const void* in, void* out, int64_t n, DType t) override {
    move(out, in, size_t(n) * dtype_size(t));
  }
  void broadcast(float*, int64_t, int) override {}
  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    move(out, in, size_t(n) * dtype_size(t));
  }
  void all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                    const int64_t* recv_counts, DType t) override {
    check_all_to_all_v(*this, send_counts, recv_counts);
    move(out, in, size_t(send_counts[0]) * dtype_size(t));
  }
  void batch_isend_irecv(const std::vector<P2POp>& ops) override {
    MG_CHECK(ops.empty(), "point-to-point transfer in a group of one rank");
  }
  void barrier() override {}
};

}  // namespace

namespace {
class CompletedRequest : public CommRequest {
 public:
  void wait() override {}
  bool test() override { return true; }
};
}  // namespace

std::unique_ptr<CommRequest> Communicator::exchange(const std::vector<P2POp>& ops) {
  batch_isend_irecv(ops);
  return std::make_unique<CompletedRequest>();
}

void check_reducible(DType dtype, ReduceOp op) {
  MG_CHECK(dtype == DType::F32 || (dtype == DType::BF16 && op == ReduceOp::Sum), "reduction of ",
           dtype_name(dtype), op == ReduceOp::Max ? " (max)" : " (sum)",
           ": the communicators reduce f32, and bf16 sums");
}

int64_t check_all_to_all_v(const Communicator& comm, const int64_t* send_counts,
                           const int64_t* recv_counts) {
  const int me = comm.rank();
  int64_t to_others = 0;
  for (int j = 0; j < comm.size(); ++j) {
    MG_CHECK(send_counts[j] >= 0 && recv_counts[j] >= 0, "all-to-all-v counts for rank ", j,
             " are negative (send ", send_counts[j], ", receive ", recv_counts[j], ")");
    if (j != me) to_others = checked_add(to_others, send_counts[j], "all-to-all-v elements");
  }
  MG_CHECK(send_counts[me] == recv_counts[me], "all-to-all-v: rank ", me, " sends itself ",
           send_counts[me], " elements but expects ", recv_counts[me]);
  return to_others;
}

std::vector<int64_t> chunk_offsets(const int64_t* counts, int n) {
  std::vector<int64_t> offsets(size_t(n), 0);
  for (int j = 1; j < n; ++j)
    offsets[size_t(j)] = checked_add(offsets[size_t(j - 1)], counts[j - 1], "all-to-all-v offsets");
  return offsets;
}

double all_reduce_sum(Communicator& comm, double value) {
  float parts[2] = {float(value), float(value - double(float(value)))};
  comm.all_reduce(parts, 2);
  return double(parts[0]) + double(parts[1]);
}

std::unique_ptr<Communicator> make_self_communicator() {
  return std::make_unique<SelfCommunicator>();
}

}  // namespace mg
