#include "pipeline/schedule.h"

#include <algorithm>
#include <optional>

#include "backend/dispatch.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/timers.h"

namespace mg {

int64_t in_flight(const ScheduleTable& table, int chunk) {
  int64_t now = 0, most = 0;
  for (const ScheduleStep& s : table.steps)
    if (s.chunk == chunk) most = std::max(most, now += s.forward ? 1 : -1);
  return std::max<int64_t>(most, 1);
}

namespace {

constexpr int kActivationTag = 1, kGradientTag = 2;

// Where a rank exchanges with its neighbours (with sends that do not block, as MPI's, any order
// is deadlock-free; with blocking exchanges, as NCCL's, these pair up across ranks for
// Megatron's default micro-batch group of P): after each step under 1F1B (Megatron's
// send_forward_recv_backward / send_backward_recv_forward pattern), after each round of the
// interleaved schedule (a warm-up forward, a steady forward-backward pair, a cool-down backward:
// Megatron's send_forward_backward_recv_forward_backward pattern, which the longer interleaved
// warm-up pairs up across ranks). Returns the [begin, end) step ranges of the rounds.
std::vector<std::pair<size_t, size_t>> rounds(const ScheduleTable& t) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t n = t.steps.size(), w = size_t(t.warmup);
  for (size_t i = 0; i < n;) {
    const bool pair = t.kind == ScheduleKind::Interleaved && i >= w && i + w < n;
    out.emplace_back(i, i + (pair ? 2 : 1));
    i += pair ? 2 : 1;
  }
  return out;
}

// The batched exchanges of one rank: before each round, the previous round's outputs go out
// and this round's inputs come in, in one batch_isend_irecv (activations before gradients, so a
// pair of ranks lists its transfers in one order), timed under Megatron's name for what it
// carries.
class StageLinks {
 public:
  StageLinks(const std::vector<GPTModel*>& chunks, Communicator& pp)
      : chunks_(chunks), pp_(pp), P_(pp.size()), r_(pp.rank()), v_(int(chunks.size())),
        n_(chunks.front()->activation_numel()), d_output_({n_}, DType::F32, ops::device()) {}
  // Virtual stage of chunk c on this rank; the first and last of the whole model.
  int stage(int c) const { return c * P_ + r_; }
  bool first(int c) const { return stage(c) == 0; }
  bool last(int c) const { return stage(c) == P_ * v_ - 1; }
  float* d_output() { return d_output_.data<float>(); }

  // Sends the pending outputs and receives the inputs of `steps` (none for the first virtual
  // stage's forward and the last one's backward).
  template <typename SlotOf>
  void exchange_for(const ScheduleStep* begin, const ScheduleStep* end, SlotOf slot_of) {
    std::vector<P2POp> ops;
    bool send_act = false, send_grad = false, recv_act = false, recv_grad = false;
    for (const P2POp& op : pending_) (op.tag == kActivationTag ? send_act : send_grad) = true;
    ops = pending_;
    for (const ScheduleStep* s = begin; s != end; ++s) {
      if (s->forward && !first(s->chunk)) {
        ops.push_back({false, chunks_[size_t(s->chunk)]->input_activation(slot_of(*s)), n_,
                       (r_ + P_ - 1) % P_, kActivationTag});
        recv_act = true;
      } else if (!s->forward && !last(s->chunk)) {
        ops.push_back({false, d_output(), n_, (r_ + 1) % P_, kGradientTag});
        recv_grad = true;
      }
    }
    std::stable_sort(ops.begin(), ops.end(), [](const P2POp& a, const P2POp& b) {
      return a.tag < b.tag;  // activations first
    });
    std::vector<const void*> sent;
    for (const P2POp& op : pending_) sent.push_back(op.data);
    pending_.clear();
    if (ops.empty()) return;
    timers::Scope timer(phase(send_act, send_grad, recv_act, recv_grad));
    in_flight_.push_back({pp_.exchange(ops), std::move(sent)});
  }
  // Waits for the sends still reading buf (before a step overwrites it; an activation's send
  // has arrived by then, since its micro-batch came back as a gradient); null: for all.
  void release(const void* buf) {
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      const auto& b = it->buffers;
      if (buf && std::find(b.begin(), b.end(), buf) == b.end()) {
        ++it;
        continue;
      }
      it->request->wait();
      recycle(b);
      it = in_flight_.erase(it);
    }
  }
  // The output of a step just run, sent with the next exchange.
  void output_of(const ScheduleStep& step, int64_t slot) {
    GPTModel& m = *chunks_[size_t(step.chunk)];
    if (step.forward && !last(step.chunk))
      pending_.push_back({true, m.output_activation(slot), n_, (r_ + 1) % P_, kActivationTag});
    if (!step.forward && !first(step.chunk)) {  // the chunk's next backward overwrites it
      float* copy = grad_buffer();
      ops::copy(copy, ops::device(), m.input_grad(), ops::device(), size_t(n_) * sizeof(float));
      pending_.push_back({true, copy, n_, (r_ + P_ - 1) % P_, kGradientTag});
    }
  }

 private:
  // Megatron's timer for an exchange by what it sends and receives.
  static timers::Phase phase(bool send_act, bool send_grad, bool recv_act, bool recv_grad) {
    const bool send = send_act || send_grad, recv = recv_act || recv_grad;
    if ((send_act && send_grad) || (recv_act && recv_grad))
      return timers::kForwardBackwardSendForwardBackwardRecv;
    if (!send) return recv_act ? timers::kForwardRecv : timers::kBackwardRecv;
    if (!recv) return send_act ? timers::kForwardSend : timers::kBackwardSend;
    if (send_act)
      return recv_act ? timers::kForwardSendForwardRecv : timers::kForwardSendBackwardRecv;
    return recv_act ? timers::kBackwardSendForwardRecv : timers::kBackwardSendBackwardRecv;
  }

  const std::vector<GPTModel*>& chunks_;
  Communicator& pp_;
  int P_, r_, v_;
  int64_t n_;
  Tensor d_output_;
  std::vector<P2POp> pending_;
  // Copies of input gradients being sent (a gradient's receiver may take it only after this
  // rank's next backward of the same chunk), reused once their sends completed.
  std::vector<Tensor> grad_copies_;
  std::vector<float*> free_copies_;
  struct Sends {
    std::unique_ptr<CommRequest> request;
    std::vector<const void*> buffers;
  };
  std::vector<Sends> in_flight_;  // after the copies: destroyed (its sends waited for) first
  float* grad_buffer() {
    for (auto it = in_flight_.begin(); it != in_flight_.end() && free_copies_.empty();) {
      if (!it->request->test()) {
        ++it;
        continue;
      }
      recycle(it->buffers);
      it = in_flight_.erase(it);
    }
    if (free_copies_.empty()) {
      grad_copies_.emplace_back(Shape{n_}, DType::F32, ops::device());
      return grad_copies_.back().data<float>();
    }
    float* b = free_copies_.back();
    free_copies_.pop_back();
    return b;
  }
  void recycle(const std::vector<const void*>& buffers) {
    for (const void* b : buffers)
      for (const Tensor& t : grad_copies_)
        if (t.raw() == b) free_copies_.push_back(t.data<float>());
  }
};

// Runs the steps in order, round by round; returns the loss sum of the last virtual stage.
double run_steps(const std::vector<GPTModel*>& chunks, Communicator& pp, const ScheduleTable& t,
                 int64_t M, const BatchFn& batch, const std::function<void()>& before_last_backward,
                 float scale) {
  MG_CHECK(!chunks.empty(), "a pipeline rank needs at least one model chunk");
  for (GPTModel* c : chunks) c->reset_loss();
  StageLinks link(chunks, pp);
  auto slot_of = [&](const ScheduleStep& s) {
    return s.microbatch % chunks[size_t(s.chunk)]->spec().num_slots;
  };
  bool armed = false;
  for (const auto& [begin, end] : rounds(t)) {
    link.exchange_for(&t.steps[begin], &t.steps[begin] + (end - begin), slot_of);
    for (size_t i = begin; i < end; ++i) {
      const ScheduleStep& step = t.steps[i];
      GPTModel& m = *chunks[size_t(step.chunk)];
      const int64_t slot = slot_of(step);
      link.release(step.forward ? m.output_activation(slot) : m.input_grad());
      if (step.forward) {
        MicroBatch mb;  // the loader's wait is batch-generator time
        {
          timers::Scope timer(timers::kBatchGenerator);
          mb = batch(step.microbatch);
        }
        fault::point(fault::Site::Forward);
        timers::Scope timer(timers::kForwardCompute);
        m.forward_step(slot, mb);  // the loss adds up on the device; read once at the end
      } else {
        const bool final = step.microbatch == M - 1;
        if (final && !armed && before_last_backward) before_last_backward();
        armed |= final;
        fault::point(fault::Site::Backward);
        timers::Scope timer(timers::kBackwardCompute);
        m.report_grads(final || chunks.size() == 1);
        m.backward(slot, link.last(step.chunk) ? nullptr : link.d_output(), scale);
        m.report_grads(true);
      }
      link.output_of(step, slot);
    }
  }
  link.exchange_for(nullptr, nullptr, slot_of);
  link.release(nullptr);
  double loss = 0;
  for (GPTModel* c : chunks) loss += c->take_loss();
  return loss;
}

}  // namespace

double forward_backward(const std::vector<GPTModel*>& chunks, Communicator& pp,
                        const ScheduleShape& shape, const BatchFn& batch,
                        const std::function<void()>& before_last_backward, double loss_scale,
                        bool per_token_loss) {
  MG_CHECK(int(chunks.size()) == shape.virtual_stages && pp.size() == shape.pp_size,
           "schedule shape (P ", shape.pp_size, ", v ", shape.virtual_stages,
           ") differs from the rank's ", pp.size(), " pipeline ranks and ", chunks.size(),
           " chunks");
  const ScheduleTable table = schedule_table(shape, pp.rank());
  for (size_t c = 0; c < chunks.size(); ++c)
    MG_CHECK(chunks[c]->spec().num_slots >= in_flight(table, int(c)), "chunk ", c, " needs ",
             in_flight(table, int(c)), " activation slots, has ", chunks[c]->spec().num_slots);
  // Per-token loss: no mean over micro-batches (the caller divides by the token count).
  const double M = double(shape.microbatches);
  const float scale = float(per_token_loss ? loss_scale : loss_scale / M);
  return run_steps(chunks, pp, table, shape.microbatches, batch, before_last_backward, scale);
}

double forward_only(const std::vector<GPTModel*>& chunks, Communicator& pp, int64_t M,
                    const BatchFn& batch) {
  ScheduleTable t;  // one forward after the other: each its own round
  for (int64_t m = 0; m < M; ++m)
    for (int c = 0; c < int(chunks.size()); ++c) t.steps.push_back({true, c, m});
  return run_steps(chunks, pp, t, M, batch, nullptr, 1.f);
}

}  // namespace mg
