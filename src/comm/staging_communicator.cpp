#include "comm/staging_communicator.h"

#include <vector>

#include "core/checked_math.h"
#include "tensor/device_runtime.h"

namespace mg {

namespace {

// A buffer in the inner communicator's memory holding a copy of (or room for) a caller's
// buffer that lives elsewhere; or, when the caller's buffer already lives there, that buffer.
class Staged {
 public:
  Staged(const void* user, size_t bytes, Device inner, bool copy_in)
      : user_(const_cast<void*>(user)), bytes_(bytes), inner_(inner) {
    if (!user || !bytes || runtime::where(user) == inner) return;
    user_device_ = runtime::where(user);
    own_ = runtime::alloc(bytes, inner);
    if (copy_in) runtime::copy(own_, inner, user, user_device_, bytes);
    if (inner == Device::CPU) runtime::synchronize();  // the host copy must be complete
  }
  ~Staged() {
    if (own_) runtime::release(own_, inner_);
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  void* get() const { return own_ ? own_ : user_; }
  // Copies the staged result back into the caller's buffer.
  void copy_out() {
    if (own_) runtime::copy(user_, user_device_, own_, inner_, bytes_);
  }

 private:
  void* user_;
  size_t bytes_;
  Device inner_;
  Device user_device_ = Device::CPU;
  void* own_ = nullptr;
};

// A non-blocking call in flight, its staged buffers, and the one to copy back when done.
class StagedRequest : public CommRequest {
 public:
  StagedRequest(std::unique_ptr<CommRequest> inner, std::vector<std::unique_ptr<Staged>> bufs,
                Staged* result)
      : bufs_(std::move(bufs)), inner_(std::move(inner)), result_(result) {}
  void wait() override {
    inner_->wait();
    finish();
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    if (done_) return;
    done_ = true;
    if (result_) result_->copy_out();
  }
  // Members go in reverse order: inner_ (whose destructor waits for the transfer) before the
  // staging buffers it reads and writes.
  std::vector<std::unique_ptr<Staged>> bufs_;
  std::unique_ptr<CommRequest> inner_;
  Staged* result_;
  bool done_ = false;
};

class StagingCommunicator : public Communicator {
 public:
  StagingCommunicator(std::unique_ptr<Communicator> inner, Device memory)
      : inner_(std::move(inner)), mem_(memory) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  void all_reduce(void* data, int64_t n, ReduceOp op, DType t) override {
    Staged d(data, bytes(n, t), mem_, true);
    counted([&] { inner_->all_reduce(d.get(), n, op, t); });
    d.copy_out();
  }
  std::unique_ptr<CommRequest> iall_reduce(void* data, int64_t n, DType t) override {
    auto d = std::make_unique<Staged>(data, bytes(n, t), mem_, true);
    Staged* result = d.get();
    std::unique_ptr<CommRequest> r;
    counted([&] { r = inner_->iall_reduce(d->get(), n, t); });
    return finish(std::move(r), std::move(d), nullptr, result);
  }
  std::unique_ptr<CommRequest> ireduce_scatter(const void* in, void* out, int64_t n_out,
                                               DType t) override {
    auto i = std::make_unique<Staged>(in, bytes(n_out * size(), t), mem_, true);
    auto o = std::make_unique<Staged>(out, bytes(n_out, t), mem_, false);
    Staged* result = o.get();
    std::unique_ptr<CommRequest> r;
    counted([&] { r = inner_->ireduce_scatter(i->get(), o->get(), n_out, t); });
    return finish(std::move(r), std::move(i), std::move(o), result);
  }
  std::unique_ptr<CommRequest> iall_gather(const void* in, void* out, int64_t n_in,
                                           DType dtype) override {
    const size_t b = size_t(n_in) * dtype_size(dtype);
    auto i = std::make_unique<Staged>(in, b, mem_, true);
    auto o = std::make_unique<Staged>(out, b * size_t(size()), mem_, false);
    Staged* result = o.get();
    std::unique_ptr<CommRequest> r;
    counted([&] { r = inner_->iall_gather(i->get(), o->get(), n_in, dtype); });
    return finish(std::move(r), std::move(i), std::move(o), result);
  }
  void reduce_scatter(const void* in, void* out, int64_t n_out, DType t) override {
    Staged i(in, bytes(n_out * size(), t), mem_, true), o(out, bytes(n_out, t), mem_, false);
    counted([&] { inner_->reduce_scatter(i.get(), o.get(), n_out, t); });
    o.copy_out();
  }
  void all_gather(const void* in, void* out, int64_t n_in, DType dtype) override {
    const size_t b = size_t(n_in) * dtype_size(dtype);
    Staged i(in, b, mem_, true), o(out, b * size_t(size()), mem_, false);
    counted([&] { inner_->all_gather(i.get(), o.get(), n_in, dtype); });
    o.copy_out();
  }
  void broadcast(float* data, int64_t n, int root) override {
    Staged d(data, bytes(n), mem_, true);
    counted([&] { inner_->broadcast(static_cast<float*>(d.get()), n, root); });
    d.copy_out();
  }
  void all_to_all(const void* in, void* out, int64_t n, DType t) override {
    Staged i(in, bytes(n * size(), t), mem_, true), o(out, bytes(n * size(), t), mem_, false);
    counted([&] { inner_->all_to_all(i.get(), o.get(), n, t); });
    o.copy_out();
  }
  void all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                    const int64_t* recv_counts, DType t) override {
    int64_t n_in = 0, n_out = 0;
    for (int j = 0; j < size(); ++j) {
      n_in = checked_add(n_in, send_counts[j], "all-to-all-v elements sent");
      n_out = checked_add(n_out, recv_counts[j], "all-to-all-v elements received");
    }
    Staged i(in, bytes(n_in, t), mem_, true), o(out, bytes(n_out, t), mem_, false);
    counted([&] { inner_->all_to_all_v(i.get(), send_counts, o.get(), recv_counts, t); });
    o.copy_out();
  }
  void batch_isend_irecv(const std::vector<P2POp>& ops) override {
    std::vector<std::unique_ptr<Staged>> bufs;
    std::vector<P2POp> staged = ops;
    for (P2POp& op : staged) {
      bufs.push_back(std::make_unique<Staged>(op.data, bytes(op.n), mem_, op.is_send));
      op.data = static_cast<float*>(bufs.back()->get());
    }
    counted([&] { inner_->batch_isend_irecv(staged); });
    for (size_t k = 0; k < ops.size(); ++k)
      if (!ops[k].is_send) bufs[k]->copy_out();
  }
  // Receives staged back once the inner exchange returns; the staged sends live in the request.
  std::unique_ptr<CommRequest> exchange(const std::vector<P2POp>& ops) override {
    std::vector<std::unique_ptr<Staged>> bufs, sends;
    std::vector<P2POp> staged = ops;
    for (P2POp& op : staged) {
      bufs.push_back(std::make_unique<Staged>(op.data, bytes(op.n), mem_, op.is_send));
      op.data = static_cast<float*>(bufs.back()->get());
    }
    std::unique_ptr<CommRequest> r;
    counted([&] { r = inner_->exchange(staged); });
    for (size_t k = 0; k < ops.size(); ++k)
      if (!ops[k].is_send) bufs[k]->copy_out();
      else sends.push_back(std::move(bufs[k]));
    return std::make_unique<StagedRequest>(std::move(r), std::move(sends), nullptr);
  }
  void barrier() override { inner_->barrier(); }

 private:
  static size_t bytes(int64_t n, DType t = DType::F32) { return size_t(n) * dtype_size(t); }
  // Adds what the inner communicator counted during f to this one's counters.
  template <typename F>
  void counted(F f) {
    const CommStats before = inner_->stats();
    f();
    const CommStats& after = inner_->stats();
    stats_.all_reduce_bytes += after.all_reduce_bytes - before.all_reduce_bytes;
    stats_.reduce_scatter_bytes += after.reduce_scatter_bytes - before.reduce_scatter_bytes;
    stats_.all_gather_bytes += after.all_gather_bytes - before.all_gather_bytes;
    stats_.broadcast_bytes += after.broadcast_bytes - before.broadcast_bytes;
    stats_.p2p_bytes += after.p2p_bytes - before.p2p_bytes;
    stats_.all_to_all_bytes += after.all_to_all_bytes - before.all_to_all_bytes;
  }
  static std::unique_ptr<CommRequest> finish(std::unique_ptr<CommRequest> r,
                                             std::unique_ptr<Staged> a, std::unique_ptr<Staged> b,
                                             Staged* result) {
    std::vector<std::unique_ptr<Staged>> bufs;
    bufs.push_back(std::move(a));
    if (b) bufs.push_back(std::move(b));
    return std::make_unique<StagedRequest>(std::move(r), std::move(bufs), result);
  }

  std::unique_ptr<Communicator> inner_;
  Device mem_;
};

}  // namespace

std::unique_ptr<Communicator> make_staging_communicator(std::unique_ptr<Communicator> inner,
                                                        Device inner_memory) {
  if (!inner) return nullptr;
  return std::make_unique<StagingCommunicator>(std::move(inner), inner_memory);
}

}  // namespace mg
