// `megatron train` flags: Megatron-LM's names and meanings.
#include "cli/commands.h"

namespace mg {

#define MG_FIELD(expr) [](TrainConfig& c) -> auto& { return c.expr; }

const std::vector<Option<TrainConfig>>& train_options() {
  using C = TrainConfig;
  static const std::vector<Option<C>> table = {
      // model
      valued<C>("--num-layers", "L", "transformer layers", MG_FIELD(model.num_layers)),
      valued<C>("--hidden-size", "H", "hidden size", MG_FIELD(model.hidden_size)),
      valued<C>("--num-attention-heads", "NH", "attention heads (must divide --hidden-size)",
                MG_FIELD(model.num_attention_heads)),
      valued<C>("--ffn-hidden-size", "F", "MLP width (0: 4 x hidden size)",
                MG_FIELD(model.ffn_hidden_size)),
      valued<C>("--seq-length", "S", "tokens per sample", MG_FIELD(model.seq_length)),
      valued<C>("--max-position-embeddings", "P", "rows of the position table (0: --seq-length)",
                MG_FIELD(model.max_position_embeddings)),
      valued<C>("--vocab-size", "V",
                "vocabulary size before padding (NullTokenizer / --mock-data; a tokenizer sets it)",
                MG_FIELD(model.vocab_size)),
      valued<C>("--make-vocab-size-divisible-by", "K", "pad the vocabulary to a multiple of K x TP",
                MG_FIELD(model.make_vocab_size_divisible_by)),
      valued<C>("--init-method-std", "X", "std of the N(0, std) weight init",
                MG_FIELD(model.init_method_std)),
      valued<C>("--norm-epsilon", "X", "LayerNorm epsilon", MG_FIELD(model.norm_epsilon)),
      // batch and run length
      valued<C>("--micro-batch-size", "B", "samples per micro-batch", MG_FIELD(micro_batch_size)),
      valued<C>("--global-batch-size", "G",
                "samples per optimizer step over all DP ranks (0: B x DP)",
                MG_FIELD(global_batch_size)),
      valued<C>("--train-iters", "N", "optimizer steps to run", MG_FIELD(train_iters)),
      // optimizer and schedule
      valued<C>("--optimizer", "NAME", "adam (AdamW)", MG_FIELD(optimizer)),
      valued<C>("--lr", "X", "peak learning rate", MG_FIELD(lr)),
      valued<C>("--min-lr", "X", "learning-rate floor", MG_FIELD(min_lr)),
      valued<C>("--lr-decay-style", "NAME", "constant | linear | cosine | inverse-square-root",
                MG_FIELD(lr_decay_style)),
      valued<C>("--lr-warmup-iters", "N", "linear warmup iterations", MG_FIELD(lr_warmup_iters)),
      valued<C>("--lr-warmup-init", "X", "learning rate at the start of warmup",
                MG_FIELD(lr_warmup_init)),
      valued<C>("--lr-decay-iters", "N", "decay horizon in iterations (0: --train-iters)",
                MG_FIELD(lr_decay_iters)),
      valued<C>("--weight-decay", "X", "decoupled weight decay (not on biases / 1-D params)",
                MG_FIELD(adam.weight_decay)),
      valued<C>("--clip-grad", "X", "global grad-norm clip (0: off)", MG_FIELD(adam.clip_grad)),
      valued<C>("--adam-beta1", "X", "Adam beta1", MG_FIELD(adam.beta1)),
      valued<C>("--adam-beta2", "X", "Adam beta2", MG_FIELD(adam.beta2)),
      valued<C>("--adam-eps", "X", "Adam epsilon", MG_FIELD(adam.eps)),
      valued<C>("--seed", "N", "random seed for init and data order", MG_FIELD(seed)),
      // parallelism (data-parallel size = world / (TP x PP))
      valued<C>("--tensor-model-parallel-size", "TP", "tensor-parallel ranks (adjacent ranks)",
                MG_FIELD(parallel.tensor_model_parallel_size)),
      valued<C>("--pipeline-model-parallel-size", "PP", "pipeline stages",
                MG_FIELD(parallel.pipeline_model_parallel_size)),
      on_off<C>("--sequence-parallel",
                "split LayerNorm/residual activations along the sequence across TP ranks",
                MG_FIELD(parallel.sequence_parallel)),
      valued<C>("--decoder-first-pipeline-num-layers", "N",
                "layers on the first pipeline stage (0: even split)",
                MG_FIELD(parallel.decoder_first_pipeline_num_layers)),
      valued<C>("--decoder-last-pipeline-num-layers", "N",
                "layers on the last pipeline stage (0: even split)",
                MG_FIELD(parallel.decoder_last_pipeline_num_layers)),
      valued<C>("--ddp-bucket-size", "N", "gradient elements per data-parallel all-reduce",
                MG_FIELD(parallel.ddp_bucket_size)),
      // data
      on_off<C>("--mock-data", "train on Megatron's synthetic mock dataset", MG_FIELD(mock_data)),
      valued<C>("--data-path", "[W] PREFIX...",
                "preprocessed datasets (PREFIX.bin/.idx), optionally weighted: W1 P1 W2 P2 ...",
                MG_FIELD(data_path)),
      valued<C>("--train-data-path", "[W] PREFIX...", "training blend (instead of --split)",
                MG_FIELD(train_data_path)),
      valued<C>("--valid-data-path", "[W] PREFIX...", "validation blend",
                MG_FIELD(valid_data_path)),
      valued<C>("--test-data-path", "[W] PREFIX...", "test blend", MG_FIELD(test_data_path)),
      valued<C>("--data-cache-path", "DIR",
                "index cache directory (default: <dataset dir>/cache/GPTDataset_indices)",
                MG_FIELD(data_cache_path)),
      valued<C>("--split", "A,B,C", "train/valid/test weights", MG_FIELD(split)),
      valued<C>("--tokenizer-type", "NAME", "GPT2BPETokenizer | NullTokenizer",
                MG_FIELD(tokenizer.tokenizer_type)),
      valued<C>("--vocab-file", "PATH", "GPT-2 vocab.json / encoder.json",
                MG_FIELD(tokenizer.vocab_file)),
      valued<C>("--merge-file", "PATH", "GPT-2 merges.txt / vocab.bpe",
                MG_FIELD(tokenizer.merge_file)),
      on_off<C>("--eod-mask-loss", "exclude positions whose input is EOD from the loss",
                MG_FIELD(eod_mask_loss)),
      on_off<C>("--reset-position-ids", "restart position ids after each EOD",
                MG_FIELD(reset_position_ids)),
      on_off<C>("--reset-attention-mask", "tokens after an EOD do not attend to tokens before it",
                MG_FIELD(reset_attention_mask)),
      // logging and evaluation
      valued<C>("--log-interval", "N", "iterations per log line", MG_FIELD(log_interval)),
      valued<C>("--eval-interval", "N", "iterations between validations (0: never)",
                MG_FIELD(eval_interval)),
      valued<C>("--eval-iters", "N", "global batches per validation", MG_FIELD(eval_iters)),
      valued<C>("--dump-final-params", "PATH",
                "after training, write all parameters in the single-rank layout (raw fp32 to "
                "PATH, names/shapes/offsets to PATH.json)",
                MG_FIELD(dump_final_params)),
  };
  return table;
}

#undef MG_FIELD

}  // namespace mg
