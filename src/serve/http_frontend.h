// The HTTP side of `megatron serve`: Megatron's PUT /api and the OpenAI-compatible routes,
// each request parsed (serve/api.h), submitted to the engine loop and answered whole or
// streamed as server-sent events; a stop string cancels its request, and so does a client that
// goes away mid-stream.
#pragma once
#include <httplib.h>

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "serve/api.h"
#include "serve/engine_loop.h"
#include "tokenizer/tokenizer.h"

namespace mg {

class HttpFrontend {
 public:
  HttpFrontend(EngineLoop& loop, Tokenizer& tok, api::Limits limits)
      : loop_(loop), tok_(tok), limits_(std::move(limits)) {}
  // Every route, the models list, the health checks and the error pages.
  void add_routes(httplib::Server& http);

 private:
  struct StreamState;
  void handle(api::Endpoint e, const httplib::Request& req, httplib::Response& res);
  // A request's completion; with stop strings (and no log-probabilities, which need the whole
  // run), followed as it is generated and cancelled at the first stop string instead of running
  // on to its token budget.
  Completion until_stop(const api::Parsed& p, size_t i, const std::shared_ptr<Channel>& ch);
  // A streamed answer (server-sent events): the channel's tokens as they come; a client that
  // goes away (a failed write, or too slow for the write timeout) cancels its request.
  void stream(httplib::Response& res, api::Parsed parsed, std::shared_ptr<Channel> ch);
  // Writes a stream's next events (waiting for its next tokens); false: the client is gone.
  bool next_events(const std::shared_ptr<StreamState>& st, httplib::DataSink& sink);

  EngineLoop& loop_;
  Tokenizer& tok_;
  const api::Limits limits_;
  std::mutex tok_mutex_;  // the tokenizer's caches: one request at a time
};

}  // namespace mg
