#include "serve/server.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <mutex>
#include <thread>

#include "backend/dispatch.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "comm/rank_threads.h"
#include "core/error.h"
#include "core/log.h"
#include "serve/api.h"
#include "inference/engine.h"
#include "parallel/process_groups.h"

namespace mg {

void ServeConfig::validate() const {
  MG_USER_CHECK(!load.empty(), "--load DIR (a checkpoint) is required");
  MG_USER_CHECK(port >= 0 && port <= 65535, "--port must be in [0, 65535] (got ", port, ")");
  MG_USER_CHECK(max_seq_length >= 0, "--inference-max-seq-length must be >= 0 (got ",
                max_seq_length, "; 0: the model's --seq-length)");
  MG_USER_CHECK(max_requests > 0, "--inference-max-requests must be positive (got ",
                max_requests, ")");
  MG_USER_CHECK(max_body_bytes > 0, "--max-request-bytes must be positive");
}

namespace {

using nlohmann::json;

// A step's command from rank 0 to the other ranks: the requests cancelled (their clients gone)
// and those that join, or stop.
std::vector<uint8_t> command_bytes(bool stop, const std::vector<int64_t>& cancel,
                                   const std::vector<Request>& requests) {
  json rs = json::array();
  for (const Request& r : requests) {
    const Sampling& s = r.sampling;
    rs.push_back({{"prompt", r.prompt}, {"temperature", s.temperature}, {"top_k", s.top_k},
                  {"top_p", s.top_p}, {"seed", s.seed}, {"max_new_tokens", s.max_new_tokens},
                  {"stop_tokens", s.stop_tokens}, {"logprobs", s.logprobs}});
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
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !engine_.idle() || cancel_pending_;
      });
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
        if (engine_.cancel(cancel[i])) log_line(str_cat(" > request ", cancel[i], " cancelled: ", why[i]));
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
          if (auto it = active_.find(g.id); it != active_.end()) it->second->token(g.token, g.logprob);
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

// The completion of a request a stop string ended (cancelled in the engine): its tokens so far.
Completion stopped_at(const Request& r, const std::vector<int32_t>& tokens) {
  Completion c;
  c.prompt = r.prompt;
  c.tokens = tokens;
  c.finish_reason = "stop";
  return c;
}

// A streamed request's state, shared by its content provider's calls.
struct StreamState {
  api::Parsed p;
  std::shared_ptr<Channel> ch;
  std::unique_ptr<api::EventStream> events;
  size_t seen = 0;
  bool started = false;
};

// The other ranks: each command's cancellations and requests applied and one step run, as on
// rank 0, until stop.
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

// Invalid UTF-8 (a generation cut inside a character, a token decoded alone, a body's bytes
// quoted in a parse error) is written as U+FFFD, as Megatron's decoding with errors='replace'.
void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace

namespace {

// The layout to serve in: TP x PP ranks, one model (no DP, CP or EP).
RankGrid serve_grid(const ServeConfig& cfg, const GPTConfig& mc, int world) {
  const ParallelConfig& p = cfg.parallel;
  MG_USER_CHECK(p.cp() == 1, "--context-parallel-size ", p.cp(), " is not supported by serve "
                "(decoding runs one token per sequence): use 1");
  MG_USER_CHECK(p.ep() == 1 && p.etp() == p.tp(), "--expert-model-parallel-size / "
                "--expert-tensor-parallel-size are not supported by serve yet: experts are "
                "split by --tensor-model-parallel-size");
  MG_USER_CHECK(p.tp() * p.pp() == world, "serve runs one copy of the model: the job's ", world,
                " ranks must equal --tensor-model-parallel-size ", p.tp(), " x "
                "--pipeline-model-parallel-size ", p.pp());
  ParallelConfig check = p;
  check.num_layers_per_virtual_pipeline_stage = 0;  // no virtual stages when serving
  check.num_virtual_stages_per_pipeline_rank = 0;
  check.validate(world, mc.layout_dims(p.tp()), 1, 1);
  return {p.tp(), p.pp(), 1};
}

}  // namespace

void serve(const ServeConfig& cfg, const MpiSession& mpi) {
  cfg.validate();
  // SIGINT / SIGTERM stop the server from a thread that waits for them: blocked here, before
  // any other thread (OpenMP's, the engine's, the HTTP pool's) exists, so all inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const std::string& load = cfg.load;
  const GPTConfig& mc = cfg.model;
  TokenizerConfig tc = cfg.tokenizer;
  if (tc.tokenizer_type == "NullTokenizer" && tc.vocab_size <= 0) tc.vocab_size = mc.vocab_size;
  std::unique_ptr<Tokenizer> tok = make_tokenizer(tc);
  MG_USER_CHECK(tok->vocab_size() <= mc.padded_vocab_size(), "--load '", load,
                "': the tokenizer has ", tok->vocab_size(), " tokens but the model only ",
                mc.padded_vocab_size());
  const RankGrid grid = serve_grid(cfg, mc, mpi.world_size());
  // The chat template, and the tokens that end a chat answer: its eos_token and
  // generation_config.json's eos_token_id, where they are tokens of this tokenizer.
  const std::string tok_path = !tc.tokenizer_model.empty() ? tc.tokenizer_model : tc.vocab_file;
  std::string chat_warning;
  const std::optional<ChatTemplate> chat = ChatTemplate::find(tok_path, cfg.chat_template, &chat_warning);
  std::vector<int32_t> chat_stop;
  if (chat) {
    std::vector<int64_t> ids = generation_eos_ids(tok_path);
    if (const std::vector<int32_t> eos = tok->encode(chat->eos()); eos.size() == 1) ids.push_back(eos[0]);
    for (const int64_t id : ids)
      if (id >= 0 && id < tok->vocab_size() && id != tok->eod()) chat_stop.push_back(int32_t(id));
  }
  EngineConfig ec;
  ec.max_seq_length = cfg.max_seq_length > 0 ? cfg.max_seq_length : mc.seq_length;
  ec.max_requests = cfg.max_requests;
  ec.continuous = !cfg.static_batching;
  ec.vocab_limit = std::min(tok->vocab_size(), mc.vocab_size);
  const DType dtype = cfg.dtype;
  check_engine_fits(mc, ec, dtype,
                    str_cat("serving --load '", load, "' (", mc.num_parameters(),
                            " parameters) with --inference-max-requests ", ec.max_requests,
                            " x --inference-max-seq-length ", ec.max_seq_length),
                    grid.tp, grid.pp, mpi.active() ? local_size() : 1);  // (every rank calls it)
  const bool distributed = mpi.world_size() > 1;
  std::optional<ProcessGroups> groups;
  std::unique_ptr<InferenceModel> model;
  std::unique_ptr<Engine> engine;
  try {  // past here a failure may hit some ranks only: end the job rather than leave any waiting
    set_rank_threads();
    if (cfg.device == "cuda") ops::set_device(Device::CUDA, local_rank());
    groups.emplace(!mpi.active()              ? make_single_process_groups()
                   : cfg.device == "cuda" ? make_gpu_process_groups(grid, cfg.distributed_backend)
                                                : make_mpi_process_groups(grid));
    InferenceLayout layout{groups->tp.get(), groups->pp.get()};
    std::tie(layout.layer_begin, layout.layer_end) =
        cfg.parallel.stage_layers(mc.num_layers, groups->coord.pp);
    model = std::make_unique<InferenceModel>(mc, dtype, ec.step_rows(), layout);
    load_checkpoint_weights(load, model->store());
    model->prepare();
    engine = std::make_unique<Engine>(*model, ec);
    if (distributed) {  // every rank at once: the command broadcasts' communicator is made here
      std::vector<uint8_t> none;
      mpi_broadcast_idle(none, 0);
    }
    if (mpi.world_rank() != 0) {
      follow(*engine);
      return;
    }
  } catch (const std::exception& e) {
    if (!distributed) throw;
    log_error(str_cat(dynamic_cast<const UsageError*>(&e) ? "megatron serve: error: "
                                                            : "megatron serve: internal error: ",
                      e.what()));
    MpiSession::abort(dynamic_cast<const UsageError*>(&e) ? 2 : 1);
  }
  EngineLoop loop(*engine, distributed);

  std::mutex tok_mutex;  // tokenizers cache: one request at a time
  api::Limits limits;
  limits.max_prompts = cfg.max_prompts;
  limits.max_context = ec.max_seq_length;
  limits.model_name = std::filesystem::path(load).filename().string();
  if (limits.model_name.empty()) limits.model_name = "megatron";
  limits.chat = chat ? &*chat : nullptr;
  limits.chat_stop = chat_stop;
  auto fail_message = [](std::exception_ptr e) -> std::pair<int, std::string> {
    try {
      std::rethrow_exception(e);
    } catch (const api::ApiError& x) {
      return {x.status, x.what()};
    } catch (const UsageError& x) {
      return {400, x.what()};
    } catch (const NonFiniteLogits& x) {
      return {500, str_cat("the model gives non-finite logits (", x.value, " for token ", x.token,
                           "): its parameters are corrupt or diverged")};
    } catch (const std::exception& x) {
      return {500, x.what()};
    } catch (...) {
      return {500, "unknown error"};
    }
  };
  // A request's completion; with stop strings (and no log-probabilities, which need the whole
  // run), followed as it is generated and cancelled at the first stop string instead of running
  // on to its token budget.
  auto until_stop = [&](const api::Parsed& p, size_t i, const std::shared_ptr<Channel>& ch) {
    if (p.stop.empty() || p.logprobs) return ch->result();
    api::EventStream watch(p, *tok);  // its stop-string detection; its text is not sent
    for (size_t seen = 0;;) {
      const Channel::Update u = ch->wait(seen);
      if (u.error) std::rethrow_exception(u.error);
      if (u.done) return *u.done;
      bool stopped = false;
      {
        std::lock_guard<std::mutex> lock(tok_mutex);
        watch.update(u.tokens, u.logprobs, &stopped);
      }
      seen = u.tokens.size();
      if (stopped) {
        loop.cancel(ch, "a stop string ended it");
        return stopped_at(p.requests[i], u.tokens);
      }
    }
  };
  // Writes a stream's next events (waiting for its next tokens); false: the client is gone.
  auto next_events = [&](const std::shared_ptr<StreamState>& st, httplib::DataSink& sink) {
    std::string out;
    if (!st->started) {
      st->started = true;
      std::lock_guard<std::mutex> lock(tok_mutex);
      out = st->events->start();
    }
    const Channel::Update u = st->ch->wait(st->seen);
    if (u.error) {
      out += "data: " + json{{"error", {{"message", fail_message(u.error).second}}}}.dump(
                            -1, ' ', false, json::error_handler_t::replace) + "\n\n";
      sink.write(out.data(), out.size());
      sink.done();
      return true;
    }
    bool stopped = false, end = bool(u.done);
    {
      std::lock_guard<std::mutex> lock(tok_mutex);
      if (u.tokens.size() > st->seen) out += st->events->update(u.tokens, u.logprobs, &stopped);
      st->seen = u.tokens.size();
      if (stopped) {  // a stop string: the text ends here, the request leaves the engine
        loop.cancel(st->ch, "a stop string ended it");
        out += st->events->finish(stopped_at(st->p.requests[0], u.tokens));
        end = true;
      } else if (u.done) {
        out += st->events->finish(*u.done);
      }
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) return false;
    if (end) sink.done();
    return true;
  };
  // A streamed answer (server-sent events): the channel's tokens as they come; a client that
  // goes away (a failed write, or too slow for the write timeout) cancels its request.
  auto stream = [&](httplib::Response& res, api::Parsed parsed, std::shared_ptr<Channel> ch) {
    auto st = std::make_shared<StreamState>();
    st->p = std::move(parsed);
    st->ch = std::move(ch);
    st->events = std::make_unique<api::EventStream>(st->p, *tok);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&, st](size_t, httplib::DataSink& sink) -> bool {
          try {  // (cpp-httplib calls this outside its handler's try: nothing may escape)
            return next_events(st, sink);
          } catch (...) {
            return false;  // the connection closes; the request is cancelled below
          }
        },
        [&, st](bool success) {
          if (!success) loop.cancel(st->ch, "its client went away");
        });
  };
  auto handler = [&](api::Endpoint e) {
    return [&, e](const httplib::Request& req, httplib::Response& res) {
      try {
        api::Parsed p;
        {
          std::lock_guard<std::mutex> lock(tok_mutex);
          p = api::parse(e, req.body, *tok, limits);
        }
        std::vector<std::shared_ptr<Channel>> channels = loop.submit(p.requests);
        if (p.stream) return stream(res, std::move(p), channels[0]);
        std::vector<Completion> done;
        for (size_t i = 0; i < channels.size(); ++i) done.push_back(until_stop(p, i, channels[i]));
        std::lock_guard<std::mutex> lock(tok_mutex);
        reply(res, 200, api::respond(p, done, *tok));
      } catch (...) {
        const auto [status, message] = fail_message(std::current_exception());
        reply(res, status, {{"message", message}});
      }
    };
  };
  httplib::Server http;
  // A handler thread waits while its requests are in the engine: enough threads that every
  // request the engine can run at once (and as many queued behind them) has one; with
  // cpp-httplib's default (8) the other clients' connections would wait for a thread, not for
  // the engine, and keep-alive connections would keep theirs (a p99 of the whole run).
  const size_t threads = size_t(std::min<int64_t>(2 * cfg.max_requests + 8, 1024));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(size_t(cfg.max_body_bytes));
  http.Put("/api", handler(api::Endpoint::Api));
  http.Post("/completions", handler(api::Endpoint::Completions));
  http.Post("/v1/completions", handler(api::Endpoint::OpenAiCompletions));
  http.Post("/v1/chat/completions", handler(api::Endpoint::ChatCompletions));
  http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, api::models(limits.model_name));
  });
  for (const char* path : {"/health", "/v1/health"})
    http.Get(path, [](const httplib::Request&, httplib::Response& res) {
      reply(res, 200, {{"status", "ok"}});
    });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own message
    const char* what = res.status == 413 ? "the request body is larger than --max-request-bytes"
                       : res.status == 404 ? "no such endpoint"
                       : res.status == 405 ? "method not allowed on this endpoint"
                                           : "bad request";
    reply(res, res.status, {{"message", str_cat(what, " (", req.method, " ", req.path, ")")}});
  });
  std::atomic<bool> finished{false};
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    // A signal before the server runs would be lost by stop(): wait until it runs (or ended).
    while (!finished && !http.is_running())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();
  });
  const int port = cfg.port == 0 ? http.bind_to_any_port("0.0.0.0") : cfg.port;
  const bool bound = cfg.port == 0 ? port > 0 : http.bind_to_port("0.0.0.0", port);
  if (!bound) {
    finished = true;
    pthread_kill(signal_thread.native_handle(), SIGTERM);
    signal_thread.join();
    loop.stop();
    loop.run();  // tells the other ranks to stop
    throw UsageError(str_cat("--port ", cfg.port, " cannot be bound (in use?)"));
  }
  log_line(str_cat(" > serving ", limits.model_name, " (", mc.num_parameters(), " parameters, ",
                   dtype_name(dtype), ", TP ", grid.tp, " x PP ", grid.pp, ", KV cache ",
                   ec.max_requests, " x ", ec.max_seq_length, " tokens, ",
                   ec.continuous ? "continuous batching" : "static batching",
                   ") on http://127.0.0.1:", port));
  log_line(chat ? str_cat(" > chat template from ", chat->origin())
                : str_cat(" > no chat template", chat_warning.empty() ? "" : ": " + chat_warning,
                          " (POST /v1/chat/completions is refused; --chat-template FILE gives one)"));
  // HTTP on a thread of its own; the engine (and MPI) on this one. When the server stops it
  // answers the non-streamed requests in flight (the engine still runs; streams are cut by
  // cpp-httplib's shutdown), then the engine loop ends.
  std::thread http_thread([&] {
    http.listen_after_bind();
    finished = true;
    pthread_kill(signal_thread.native_handle(), SIGTERM);  // if it still waits
    loop.stop();
  });
  try {
    loop.run();
  } catch (...) {  // the threads end before the error leaves (a joinable thread would terminate)
    loop.fail_all(std::current_exception());
    http.stop();
    http_thread.join();
    signal_thread.join();
    throw;
  }
  http_thread.join();
  signal_thread.join();
  log_line(" > server stopped");
}

}  // namespace mg
