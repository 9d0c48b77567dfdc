// `megatron serve`: a checkpoint served over HTTP (cpp-httplib, Debian's libcpp-httplib) by the
// inference engine (inference/engine.h) with continuous batching. Megatron's endpoints
// (PUT /api, POST /completions) and the OpenAI-compatible POST /v1/completions, GET /v1/models
// and GET /health; request bodies are validated by inference/api.h, and a bad request is a 4xx
// with {"message": ...} while the server goes on serving.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include "comm/mpi_communicator.h"
#include "train/train_config.h"

namespace mg {

struct ServeConfig {
  // Every `train` flag, as upstream's server scripts pass them: --load (the checkpoint, whose
  // model record gives the shape; model flags given must agree with it), the layout
  // (--tensor-model-parallel-size, --pipeline-model-parallel-size; the job's ranks must be
  // TP x PP), --bf16 / --fp16, --device, the tokenizer; the others are read and unused.
  TrainConfig train;
  int port = 5000;
  std::string chat_template;       // --chat-template FILE (default: the tokenizer's)
  bool use_checkpoint_args = false;  // --use-checkpoint-args: model flags given yield to the
                                     // checkpoint's (upstream's meaning) instead of being checked                 // --port (0: any free port, logged)
  int64_t max_seq_length = 0;      // --inference-max-seq-length (0: the model's --seq-length)
  int64_t max_requests = 8;        // --inference-max-requests: requests decoded together
  bool static_batching = false;    // --inference-static-batching: a batch runs to its end
  int64_t max_body_bytes = 1 << 20;  // --max-request-bytes: larger bodies get 413
  int64_t max_prompts = 128;       // prompts per request (Megatron's limit)
  void validate() const;
};

// Serves until SIGINT or SIGTERM: world rank 0 runs the HTTP server and the engine's schedule,
// broadcasting each step's new requests to the other ranks, which run the same steps on their
// shards. `given`: the flags that appeared.
void serve(const ServeConfig& cfg, const std::set<std::string>& given, const MpiSession& mpi);

}  // namespace mg
