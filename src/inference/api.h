// The REST API's requests and responses (Megatron's text-generation server and the
// OpenAI-compatible completions), as JSON in and out: each request body is validated with
// Megatron's rules (ApiError naming the field, HTTP 400) and becomes engine requests; the
// engine's completions become the response body. No HTTP here (inference/server.h).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "inference/engine.h"

namespace mg::api {

// A request the API refuses: the HTTP status (400 unless said) and a message naming the field.
struct ApiError : std::runtime_error {
  explicit ApiError(const std::string& message, int status = 400)
      : std::runtime_error(message), status(status) {}
  int status;
};

enum class Endpoint { Api, Completions, OpenAiCompletions };

// A parsed request: one engine request per prompt, and what the response needs.
struct Parsed {
  Endpoint endpoint = Endpoint::Api;
  std::vector<Request> requests;
  std::vector<std::string> stop;  // stop strings (completions): the text ends before one
  bool logprobs = false, echo = false;
  std::string model;
};

struct Limits {
  int64_t max_prompts = 128;         // Megatron's PUT /api limit
  int64_t max_context = 0;           // --inference-max-seq-length
  std::string model_name;
};

// body: the request's JSON text. The tokenizer encodes the prompts (callers serialise it).
Parsed parse(Endpoint e, const std::string& body, Tokenizer& tok, const Limits& limits);

// The response body for the parsed request's completions (in its prompts' order).
nlohmann::json respond(const Parsed& p, const std::vector<Completion>& done, Tokenizer& tok);

// The text a completion's generated tokens decode to, cut before the first stop string (its
// finish reason then "stop").
std::string completion_text(const Parsed& p, const Completion& c, Tokenizer& tok,
                            std::string* finish_reason);

// GET /v1/models and GET /health.
nlohmann::json models(const std::string& name);

}  // namespace mg::api
