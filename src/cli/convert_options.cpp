// `megatron convert` flags.
// The option table keeps its hand layout: clang-format 14 takes the accessors' `C& c` for a
// product and breaks the rows apart.
// clang-format off
#include "cli/commands.h"

namespace mg {

#define MG_FIELD(expr) [](ConvertConfig& c) -> auto& { return c.expr; }

const std::vector<Option<ConvertConfig>>& convert_options() {
  using C = ConvertConfig;
  static const std::vector<Option<C>> table = {
      valued<C>("--direction", "NAME", "hf-to-megatron | megatron-to-hf", MG_FIELD(direction)),
      valued<C>("--load", "DIR",
                "source: a Hugging Face model directory (config.json, model.safetensors or "
                "shards + model.safetensors.index.json; GPT2LMHeadModel, LlamaForCausalLM, "
                "MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM) or a checkpoint "
                "directory (its latest checkpoint)",
                MG_FIELD(load)),
      valued<C>("--save", "DIR", "destination directory (new or empty, unless --overwrite)",
                MG_FIELD(save)),
      on_off<C>("--overwrite",
                "write into a non-empty --save directory; into a training checkpoint directory "
                "this makes the converted checkpoint (iteration 0) its latest",
                MG_FIELD(overwrite)),
      valued<C>("--make-vocab-size-divisible-by", "K",
                "hf-to-megatron: pad the vocabulary (zero rows) to a multiple of K",
                MG_FIELD(make_vocab_size_divisible_by)),
      on_off<C>("--allow-unused-tensors",
                "hf-to-megatron: skip tensors of model.safetensors that the config does not use "
                "(default: an error naming them)",
                MG_FIELD(allow_unused_tensors)),
      valued<C>("--target-tensor-parallel-size", "N",
                "hf-to-megatron: write the checkpoint as a TP=N run saves it (any layout loads it)",
                MG_FIELD(target_tp)),
      valued<C>("--target-pipeline-parallel-size", "M",
                "hf-to-megatron: write the checkpoint as a PP=M run saves it",
                MG_FIELD(target_pp)),
      valued<C>("--max-shard-size", "SIZE",
                "megatron-to-hf: split the weights into model-0000i-of-0000n.safetensors files "
                "of at most SIZE (5GB = 5e9 bytes, 500MB, 2GiB, or bytes) with "
                "model.safetensors.index.json, as save_pretrained does",
                MG_FIELD(max_shard_size)),
      valued<C>("--tokenizer-model", "DIR",
                "megatron-to-hf: copy the tokenizer files (tokenizer.json, tokenizer.model, ...) "
                "and generation_config.json from DIR, and, when LOAD has no hf/config.json, the "
                "config.json fields we do not model (bos/eos ids, ...) from DIR/config.json "
                "(default: what hf-to-megatron kept in LOAD/hf)",
                MG_FIELD(tokenizer_model)),
  };
  return table;
}

#undef MG_FIELD

}  // namespace mg
// clang-format on
