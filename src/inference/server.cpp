#include "inference/server.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "core/error.h"
#include "core/log.h"
#include "inference/api.h"
#include "inference/engine.h"

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

// The engine on a thread of its own: handlers submit requests and wait on their futures; between
// two engine steps the newly submitted ones join (continuous batching).
class EngineLoop {
 public:
  explicit EngineLoop(Engine& e) : engine_(e) {}
  std::vector<std::future<Completion>> submit(std::vector<Request> requests) {
    std::vector<std::future<Completion>> out;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Request& r : requests) {
        incoming_.push_back({std::move(r), {}});
        out.push_back(incoming_.back().done.get_future());
      }
    }
    wake_.notify_one();
    return out;
  }
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || !incoming_.empty() || !engine_.idle(); });
      if (stop_) break;
      std::vector<Pending> in = std::move(incoming_);
      incoming_.clear();
      lock.unlock();
      for (Pending& p : in) {
        try {
          const int64_t id = engine_.add(std::move(p.request));
          waiting_.emplace(id, std::move(p.done));
        } catch (...) {
          p.done.set_exception(std::current_exception());
        }
      }
      try {
        for (Completion& c : engine_.step()) {
          auto it = waiting_.find(c.id);
          it->second.set_value(std::move(c));
          waiting_.erase(it);
        }
      } catch (...) {  // the step failed (non-finite logits): every request in it fails
        for (auto& [id, done] : waiting_) done.set_exception(std::current_exception());
        waiting_.clear();
        engine_.clear();
      }
      lock.lock();
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
  }

 private:
  struct Pending {
    Request request;
    std::promise<Completion> done;
  };
  Engine& engine_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Pending> incoming_;
  std::map<int64_t, std::promise<Completion>> waiting_;  // the loop thread's only
  bool stop_ = false;
};

// Invalid UTF-8 (a generation cut inside a character, a token decoded alone, a body's bytes
// quoted in a parse error) is written as U+FFFD, as Megatron's decoding with errors='replace'.
void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace

void serve(const ServeConfig& cfg) {
  cfg.validate();
  // SIGINT / SIGTERM stop the server from a thread that waits for them: blocked here, before
  // any other thread (OpenMP's, the engine's, the HTTP pool's) exists, so all inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const GPTConfig mc = checkpoint_model_config(cfg.load);
  TokenizerConfig tc = cfg.tokenizer;
  if (tc.tokenizer_type == "NullTokenizer" && tc.vocab_size <= 0) tc.vocab_size = mc.vocab_size;
  std::unique_ptr<Tokenizer> tok = make_tokenizer(tc);
  MG_USER_CHECK(tok->vocab_size() <= mc.padded_vocab_size(), "--load '", cfg.load,
                "': the tokenizer has ", tok->vocab_size(), " tokens but the model only ",
                mc.padded_vocab_size());
  EngineConfig ec;
  ec.max_seq_length = cfg.max_seq_length > 0 ? cfg.max_seq_length : mc.seq_length;
  ec.max_requests = cfg.max_requests;
  ec.continuous = !cfg.static_batching;
  ec.vocab_limit = std::min(tok->vocab_size(), mc.vocab_size);
  const DType dtype = cfg.bf16 ? DType::BF16 : DType::F32;
  check_engine_fits(mc, ec, dtype,
                    str_cat("serving --load '", cfg.load, "' (", mc.num_parameters(),
                            " parameters) with --inference-max-requests ", ec.max_requests,
                            " x --inference-max-seq-length ", ec.max_seq_length));
  InferenceModel model(mc, dtype, ec.step_rows());
  load_checkpoint_weights(cfg.load, model.store());
  model.prepare();
  Engine engine(model, ec);
  EngineLoop loop(engine);
  std::thread engine_thread([&] { loop.run(); });

  std::mutex tok_mutex;  // tokenizers cache: one request at a time
  api::Limits limits;
  limits.max_prompts = cfg.max_prompts;
  limits.max_context = ec.max_seq_length;
  limits.model_name = std::filesystem::path(cfg.load).filename().string();
  if (limits.model_name.empty()) limits.model_name = "megatron";
  auto handler = [&](api::Endpoint e) {
    return [&, e](const httplib::Request& req, httplib::Response& res) {
      try {
        api::Parsed p;
        {
          std::lock_guard<std::mutex> lock(tok_mutex);
          p = api::parse(e, req.body, *tok, limits);
        }
        std::vector<Completion> done;
        for (auto& f : loop.submit(p.requests)) done.push_back(f.get());
        std::lock_guard<std::mutex> lock(tok_mutex);
        reply(res, 200, api::respond(p, done, *tok));
      } catch (const api::ApiError& x) {
        reply(res, x.status, {{"message", x.what()}});
      } catch (const UsageError& x) {
        reply(res, 400, {{"message", x.what()}});
      } catch (const NonFiniteLogits& x) {
        reply(res, 500, {{"message", str_cat("the model gives non-finite logits (", x.value,
                                             " for token ", x.token, "): its parameters are "
                                             "corrupt or diverged")}});
      } catch (const std::exception& x) {
        reply(res, 500, {{"message", x.what()}});
      }
    };
  };
  httplib::Server http;
  http.set_payload_max_length(size_t(cfg.max_body_bytes));
  http.Put("/api", handler(api::Endpoint::Api));
  http.Post("/completions", handler(api::Endpoint::Completions));
  http.Post("/v1/completions", handler(api::Endpoint::OpenAiCompletions));
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
    engine_thread.join();
    throw UsageError(str_cat("--port ", cfg.port, " cannot be bound (in use?)"));
  }
  log_line(str_cat(" > serving ", limits.model_name, " (", mc.num_parameters(), " parameters, ",
                   cfg.bf16 ? "bf16" : "f32", ", KV cache ", ec.max_requests, " x ",
                   ec.max_seq_length, " tokens, ",
                   ec.continuous ? "continuous batching" : "static batching",
                   ") on http://127.0.0.1:", port));
  http.listen_after_bind();
  finished = true;
  pthread_kill(signal_thread.native_handle(), SIGTERM);  // if it still waits
  signal_thread.join();
  loop.stop();
  engine_thread.join();
  log_line(" > server stopped");
}

}  // namespace mg
