#include "serve/engine_loop.h"

#include <nlohmann/json.hpp>

#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/log.h"

namespace mg {

namespace {

using nlohmann::json;

// A step's command from rank 0 to the other ranks: the requests cancelled (their clients gone)
// and those that join, or stop.
std::vector<uint8_t> command_bytes(bool stop, const std::vector<int64_t>& cancel,
                                   const std::vector<Request>& requests) {
  json rs = json::array();
  for (const Request& r : requests) {
    const Sampling& s = r.sampling;
    rs.push_back({{"prompt", r.prompt},
                  {"temperature", s.temperature},
                  {"top_k", s.top_k},
                  {"top_p", s.top_p},
                  {"seed", s.seed},
                  {"max_new_tokens", s.max_new_tokens},
                  {"stop_tokens", s.stop_tokens},
                  {"logprobs", s.logprobs}});
  }
  return json::to_cbor(json{{"stop", stop}, {"cancel", cancel}, {"requests", rs}});
}

bool read_command(const std::vector<uint8_t>& bytes, std::vector<int64_t>& cancel,
                  std::vector<Request>& requests) {
  const json j = json::from_cbor(bytes);
  j["cancel"].get_to(cancel);
  for (const json& r : j["requests"]) {
    Request q;
    r["prompt"].get_to(q.prompt);
    Sampling& s = q.sampling;
    s.temperature = r["temperature"];
    s.top_k = r["top_k"];
    s.top_p = r["top_p"];
    s.seed = r["seed"];
    s.max_new_tokens = r["max_new_tokens"];
    r["stop_tokens"].get_to(s.stop_tokens);
    s.logprobs = r["logprobs"];
    requests.push_back(std::move(q));
  }
  return j["stop"].get<bool>();
}

}  // namespace

void EngineLoop::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock,
               [&] { return stop_ || !incoming_.empty() || !engine_.idle() || cancel_pending_; });
    if (stop_) break;
    std::vector<Pending> in;  // (a client gone before its request joined: dropped here)
    for (Pending& p : incoming_)
      if (!p.channel->cancelled) in.push_back(std::move(p));
    incoming_.clear();
    cancel_pending_ = false;
    lock.unlock();
    std::vector<int64_t> cancel;
    std::vector<const char*> why;
    for (auto it = active_.begin(); it != active_.end();)
      if (it->second->cancelled) {
        cancel.push_back(it->first);
        why.push_back(it->second->why);
        it = active_.erase(it);
      } else {
        ++it;
      }
    std::vector<Request> requests;
    for (const Pending& p : in) requests.push_back(p.request);
    if (broadcast_) {
      std::vector<uint8_t> bytes = command_bytes(false, cancel, requests);
      mpi_broadcast_idle(bytes, 0);
    }
    for (size_t i = 0; i < cancel.size(); ++i)
      if (engine_.cancel(cancel[i]))
        log_line(str_cat(" > request ", cancel[i], " cancelled: ", why[i]));
    for (size_t i = 0; i < in.size(); ++i) {
      try {
        active_.emplace(engine_.add(std::move(requests[i])), in[i].channel);
      } catch (...) {  // every rank refuses it alike
        in[i].channel->fail(std::current_exception());
      }
    }
    try {
      std::vector<Completion> done = engine_.step();
      for (const Engine::Generated& g : engine_.generated())
        if (auto it = active_.find(g.id); it != active_.end())
          it->second->token(g.token, g.logprob);
      for (Completion& c : done) {
        if (auto it = active_.find(c.id); it != active_.end()) {
          it->second->finish(std::move(c));
          active_.erase(it);
        }
      }
    } catch (const NonFiniteLogits&) {  // on every rank alike: its requests fail
      fail_running(std::current_exception());
    } catch (const std::exception& e) {
      // Anything else may have hit this rank only: the ranks' engines could differ from
      // here on, so several ranks end the job; one process fails the requests and goes on.
      if (broadcast_) {
        log_error(str_cat("megatron serve: internal error: ", e.what()));
        MpiSession::abort(1);
      }
      fail_running(std::current_exception());
    }
    lock.lock();
  }
  if (broadcast_) {
    std::vector<uint8_t> bytes = command_bytes(true, {}, {});
    mpi_broadcast_idle(bytes, 0);
  }
}

void follow(Engine& engine) {
  while (true) {
    std::vector<uint8_t> bytes;
    mpi_broadcast_idle(bytes, 0);
    std::vector<int64_t> cancel;
    std::vector<Request> requests;
    if (read_command(bytes, cancel, requests)) return;
    for (const int64_t id : cancel) engine.cancel(id);
    for (Request& r : requests) {
      try {
        engine.add(std::move(r));
      } catch (const UsageError&) {  // refused on rank 0 too
      }
    }
    try {
      engine.step();
    } catch (const NonFiniteLogits&) {
      engine.clear();
    }
  }
}

}  // namespace mg
