// `megatron serve` flags: the port and the engine's limits (upstream's names: --port,
// --inference-max-seq-length, --inference-max-requests), then every `train` flag (the
// checkpoint, the layout, the precision, the tokenizer), as upstream's server scripts pass them.
#include "cli/commands.h"

namespace mg {

#define MG_FIELD(expr) [](ServeConfig& c) -> auto& { return c.expr; }

const std::vector<Option<ServeConfig>>& serve_options() {
  using C = ServeConfig;
  static const std::vector<Option<C>> table = [] {
    std::vector<Option<C>> t = {
      valued<C>("--port", "N", "HTTP port (0: any free port, logged)", MG_FIELD(port)),
      valued<C>("--chat-template", "FILE", "a Jinja chat template for POST /v1/chat/completions "
                "(default: the tokenizer's, from the tokenizer_config.json or chat_template.jinja "
                "beside --tokenizer-model / --vocab-file)", MG_FIELD(chat_template)),
      on_off<C>("--use-checkpoint-args", "model flags given yield to the checkpoint's (default: "
                "the model is the checkpoint's, and a model flag given must agree with it)",
                MG_FIELD(use_checkpoint_args)),
      valued<C>("--inference-max-seq-length", "N", "prompt + generated tokens per request "
                "(0: the model's --seq-length)", MG_FIELD(max_seq_length)),
      valued<C>("--inference-max-requests", "N", "requests decoded together (the KV cache holds "
                "this many full contexts)", MG_FIELD(max_requests)),
      valued<C>("--inference-dynamic-batching-max-requests", "N", "the same as "
                "--inference-max-requests (upstream's dynamic engine's name)",
                MG_FIELD(max_requests)),
      on_off<C>("--inference-static-batching", "a batch runs to its end before waiting requests "
              "join (Megatron's static server); default: continuous batching",
                MG_FIELD(static_batching)),
      valued<C>("--max-request-bytes", "N", "larger request bodies are refused with HTTP 413",
                MG_FIELD(max_body_bytes)),
    };
    // `train`'s flags: --load (the checkpoint to serve), --bf16 / --fp16 (parameters,
    // activations and the KV cache in 16 bits), the layout, the model, the tokenizer.
    for (Option<C>& o : options_of<C>(train_options(), MG_FIELD(train))) t.push_back(std::move(o));
    return t;
  }();
  return table;
}

#undef MG_FIELD

}  // namespace mg
