#include "serve/http_frontend.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mg {

namespace {

using nlohmann::json;

// The completion of a request a stop string ended (cancelled in the engine): its tokens so far.
Completion stopped_at(const Request& r, const std::vector<int32_t>& tokens) {
  Completion c;
  c.prompt = r.prompt;
  c.tokens = tokens;
  c.finish_reason = "stop";
  return c;
}

// Invalid UTF-8 (a generation cut inside a character, a token decoded alone, a body's bytes
// quoted in a parse error) is written as U+FFFD, as Megatron's decoding with errors='replace'.
void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// The status and message of a failed request.
std::pair<int, std::string> fail_message(std::exception_ptr e) {
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
}

}  // namespace

// A streamed request's state, shared by its content provider's calls.
struct HttpFrontend::StreamState {
  api::Parsed p;
  std::shared_ptr<Channel> ch;
  std::unique_ptr<api::EventStream> events;
  size_t seen = 0;
  bool started = false;
};

Completion HttpFrontend::until_stop(const api::Parsed& p, size_t i,
                                    const std::shared_ptr<Channel>& ch) {
  if (p.stop.empty() || p.logprobs) return ch->result();
  api::EventStream watch(p, tok_);  // its stop-string detection; its text is not sent
  for (size_t seen = 0;;) {
    const Channel::Update u = ch->wait(seen);
    if (u.error) std::rethrow_exception(u.error);
    if (u.done) return *u.done;
    bool stopped = false;
    {
      std::lock_guard<std::mutex> lock(tok_mutex_);
      watch.update(u.tokens, u.logprobs, &stopped);
    }
    seen = u.tokens.size();
    if (stopped) {
      loop_.cancel(ch, "a stop string ended it");
      return stopped_at(p.requests[i], u.tokens);
    }
  }
}

bool HttpFrontend::next_events(const std::shared_ptr<StreamState>& st, httplib::DataSink& sink) {
  std::string out;
  if (!st->started) {
    st->started = true;
    std::lock_guard<std::mutex> lock(tok_mutex_);
    out = st->events->start();
  }
  const Channel::Update u = st->ch->wait(st->seen);
  if (u.error) {
    out += "data: " +
           json{{"error", {{"message", fail_message(u.error).second}}}}.dump(
               -1, ' ', false, json::error_handler_t::replace) +
           "\n\n";
    sink.write(out.data(), out.size());
    sink.done();
    return true;
  }
  bool stopped = false, end = bool(u.done);
  {
    std::lock_guard<std::mutex> lock(tok_mutex_);
    if (u.tokens.size() > st->seen) out += st->events->update(u.tokens, u.logprobs, &stopped);
    st->seen = u.tokens.size();
    if (stopped) {  // a stop string: the text ends here, the request leaves the engine
      loop_.cancel(st->ch, "a stop string ended it");
      out += st->events->finish(stopped_at(st->p.requests[0], u.tokens));
      end = true;
    } else if (u.done) {
      out += st->events->finish(*u.done);
    }
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (end) sink.done();
  return true;
}

void HttpFrontend::stream(httplib::Response& res, api::Parsed parsed, std::shared_ptr<Channel> ch) {
  auto st = std::make_shared<StreamState>();
  st->p = std::move(parsed);
  st->ch = std::move(ch);
  st->events = std::make_unique<api::EventStream>(st->p, tok_);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) -> bool {
        try {  // (cpp-httplib calls this outside its handler's try: nothing may escape)
          return next_events(st, sink);
        } catch (...) {
          return false;  // the connection closes; the request is cancelled below
        }
      },
      [this, st](bool success) {
        if (!success) loop_.cancel(st->ch, "its client went away");
      });
}

void HttpFrontend::handle(api::Endpoint e, const httplib::Request& req, httplib::Response& res) {
  try {
    api::Parsed p;
    {
      std::lock_guard<std::mutex> lock(tok_mutex_);
      p = api::parse(e, req.body, tok_, limits_);
    }
    std::vector<std::shared_ptr<Channel>> channels = loop_.submit(p.requests);
    if (p.stream) return stream(res, std::move(p), channels[0]);
    std::vector<Completion> done;
    for (size_t i = 0; i < channels.size(); ++i) done.push_back(until_stop(p, i, channels[i]));
    std::lock_guard<std::mutex> lock(tok_mutex_);
    reply(res, 200, api::respond(p, done, tok_));
  } catch (...) {
    const auto [status, message] = fail_message(std::current_exception());
    reply(res, status, {{"message", message}});
  }
}

void HttpFrontend::add_routes(httplib::Server& http) {
  auto route = [this](api::Endpoint e) {
    return [this, e](const httplib::Request& req, httplib::Response& res) { handle(e, req, res); };
  };
  http.Put("/api", route(api::Endpoint::Api));
  http.Post("/completions", route(api::Endpoint::Completions));
  http.Post("/v1/completions", route(api::Endpoint::OpenAiCompletions));
  http.Post("/v1/chat/completions", route(api::Endpoint::ChatCompletions));
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, api::models(limits_.model_name));
  });
  for (const char* path : {"/health", "/v1/health"})
    http.Get(path, [](const httplib::Request&, httplib::Response& res) {
      reply(res, 200, {{"status", "ok"}});
    });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own message
    const char* what = res.status == 413   ? "the request body is larger than --max-request-bytes"
                       : res.status == 404 ? "no such endpoint"
                       : res.status == 405 ? "method not allowed on this endpoint"
                                           : "bad request";
    reply(res, res.status, {{"message", str_cat(what, " (", req.method, " ", req.path, ")")}});
  });
}

}  // namespace mg
