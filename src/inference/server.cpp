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

#include "backend/dispatch.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "comm/rank_threads.h"
#include "core/error.h"
#include "core/log.h"
#include "inference/api.h"
#include "inference/engine.h"
#include "model/fields.h"
#include "parallel/process_groups.h"

namespace mg {

void ServeConfig::validate() const {
  MG_USER_CHECK(!train.load.empty(), "--load DIR (a checkpoint) is required");
  MG_USER_CHECK(port >= 0 && port <= 65535, "--port must be in [0, 65535] (got ", port, ")");
  MG_USER_CHECK(max_seq_length >= 0, "--inference-max-seq-length must be >= 0 (got ",
                max_seq_length, "; 0: the model's --seq-length)");
  MG_USER_CHECK(max_requests > 0, "--inference-max-requests must be positive (got ",
                max_requests, ")");
  MG_USER_CHECK(max_body_bytes > 0, "--max-request-bytes must be positive");
}

namespace {

using nlohmann::json;

// A step's command from rank 0 to the other ranks: the requests that join (or stop).
std::vector<uint8_t> command_bytes(bool stop, const std::vector<Request>& requests) {
  json rs = json::array();
  for (const Request& r : requests) {
    const Sampling& s = r.sampling;
    rs.push_back({{"prompt", r.prompt}, {"temperature", s.temperature}, {"top_k", s.top_k},
                  {"top_p", s.top_p}, {"seed", s.seed}, {"max_new_tokens", s.max_new_tokens},
                  {"stop_tokens", s.stop_tokens}, {"logprobs", s.logprobs}});
  }
  return json::to_cbor(json{{"stop", stop}, {"requests", rs}});
}

bool read_command(const std::vector<uint8_t>& bytes, std::vector<Request>& requests) {
  const json j = json::from_cbor(bytes);
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

// The engine's loop, on the main thread (the one that may call MPI): HTTP handlers submit
// requests and wait on their futures; between two engine steps the newly submitted ones join
// (continuous batching). With several ranks, each iteration's newcomers are broadcast first,
// so every rank adds the same requests and runs the same step (follow()).
class EngineLoop {
 public:
  EngineLoop(Engine& e, bool broadcast) : engine_(e), broadcast_(broadcast) {}
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
      std::vector<Request> requests;
      for (const Pending& p : in) requests.push_back(p.request);
      if (broadcast_) {
        std::vector<uint8_t> bytes = command_bytes(false, requests);
        mpi_broadcast_idle(bytes, 0);
      }
      for (size_t i = 0; i < in.size(); ++i) {
        try {
          const int64_t id = engine_.add(std::move(requests[i]));
          waiting_.emplace(id, std::move(in[i].done));
        } catch (...) {  // every rank refuses it alike
          in[i].done.set_exception(std::current_exception());
        }
      }
      try {
        for (Completion& c : engine_.step()) {
          auto it = waiting_.find(c.id);
          it->second.set_value(std::move(c));
          waiting_.erase(it);
        }
      } catch (...) {  // the step failed (non-finite logits, on every rank): its requests fail
        for (auto& [id, done] : waiting_) done.set_exception(std::current_exception());
        waiting_.clear();
        engine_.clear();
      }
      lock.lock();
    }
    if (broadcast_) {
      std::vector<uint8_t> bytes = command_bytes(true, {});
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

 private:
  struct Pending {
    Request request;
    std::promise<Completion> done;
  };
  Engine& engine_;
  const bool broadcast_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Pending> incoming_;
  std::map<int64_t, std::promise<Completion>> waiting_;  // the loop thread's only
  bool stop_ = false;
};

// The other ranks: each command's requests added and one step run, as on rank 0, until stop.
void follow(Engine& engine) {
  while (true) {
    std::vector<uint8_t> bytes;
    mpi_broadcast_idle(bytes, 0);
    std::vector<Request> requests;
    if (read_command(bytes, requests)) return;
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

// The checkpoint's model, with the model flags given checked against it: a structural one that
// differs is refused (the weights could not load); the others (--seq-length, ...) apply.
GPTConfig served_model(const ServeConfig& cfg, const std::set<std::string>& given) {
  const GPTConfig saved = checkpoint_model_config(cfg.train.load);
  if (cfg.use_checkpoint_args) return saved;
  GPTConfig mc = saved;
  for (const ModelField& f : model_fields())
    if (given.count(f.flag)) std::visit([&](auto m) { mc.*m = cfg.train.model.*m; }, f.member);
  const GPTConfig a = mc.resolved(), b = saved.resolved();  // 0 = derived, as resolved
  for (const ModelField& f : model_fields())
    if (given.count(f.flag) && f.structural)
      MG_USER_CHECK(field_text(a, f) == field_text(b, f), f.flag, " ", field_text(mc, f),
                    " differs from the checkpoint in --load ", cfg.train.load, " (", f.key, " ",
                    field_text(b, f), "): drop the flag or load the checkpoint of that model");
  return mc;
}

// The layout to serve in: TP x PP ranks, one model (no DP, CP or EP).
RankGrid serve_grid(const ServeConfig& cfg, const GPTConfig& mc, int world) {
  const ParallelConfig& p = cfg.train.parallel;
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

void serve(const ServeConfig& cfg, const std::set<std::string>& given, const MpiSession& mpi) {
  cfg.validate();
  // SIGINT / SIGTERM stop the server from a thread that waits for them: blocked here, before
  // any other thread (OpenMP's, the engine's, the HTTP pool's) exists, so all inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const std::string& load = cfg.train.load;
  const GPTConfig mc = served_model(cfg, given);
  TokenizerConfig tc = cfg.train.tokenizer;
  if (tc.tokenizer_type == "NullTokenizer" && tc.vocab_size <= 0) tc.vocab_size = mc.vocab_size;
  std::unique_ptr<Tokenizer> tok = make_tokenizer(tc);
  MG_USER_CHECK(tok->vocab_size() <= mc.padded_vocab_size(), "--load '", load,
                "': the tokenizer has ", tok->vocab_size(), " tokens but the model only ",
                mc.padded_vocab_size());
  const RankGrid grid = serve_grid(cfg, mc, mpi.world_size());
  EngineConfig ec;
  ec.max_seq_length = cfg.max_seq_length > 0 ? cfg.max_seq_length : mc.seq_length;
  ec.max_requests = cfg.max_requests;
  ec.continuous = !cfg.static_batching;
  ec.vocab_limit = std::min(tok->vocab_size(), mc.vocab_size);
  const DType dtype = cfg.train.model_dtype();
  check_engine_fits(mc, ec, dtype,
                    str_cat("serving --load '", load, "' (", mc.num_parameters(),
                            " parameters) with --inference-max-requests ", ec.max_requests,
                            " x --inference-max-seq-length ", ec.max_seq_length),
                    grid.tp, grid.pp);
  const bool distributed = mpi.world_size() > 1;
  std::optional<ProcessGroups> groups;
  std::unique_ptr<InferenceModel> model;
  std::unique_ptr<Engine> engine;
  try {  // past here a failure may hit some ranks only: end the job rather than leave any waiting
    set_rank_threads();
    if (cfg.train.device == "cuda") ops::set_device(Device::CUDA, local_rank());
    groups.emplace(!mpi.active()              ? make_single_process_groups()
                   : cfg.train.device == "cuda" ? make_gpu_process_groups(grid, cfg.train.distributed_backend)
                                                : make_mpi_process_groups(grid));
    InferenceLayout layout{groups->tp.get(), groups->pp.get()};
    std::tie(layout.layer_begin, layout.layer_end) =
        cfg.train.parallel.stage_layers(mc.num_layers, groups->coord.pp);
    model = std::make_unique<InferenceModel>(mc, dtype, ec.step_rows(), layout);
    load_checkpoint_weights(load, model->store());
    model->prepare();
    engine = std::make_unique<Engine>(*model, ec);
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
    loop.run();  // tells the other ranks to stop
    throw UsageError(str_cat("--port ", cfg.port, " cannot be bound (in use?)"));
  }
  log_line(str_cat(" > serving ", limits.model_name, " (", mc.num_parameters(), " parameters, ",
                   dtype_name(dtype), ", TP ", grid.tp, " x PP ", grid.pp, ", KV cache ",
                   ec.max_requests, " x ", ec.max_seq_length, " tokens, ",
                   ec.continuous ? "continuous batching" : "static batching",
                   ") on http://127.0.0.1:", port));
  // HTTP on a thread of its own; the engine (and MPI) on this one. When the server stops it
  // answers the requests in flight (the engine still runs), then the engine loop ends.
  std::thread http_thread([&] {
    http.listen_after_bind();
    finished = true;
    pthread_kill(signal_thread.native_handle(), SIGTERM);  // if it still waits
    loop.stop();
  });
  loop.run();
  http_thread.join();
  signal_thread.join();
  log_line(" > server stopped");
}

}  // namespace mg
