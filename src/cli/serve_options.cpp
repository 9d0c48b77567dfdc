// `megatron serve` flags: the port and the engine's limits (upstream's names: --port,
// --inference-max-seq-length, --inference-max-requests), then every `train` flag (the
// checkpoint, the layout, the precision, the tokenizer), as upstream's server scripts pass them.
// The option table keeps its hand layout: clang-format 14 takes the accessors' `C& c` for a
// product and breaks the rows apart.
// clang-format off
#include "checkpoint/checkpoint.h"
#include "cli/commands.h"
#include "model/fields.h"

namespace mg {

#define MG_FIELD(expr) [](ServeCommand& c) -> auto& { return c.expr; }

const std::vector<Option<ServeCommand>>& serve_options() {
  using C = ServeCommand;
  static const std::vector<Option<C>> table = [] {
    std::vector<Option<C>> t = {
      valued<C>("--port", "N", "HTTP port (0: any free port, logged)", MG_FIELD(serve.port)),
      valued<C>("--chat-template", "FILE", "a Jinja chat template for POST /v1/chat/completions "
                "(default: the tokenizer's, from the tokenizer_config.json or chat_template.jinja "
                "beside --tokenizer-model / --vocab-file)", MG_FIELD(serve.chat_template)),
      on_off<C>("--use-checkpoint-args", "model flags given yield to the checkpoint's (default: "
                "the model is the checkpoint's, and a model flag given must agree with it)",
                MG_FIELD(use_checkpoint_args)),
      valued<C>("--inference-max-seq-length", "N", "prompt + generated tokens per request "
                "(0: the model's --seq-length)", MG_FIELD(serve.max_seq_length)),
      valued<C>("--inference-max-requests", "N", "requests decoded together (the KV cache holds "
                "this many full contexts)", MG_FIELD(serve.max_requests)),
      valued<C>("--inference-dynamic-batching-max-requests", "N", "the same as "
                "--inference-max-requests (upstream's dynamic engine's name)",
                MG_FIELD(serve.max_requests)),
      valued<C>("--inference-max-batch-size", "N", "the same as --inference-max-requests "
                "(upstream's static engine's name)", MG_FIELD(serve.max_requests)),
      valued<C>("--max-batch-size", "N", "the same as --inference-max-requests (upstream's "
                "deprecated name)", MG_FIELD(serve.max_requests)),
      valued<C>("--temperature", "T", "upstream's server-script default; requests carry their "
                "own (read and unused, as upstream)", MG_FIELD(temperature)),
      valued<C>("--top_k", "K", "upstream's server-script default (read and unused)", MG_FIELD(top_k)),
      valued<C>("--top_p", "P", "upstream's server-script default (read and unused)", MG_FIELD(top_p)),
      on_off<C>("--return-log-probs", "upstream's server-script default (read and unused)",
                MG_FIELD(return_log_probs)),
      valued<C>("--num-tokens-to-generate", "N", "upstream's server-script default (read and "
                "unused)", MG_FIELD(num_tokens_to_generate)),
      valued<C>("--prompts", "TEXT...", "upstream's server-script prompts (read and unused)",
                MG_FIELD(prompts)),
      on_off<C>("--inference-static-batching", "a batch runs to its end before waiting requests "
              "join (Megatron's static server); default: continuous batching",
                MG_FIELD(serve.static_batching)),
      valued<C>("--max-request-bytes", "N", "larger request bodies are refused with HTTP 413",
                MG_FIELD(serve.max_body_bytes)),
    };
    // `train`'s flags: --load (the checkpoint to serve), --bf16 / --fp16 (parameters,
    // activations and the KV cache in 16 bits), the layout, the model, the tokenizer.
    for (Option<C>& o : options_of<C>(train_options(), MG_FIELD(train))) t.push_back(std::move(o));
    return t;
  }();
  return table;
}

#undef MG_FIELD

ServeConfig serve_config(const ServeCommand& c, const std::set<std::string>& given) {
  ServeConfig s = c.serve;
  const TrainConfig& t = c.train;
  s.load = t.load;
  MG_USER_CHECK(!s.load.empty(), "--load DIR (a checkpoint) is required");
  const GPTConfig saved = checkpoint_model_config(t.load);
  s.model = saved;
  if (!c.use_checkpoint_args) {
    for (const ModelField& f : model_fields())
      if (given.count(f.flag)) std::visit([&](auto m) { s.model.*m = t.model.*m; }, f.member);
    const GPTConfig a = s.model.resolved(), b = saved.resolved();  // 0 = derived, as resolved
    for (const ModelField& f : model_fields())
      if (given.count(f.flag) && f.structural)
        MG_USER_CHECK(field_text(a, f) == field_text(b, f), f.flag, " ", field_text(s.model, f),
                      " differs from the checkpoint in --load ", t.load, " (", f.key, " ",
                      field_text(b, f), "): drop the flag or load the checkpoint of that model");
  }
  s.tokenizer = t.tokenizer;
  s.parallel = t.parallel;
  s.dtype = t.model_dtype();
  s.device = t.device;
  s.distributed_backend = t.distributed_backend;
  return s;
}

}  // namespace mg
// clang-format on
