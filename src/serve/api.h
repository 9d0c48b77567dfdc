// The REST API's requests and responses (Megatron's text-generation server and the
// OpenAI-compatible completions), as JSON in and out: each request body is validated with
// Megatron's rules (ApiError naming the field, HTTP 400) and becomes engine requests; the
// engine's completions become the response body. No HTTP here (serve/server.h).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/chat_template.h"
#include "inference/engine.h"

namespace mg::api {

// A request the API refuses: the HTTP status (400 unless said) and a message naming the field.
struct ApiError : std::runtime_error {
  explicit ApiError(const std::string& message, int status = 400)
      : std::runtime_error(message), status(status) {}
  int status;
};

enum class Endpoint { Api, Completions, OpenAiCompletions, ChatCompletions };

// A parsed request: one engine request per prompt, and what the response needs.
struct Parsed {
  Endpoint endpoint = Endpoint::Api;
  std::vector<Request> requests;
  std::vector<std::string> stop;  // stop strings (completions): the text ends before one
  bool logprobs = false, echo = false;
  bool stream = false, include_usage = false;  // "stream", "stream_options": {"include_usage"}
  std::string model, id;                       // OpenAI's: the model asked for, "cmpl-N"
  int64_t created = 0;                         // Unix seconds
};

struct Limits {
  int64_t max_prompts = 128;  // Megatron's PUT /api limit
  int64_t max_context = 0;    // --inference-max-seq-length
  std::string model_name;
  const ChatTemplate* chat = nullptr;  // POST /v1/chat/completions (none: refused, naming
                                       // --chat-template)
  std::vector<int32_t> chat_stop;      // tokens that end a chat answer besides end-of-text
                                       // (the template's eos_token, generation_config.json's)
};

// body: the request's JSON text. The tokenizer encodes the prompts (callers serialise it).
Parsed parse(Endpoint e, const std::string& body, Tokenizer& tok, const Limits& limits);

// The response body for the parsed request's completions (in its prompts' order).
nlohmann::json respond(const Parsed& p, const std::vector<Completion>& done, Tokenizer& tok);

// The text a completion's generated tokens decode to, cut before the first stop string (its
// finish reason then "stop").
std::string completion_text(const Parsed& p, const Completion& c, Tokenizer& tok,
                            std::string* finish_reason);

// A streamed completion (one prompt) as OpenAI's server-sent events: "data: {chunk}\n\n" for
// the start (chat: the assistant role), each new piece of text, the end (finish reason; the
// usage with include_usage), then "data: [DONE]\n\n". Text is sent as it becomes final: a
// character's bytes whole, and never the start of a stop string (held until it is not one).
class EventStream {
 public:
  EventStream(const Parsed& p, Tokenizer& tok) : p_(p), tok_(tok) {}
  std::string start();
  // generated: every token so far (logprobs: theirs). Sets *stopped when a stop string ended
  // the text (the request should be cancelled; finish() follows).
  std::string update(const std::vector<int32_t>& generated, const std::vector<float>& logprobs,
                     bool* stopped);
  std::string finish(const Completion& c);

 private:
  // final: the generation ended, nothing is held back.
  std::string emit(const std::vector<int32_t>& generated, const std::vector<float>& logprobs,
                   bool* stopped, bool final);
  std::string chunk(const nlohmann::json& choice, const nlohmann::json& usage = nullptr) const;
  std::string piece(const std::string& text, const nlohmann::json& logprobs) const;
  const Parsed& p_;
  Tokenizer& tok_;
  std::string text_;                   // the generated text decoded so far
  size_t prefix_ = 0, read_ = 0;       // tokens: the decoding window's start, those in text_
  size_t sent_ = 0, sent_tokens_ = 0;  // bytes of text_ and tokens' log-probs sent
  bool stopped_ = false;
};

// GET /v1/models and GET /health.
nlohmann::json models(const std::string& name);

}  // namespace mg::api
