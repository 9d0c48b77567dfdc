// `megatron serve`: a checkpoint served over HTTP (cpp-httplib, Debian's libcpp-httplib) by the
// inference engine (inference/engine.h) with continuous batching. Megatron's endpoints
// (PUT /api, POST /completions) and the OpenAI-compatible POST /v1/completions, GET /v1/models
// and GET /health; request bodies are validated by serve/api.h, and a bad request is a 4xx
// with {"message": ...} while the server goes on serving.
#pragma once
#include <cstdint>
#include <string>

#include "comm/mpi_communicator.h"
#include "tokenizer/tokenizer.h"
#include "model/config.h"
#include "parallel/parallel_config.h"
#include "tensor/dtype.h"

namespace mg {

struct ServeConfig {
  // From `train`'s flags (cli/serve_options.cpp: upstream's server scripts pass them):
  GPTConfig model;             // the model: the checkpoint's, with the model flags given
  TokenizerConfig tokenizer;   // --tokenizer-type, ...
  std::string load;            // --load: the checkpoint
  ParallelConfig parallel;     // --tensor-model-parallel-size, --pipeline-model-parallel-size
  DType dtype = DType::F32;    // --bf16 / --fp16: parameters, activations and the KV cache
  std::string device = "cpu";  // --device
  std::string distributed_backend = "nccl";  // --distributed-backend (GPUs)
  // serve's own:
  int port = 5000;                   // --port (0: any free port, logged)
  std::string chat_template;         // --chat-template FILE (default: the tokenizer's)
  int64_t max_seq_length = 0;        // --inference-max-seq-length (0: the model's --seq-length)
  int64_t max_requests = 8;          // --inference-max-requests: requests decoded together
  bool static_batching = false;      // --inference-static-batching: a batch runs to its end
  int64_t max_body_bytes = 1 << 20;  // --max-request-bytes: larger bodies get 413
  int64_t max_prompts = 128;         // prompts per request (Megatron's limit)
  void validate() const;
};

// Serves until SIGINT or SIGTERM: world rank 0 runs the HTTP server and the engine's schedule,
// broadcasting each step's new requests to the other ranks, which run the same steps on their
// shards.
void serve(const ServeConfig& cfg, const MpiSession& mpi);

}  // namespace mg
