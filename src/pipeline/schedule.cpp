#include "pipeline/schedule.h"

#include <algorithm>

#include "backend/dispatch.h"
#include "core/fault.h"
#include "core/timers.h"

namespace mg {

int64_t pipeline_slots(int stage, int stages, int64_t M) {
  return std::max<int64_t>(1, std::min<int64_t>(stages - stage, M));
}

namespace {

// Point-to-point exchange with the neighbouring stages (ranks r-1 and r+1 of the PP group).
class StageLinks {
 public:
  StageLinks(GPTModel& model, Communicator& pp)
      : model_(model), pp_(pp), r_(pp.rank()), n_(model.activation_numel()),
        d_output_({n_}, DType::F32, ops::device()) {}
  bool first() const { return r_ == 0; }
  bool last() const { return r_ == pp_.size() - 1; }
  float* d_output() { return d_output_.data<float>(); }

  void recv_forward(int64_t slot) {
    timers::Scope timer(timers::kForwardRecv);
    if (!first()) pp_.batch_isend_irecv({{false, model_.input_activation(slot), n_, r_ - 1}});
  }
  void send_forward(int64_t slot) {
    timers::Scope timer(timers::kForwardSend);
    if (!last()) pp_.batch_isend_irecv({{true, out(slot), n_, r_ + 1}});
  }
  void send_forward_recv_backward(int64_t slot) {
    timers::Scope timer(timers::kForwardSendBackwardRecv);
    if (!last())
      pp_.batch_isend_irecv({{true, out(slot), n_, r_ + 1}, {false, d_output(), n_, r_ + 1}});
  }
  void send_backward_recv_forward(int64_t next_slot) {
    timers::Scope timer(timers::kBackwardSendForwardRecv);
    if (!first())
      pp_.batch_isend_irecv({{true, in_grad(), n_, r_ - 1},
                             {false, model_.input_activation(next_slot), n_, r_ - 1}});
  }
  void recv_backward() {
    timers::Scope timer(timers::kBackwardRecv);
    if (!last()) pp_.batch_isend_irecv({{false, d_output(), n_, r_ + 1}});
  }
  void send_backward() {
    timers::Scope timer(timers::kBackwardSend);
    if (!first()) pp_.batch_isend_irecv({{true, in_grad(), n_, r_ - 1}});
  }

 private:
  float* out(int64_t slot) { return model_.output_activation(slot); }
  float* in_grad() { return model_.input_grad(); }
  GPTModel& model_;
  Communicator& pp_;
  int r_;
  int64_t n_;
  Tensor d_output_;
};

}  // namespace

double forward_backward(GPTModel& model, Communicator& pp, int64_t M, const BatchFn& batch,
                        const std::function<void()>& before_last_backward,
                        double loss_scale, bool per_token_loss) {
  // Per-token loss: no mean over micro-batches (the caller divides by the token count).
  const float scale = float(per_token_loss ? loss_scale : loss_scale / double(M));
  model.reset_loss();
  auto backward = [&](int64_t m, int64_t slot, const float* d_output) {
    if (m == M - 1 && before_last_backward) before_last_backward();
    fault::point(fault::Site::Backward);
    timers::Scope timer(timers::kBackwardCompute);
    model.backward(slot, d_output, scale);
  };
  // The batch first (the loader's wait is batch-generator time), then the forward.
  auto forward = [&](int64_t slot, int64_t m) {
    MicroBatch mb;
    {
      timers::Scope timer(timers::kBatchGenerator);
      mb = batch(m);
    }
    fault::point(fault::Site::Forward);
    timers::Scope timer(timers::kForwardCompute);
    model.forward_step(slot, mb);  // the loss adds up on the device; read once at the end
  };
  if (pp.size() == 1) {
    for (int64_t m = 0; m < M; ++m) {
      forward(0, m);
      backward(m, 0, nullptr);
    }
    return model.take_loss();
  }
  StageLinks link(model, pp);
  const int64_t slots = model.spec().num_slots;
  auto slot = [&](int64_t m) { return m % slots; };
  auto d_out = [&] { return link.last() ? nullptr : link.d_output(); };
  const int64_t warmup = std::min<int64_t>(pp.size() - pp.rank() - 1, M);
  const int64_t remaining = M - warmup;
  MG_CHECK(slots >= warmup + 1 || remaining == 0, "stage needs ", warmup + 1, " slots, has ",
           slots);

  for (int64_t i = 0; i < warmup; ++i) {
    link.recv_forward(slot(i));
    forward(slot(i), i);
    link.send_forward(slot(i));
  }
  if (remaining > 0) link.recv_forward(slot(warmup));
  for (int64_t i = 0; i < remaining; ++i) {
    const int64_t m = warmup + i;
    forward(slot(m), m);
    link.send_forward_recv_backward(slot(m));
    backward(i, slot(i), d_out());
    if (i == remaining - 1)
      link.send_backward();
    else
      link.send_backward_recv_forward(slot(m + 1));
  }
  for (int64_t i = remaining; i < M; ++i) {
    link.recv_backward();
    backward(i, slot(i), d_out());
    link.send_backward();
  }
  return model.take_loss();
}

double forward_only(GPTModel& model, Communicator& pp, int64_t M, const BatchFn& batch) {
  StageLinks link(model, pp);
  model.reset_loss();
  for (int64_t m = 0; m < M; ++m) {
    link.recv_forward(0);
    model.forward_step(0, batch(m));
    link.send_forward(0);
  }
  return model.take_loss();
}

}  // namespace mg
