// `megatron serve`: a checkpoint served over HTTP (cpp-httplib, Debian's libcpp-httplib) by the
// inference engine (inference/engine.h) with continuous batching. Megatron's endpoints
// (PUT /api, POST /completions) and the OpenAI-compatible POST /v1/completions, GET /v1/models
// and GET /health; request bodies are validated by inference/api.h, and a bad request is a 4xx
// with {"message": ...} while the server goes on serving.
#pragma once
#include <cstdint>
#include <string>

#include "data/tokenizer.h"

namespace mg {

struct ServeConfig {
  TokenizerConfig tokenizer;
  std::string load;                // --load: the checkpoint (its model record gives the shape)
  int port = 5000;                 // --port (0: any free port, logged)
  int64_t max_seq_length = 0;      // --inference-max-seq-length (0: the model's --seq-length)
  int64_t max_requests = 8;        // --inference-max-requests: requests decoded together
  bool static_batching = false;    // --inference-static-batching: a batch runs to its end
  bool bf16 = false;               // --bf16: parameters, activations and the KV cache in bf16
  int64_t max_body_bytes = 1 << 20;  // --max-request-bytes: larger bodies get 413
  int64_t max_prompts = 128;       // prompts per request (Megatron's limit)
  void validate() const;
};

// Serves until SIGINT or SIGTERM.
void serve(const ServeConfig& cfg);

}  // namespace mg
