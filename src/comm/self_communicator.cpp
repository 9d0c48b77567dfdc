#include "comm/communicator.h"
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
  std::unique_ptr<CommRequest> iall_gather(const void* in, void* out, int64_t n,
                                           DType t) override {
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
  MG_CHECK(dtype == DType::F32 || (dtype == DType::BF16 && op == ReduceOp::Sum),
           "reduction of ", dtype_name(dtype), op == ReduceOp::Max ? " (max)" : " (sum)",
           ": the communicators reduce f32, and bf16 sums");
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
