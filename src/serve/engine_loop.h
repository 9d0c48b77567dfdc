// The engine's side of `megatron serve`: the loop that runs the inference engine on the main
// thread while HTTP handlers submit requests to it (continuous batching), each request's
// channel back to its handler, and, with several ranks, the command broadcast that makes every
// rank run the same steps (rank 0 leads, the others follow()).
#pragma once
#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "inference/engine.h"

namespace mg {

// One request's line from the engine loop to its HTTP handler: its tokens as they are
// generated, then its completion or its failure.
class Channel {
 public:
  struct Update {
    std::vector<int32_t> tokens;  // every token so far
    std::vector<float> logprobs;  // theirs (requests with logprobs)
    std::optional<Completion> done;
    std::exception_ptr error;
  };
  void token(int32_t t, float logprob) {
    std::lock_guard<std::mutex> lock(mutex_);
    now_.tokens.push_back(t);
    now_.logprobs.push_back(logprob);
    changed_.notify_all();
  }
  void finish(Completion c) {
    std::lock_guard<std::mutex> lock(mutex_);
    now_.done = std::move(c);
    changed_.notify_all();
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex_);
    now_.error = e;
    changed_.notify_all();
  }
  // Waits for more than `seen` tokens or the end.
  Update wait(size_t seen) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return now_.tokens.size() > seen || now_.done || now_.error; });
    return now_;
  }
  Completion result() {  // waits for the end
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return now_.done || now_.error; });
    if (now_.error) std::rethrow_exception(now_.error);
    return *now_.done;
  }
  std::atomic<bool> cancelled{false};
  const char* why = "";  // set before cancelled

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  Update now_;
};

// The engine's loop, on the main thread (the one that may call MPI): HTTP handlers submit
// requests and follow their channels; between two engine steps the newly submitted ones join
// (continuous batching) and the cancelled ones leave. With several ranks each iteration's
// changes are broadcast first, so every rank runs the same steps (follow()).
class EngineLoop {
 public:
  EngineLoop(Engine& e, bool broadcast) : engine_(e), broadcast_(broadcast) {}
  std::vector<std::shared_ptr<Channel>> submit(std::vector<Request> requests) {
    std::vector<std::shared_ptr<Channel>> out;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Request& r : requests) {
        out.push_back(std::make_shared<Channel>());
        if (failed_) out.back()->fail(failed_);
        else incoming_.push_back({std::move(r), out.back()});
      }
    }
    wake_.notify_one();
    return out;
  }
  // The request leaves the engine before its next step (why: for the log).
  void cancel(const std::shared_ptr<Channel>& c, const char* why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      c->why = why;
      c->cancelled = true;
      cancel_pending_ = true;
    }
    wake_.notify_one();
  }
  // Until stop(): each iteration applies the cancellations and joins the new requests, then runs
  // one engine step and hands its tokens and completions to their channels.
  void run();
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
  }
  // A step failed: the requests in the engine fail with e and leave it.
  void fail_running(std::exception_ptr e) {
    for (auto& [id, channel] : active_) channel->fail(e);
    active_.clear();
    engine_.clear();
  }
  // After run() failed (on its thread): every request waiting on it fails with e, and later
  // ones at once.
  void fail_all(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, channel] : active_) channel->fail(e);
    for (Pending& p : incoming_) p.channel->fail(e);
    active_.clear();
    incoming_.clear();
    failed_ = e;
  }

 private:
  struct Pending {
    Request request;
    std::shared_ptr<Channel> channel;
  };
  Engine& engine_;
  const bool broadcast_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Pending> incoming_;
  bool stop_ = false, cancel_pending_ = false;
  std::exception_ptr failed_;
  std::map<int64_t, std::shared_ptr<Channel>> active_;  // the loop thread's only
};

// The other ranks: each command's cancellations and requests applied and one step run, as on
// rank 0, until stop.
void follow(Engine& engine);

}  // namespace mg
