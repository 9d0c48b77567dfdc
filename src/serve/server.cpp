#include "serve/server.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "backend/dispatch.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "comm/rank_threads.h"
#include "core/error.h"
#include "core/log.h"
#include "inference/engine.h"
#include "parallel/process_groups.h"
#include "serve/api.h"
#include "serve/engine_loop.h"
#include "serve/http_frontend.h"

namespace mg {

void ServeConfig::validate() const {
  MG_USER_CHECK(!load.empty(), "--load DIR (a checkpoint) is required");
  MG_USER_CHECK(port >= 0 && port <= 65535, "--port must be in [0, 65535] (got ", port, ")");
  MG_USER_CHECK(max_seq_length >= 0, "--inference-max-seq-length must be >= 0 (got ",
                max_seq_length, "; 0: the model's --seq-length)");
  MG_USER_CHECK(max_requests > 0, "--inference-max-requests must be positive (got ", max_requests,
                ")");
  MG_USER_CHECK(max_body_bytes > 0, "--max-request-bytes must be positive");
}

namespace {

// The layout to serve in: TP x PP ranks, one model (no DP, CP or EP).
RankGrid serve_grid(const ServeConfig& cfg, const GPTConfig& mc, int world) {
  const ParallelConfig& p = cfg.parallel;
  MG_USER_CHECK(p.cp() == 1, "--context-parallel-size ", p.cp(),
                " is not supported by serve "
                "(decoding runs one token per sequence): use 1");
  MG_USER_CHECK(p.ep() == 1 && p.etp() == p.tp(),
                "--expert-model-parallel-size / "
                "--expert-tensor-parallel-size are not supported by serve yet: experts are "
                "split by --tensor-model-parallel-size");
  MG_USER_CHECK(p.tp() * p.pp() == world, "serve runs one copy of the model: the job's ", world,
                " ranks must equal --tensor-model-parallel-size ", p.tp(),
                " x "
                "--pipeline-model-parallel-size ",
                p.pp());
  ParallelConfig check = p;
  check.num_layers_per_virtual_pipeline_stage = 0;  // no virtual stages when serving
  check.num_virtual_stages_per_pipeline_rank = 0;
  check.validate(world, mc.layout_dims(p.tp()), 1, 1);
  return {p.tp(), p.pp(), 1};
}

// What is served: the tokenizer, the chat template and the tokens that end a chat answer, the
// engine's shape and the layout, all checked before any rank builds anything.
struct Served {
  std::unique_ptr<Tokenizer> tok;
  std::optional<ChatTemplate> chat;
  std::string chat_warning;        // why there is no chat template, when one was looked for
  std::vector<int32_t> chat_stop;  // its eos_token and generation_config.json's eos_token_id
  EngineConfig ec;
  RankGrid grid;
};

Served describe_served(const ServeConfig& cfg, const MpiSession& mpi) {
  const GPTConfig& mc = cfg.model;
  Served s;
  TokenizerConfig tc = cfg.tokenizer;
  if (tc.tokenizer_type == "NullTokenizer" && tc.vocab_size <= 0) tc.vocab_size = mc.vocab_size;
  s.tok = make_tokenizer(tc);
  MG_USER_CHECK(s.tok->vocab_size() <= mc.padded_vocab_size(), "--load '", cfg.load,
                "': the tokenizer has ", s.tok->vocab_size(), " tokens but the model only ",
                mc.padded_vocab_size());
  s.grid = serve_grid(cfg, mc, mpi.world_size());
  // The chat template, and the tokens that end a chat answer: its eos_token and
  // generation_config.json's eos_token_id, where they are tokens of this tokenizer.
  const std::string tok_path = !tc.tokenizer_model.empty() ? tc.tokenizer_model : tc.vocab_file;
  s.chat = ChatTemplate::find(tok_path, cfg.chat_template, &s.chat_warning);
  if (s.chat) {
    std::vector<int64_t> ids = generation_eos_ids(tok_path);
    if (const std::vector<int32_t> eos = s.tok->encode(s.chat->eos()); eos.size() == 1)
      ids.push_back(eos[0]);
    for (const int64_t id : ids)
      if (id >= 0 && id < s.tok->vocab_size() && id != s.tok->eod())
        s.chat_stop.push_back(int32_t(id));
  }
  s.ec.max_seq_length = cfg.max_seq_length > 0 ? cfg.max_seq_length : mc.seq_length;
  s.ec.max_requests = cfg.max_requests;
  s.ec.continuous = !cfg.static_batching;
  s.ec.vocab_limit = std::min(s.tok->vocab_size(), mc.vocab_size);
  check_engine_fits(mc, s.ec, cfg.dtype,
                    str_cat("serving --load '", cfg.load, "' (", mc.num_parameters(),
                            " parameters) with --inference-max-requests ", s.ec.max_requests,
                            " x --inference-max-seq-length ", s.ec.max_seq_length),
                    s.grid.tp, s.grid.pp,
                    mpi.active() ? local_size() : 1);  // (every rank calls it)
  return s;
}

// This rank's share of the model and its engine (declared in the order they are built, so
// destroyed in reverse).
struct RankEngine {
  std::optional<ProcessGroups> groups;
  std::unique_ptr<InferenceModel> model;
  std::unique_ptr<Engine> engine;
};

// Builds every rank's engine from the checkpoint. Rank 0 returns true and leads; the others
// follow rank 0's commands until it stops, then return false.
bool start_engine(RankEngine& r, const ServeConfig& cfg, const Served& s, const MpiSession& mpi) {
  const bool distributed = mpi.world_size() > 1;
  try {  // past here a failure may hit some ranks only: end the job rather than leave any waiting
    set_rank_threads();
    if (cfg.device == "cuda") ops::set_device(Device::CUDA, local_rank());
    r.groups.emplace(!mpi.active() ? make_single_process_groups()
                     : cfg.device == "cuda"
                         ? make_gpu_process_groups(s.grid, cfg.distributed_backend)
                         : make_mpi_process_groups(s.grid));
    InferenceLayout layout{r.groups->tp.get(), r.groups->pp.get()};
    std::tie(layout.layer_begin, layout.layer_end) =
        cfg.parallel.stage_layers(cfg.model.num_layers, r.groups->coord.pp);
    r.model = std::make_unique<InferenceModel>(cfg.model, cfg.dtype, s.ec.step_rows(), layout);
    load_checkpoint_weights(cfg.load, r.model->store());
    r.model->prepare();
    r.engine = std::make_unique<Engine>(*r.model, s.ec);
    if (distributed) {  // every rank at once: the command broadcasts' communicator is made here
      std::vector<uint8_t> none;
      mpi_broadcast_idle(none, 0);
    }
    if (mpi.world_rank() != 0) {
      follow(*r.engine);
      return false;
    }
  } catch (const std::exception& e) {
    if (!distributed) throw;
    log_error(str_cat(dynamic_cast<const UsageError*>(&e) ? "megatron serve: error: "
                                                          : "megatron serve: internal error: ",
                      e.what()));
    MpiSession::abort(dynamic_cast<const UsageError*>(&e) ? 2 : 1);
  }
  return true;
}

api::Limits api_limits(const ServeConfig& cfg, const Served& s) {
  api::Limits limits;
  limits.max_prompts = cfg.max_prompts;
  limits.max_context = s.ec.max_seq_length;
  limits.model_name = std::filesystem::path(cfg.load).filename().string();
  if (limits.model_name.empty()) limits.model_name = "megatron";
  limits.chat = s.chat ? &*s.chat : nullptr;
  limits.chat_stop = s.chat_stop;
  return limits;
}

// SIGINT / SIGTERM stop the server from a thread that waits for them: blocked before any other
// thread (OpenMP's, the engine's, the HTTP pool's) exists, so all inherit the mask.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Rank 0: HTTP on a thread of its own, the engine (and MPI) on this one, until a stop signal.
// When the server stops it answers the non-streamed requests in flight (the engine still runs;
// streams are cut by cpp-httplib's shutdown), then the engine loop ends.
void run_http(const ServeConfig& cfg, const Served& s, const api::Limits& limits, EngineLoop& loop,
              const sigset_t& signals) {
  httplib::Server http;
  // A handler thread waits while its requests are in the engine: enough threads that every
  // request the engine can run at once (and as many queued behind them) has one; with
  // cpp-httplib's default (8) the other clients' connections would wait for a thread, not for
  // the engine, and keep-alive connections would keep theirs (a p99 of the whole run).
  const size_t threads = size_t(std::min<int64_t>(2 * cfg.max_requests + 8, 1024));
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(size_t(cfg.max_body_bytes));
  HttpFrontend frontend(loop, *s.tok, limits);
  frontend.add_routes(http);
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
  const GPTConfig& mc = cfg.model;
  log_line(str_cat(" > serving ", limits.model_name, " (", mc.num_parameters(), " parameters, ",
                   dtype_name(cfg.dtype), ", TP ", s.grid.tp, " x PP ", s.grid.pp, ", KV cache ",
                   s.ec.max_requests, " x ", s.ec.max_seq_length, " tokens, ",
                   s.ec.continuous ? "continuous batching" : "static batching",
                   ") on http://127.0.0.1:", port));
  log_line(s.chat
               ? str_cat(" > chat template from ", s.chat->origin())
               : str_cat(" > no chat template", s.chat_warning.empty() ? "" : ": " + s.chat_warning,
                         " (POST /v1/chat/completions is refused; --chat-template FILE gives "
                         "one)"));
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
}

}  // namespace

void serve(const ServeConfig& cfg, const MpiSession& mpi) {
  cfg.validate();
  const sigset_t signals = block_stop_signals();
  const Served served = describe_served(cfg, mpi);
  RankEngine ranks;
  if (!start_engine(ranks, cfg, served, mpi)) return;  // a following rank, stopped
  EngineLoop loop(*ranks.engine, mpi.world_size() > 1);
  run_http(cfg, served, api_limits(cfg, served), loop, signals);
  log_line(" > server stopped");
}

}  // namespace mg
