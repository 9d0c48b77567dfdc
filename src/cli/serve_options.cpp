// `megatron serve` flags: the checkpoint, its tokenizer, the port and the engine's limits
// (upstream's names where it has them: --port, --inference-max-seq-length,
// --inference-max-requests).
#include "cli/commands.h"
#include "cli/tokenizer_options.h"

namespace mg {

#define MG_FIELD(expr) [](ServeConfig& c) -> auto& { return c.expr; }

const std::vector<Option<ServeConfig>>& serve_options() {
  using C = ServeConfig;
  static const std::vector<Option<C>> table = [] {
    std::vector<Option<C>> t = {
      valued<C>("--load", "DIR", "the checkpoint to serve (train --save or convert); its model "
                "record gives the shape", MG_FIELD(load)),
      valued<C>("--port", "N", "HTTP port (0: any free port, logged)", MG_FIELD(port)),
      valued<C>("--inference-max-seq-length", "N", "prompt + generated tokens per request "
                "(0: the model's --seq-length)", MG_FIELD(max_seq_length)),
      valued<C>("--inference-max-requests", "N", "requests decoded together (the KV cache holds "
                "this many full contexts)", MG_FIELD(max_requests)),
      on_off<C>("--inference-static-batching", "a batch runs to its end before waiting requests "
              "join (Megatron's static server); default: continuous batching",
                MG_FIELD(static_batching)),
      on_off<C>("--bf16", "serve in bf16 (parameters, activations and the KV cache)",
                MG_FIELD(bf16)),
      valued<C>("--vocab-size", "V", "NullTokenizer: its vocabulary (default: the checkpoint's)",
                MG_FIELD(tokenizer.vocab_size)),
      valued<C>("--max-request-bytes", "N", "larger request bodies are refused with HTTP 413",
                MG_FIELD(max_body_bytes)),
    };
    const auto tok = tokenizer_options<C>(MG_FIELD(tokenizer));
    t.insert(t.end(), tok.begin(), tok.end());
    return t;
  }();
  return table;
}

#undef MG_FIELD

}  // namespace mg
