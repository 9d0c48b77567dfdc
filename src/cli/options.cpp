#include "cli/options.h"

#include <charconv>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace mg {

namespace {

template <typename T>
T parse_value(const std::string& flag, const std::string& text) {
  T v{};
  if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    MG_USER_CHECK(!text.empty() && end && *end == '\0', flag, " expects a number, got '", text,
                  "'");
    v = T(d);
  } else {
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    MG_USER_CHECK(ec == std::errc() && p == text.data() + text.size(), flag,
                  " expects an integer, got '", text, "'");
  }
  return v;
}

template <typename T>
std::string show_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "on" : "off";
  } else {
    std::ostringstream os;
    os << v;
    return os.str();
  }
}

// A valued option bound to a field reached through `access`.
template <typename Access>
Option valued(std::string flag, std::string metavar, std::string help, Access access) {
  using T = std::remove_reference_t<decltype(access(std::declval<TrainConfig&>()))>;
  return {flag, std::move(metavar), std::move(help),
          [=](TrainConfig& c, const std::string& text) { access(c) = parse_value<T>(flag, text); },
          [=](const TrainConfig& c) { return show_value(access(const_cast<TrainConfig&>(c))); }};
}

template <typename Access>
Option on_off(std::string flag, std::string help, Access access) {
  return {flag, "", std::move(help), [=](TrainConfig& c, const std::string&) { access(c) = true; },
          [=](const TrainConfig& c) { return show_value(access(const_cast<TrainConfig&>(c))); }};
}

#define MG_FIELD(expr) [](TrainConfig& c) -> auto& { return c.expr; }

std::vector<Option> build_table() {
  return {
      // model
      valued("--num-layers", "L", "transformer layers", MG_FIELD(model.num_layers)),
      valued("--hidden-size", "H", "hidden size", MG_FIELD(model.hidden_size)),
      valued("--num-attention-heads", "NH", "attention heads (must divide --hidden-size)",
             MG_FIELD(model.num_attention_heads)),
      valued("--ffn-hidden-size", "F", "MLP width (0: 4 x hidden size)",
             MG_FIELD(model.ffn_hidden_size)),
      valued("--seq-length", "S", "tokens per sample", MG_FIELD(model.seq_length)),
      valued("--max-position-embeddings", "P", "rows of the position table (0: --seq-length)",
             MG_FIELD(model.max_position_embeddings)),
      valued("--vocab-size", "V", "vocabulary size before padding", MG_FIELD(model.vocab_size)),
      valued("--make-vocab-size-divisible-by", "K", "pad the vocabulary to a multiple of K",
             MG_FIELD(model.make_vocab_size_divisible_by)),
      valued("--init-method-std", "X", "std of the N(0, std) weight init",
             MG_FIELD(model.init_method_std)),
      valued("--norm-epsilon", "X", "LayerNorm epsilon", MG_FIELD(model.norm_epsilon)),
      // batch and run length
      valued("--micro-batch-size", "B", "samples per micro-batch", MG_FIELD(micro_batch_size)),
      valued("--global-batch-size", "G",
             "samples per optimizer step (grads accumulate over G / B micro-batches; 0: B)",
             MG_FIELD(global_batch_size)),
      valued("--train-iters", "N", "optimizer steps to run", MG_FIELD(train_iters)),
      // optimizer and schedule
      valued("--optimizer", "NAME", "adam (AdamW)", MG_FIELD(optimizer)),
      valued("--lr", "X", "peak learning rate", MG_FIELD(lr)),
      valued("--min-lr", "X", "learning-rate floor", MG_FIELD(min_lr)),
      valued("--lr-decay-style", "NAME", "constant | linear | cosine | inverse-square-root",
             MG_FIELD(lr_decay_style)),
      valued("--lr-warmup-iters", "N", "linear warmup iterations", MG_FIELD(lr_warmup_iters)),
      valued("--lr-warmup-init", "X", "learning rate at the start of warmup",
             MG_FIELD(lr_warmup_init)),
      valued("--lr-decay-iters", "N", "decay horizon in iterations (0: --train-iters)",
             MG_FIELD(lr_decay_iters)),
      valued("--weight-decay", "X", "decoupled weight decay (not on biases / 1-D params)",
             MG_FIELD(adam.weight_decay)),
      valued("--clip-grad", "X", "global grad-norm clip (0: off)", MG_FIELD(adam.clip_grad)),
      valued("--adam-beta1", "X", "Adam beta1", MG_FIELD(adam.beta1)),
      valued("--adam-beta2", "X", "Adam beta2", MG_FIELD(adam.beta2)),
      valued("--adam-eps", "X", "Adam epsilon", MG_FIELD(adam.eps)),
      valued("--seed", "N", "random seed for init and data order", MG_FIELD(seed)),
      // parallelism (data-parallel size = world / (TP x PP))
      valued("--tensor-model-parallel-size", "TP", "tensor-parallel ranks (adjacent ranks)",
             MG_FIELD(parallel.tensor_model_parallel_size)),
      valued("--pipeline-model-parallel-size", "PP", "pipeline stages",
             MG_FIELD(parallel.pipeline_model_parallel_size)),
      on_off("--sequence-parallel", "split LayerNorm/residual activations along the sequence "
             "across TP ranks", MG_FIELD(parallel.sequence_parallel)),
      valued("--decoder-first-pipeline-num-layers", "N",
             "layers on the first pipeline stage (0: even split)",
             MG_FIELD(parallel.decoder_first_pipeline_num_layers)),
      valued("--decoder-last-pipeline-num-layers", "N",
             "layers on the last pipeline stage (0: even split)",
             MG_FIELD(parallel.decoder_last_pipeline_num_layers)),
      valued("--ddp-bucket-size", "N", "gradient elements per data-parallel all-reduce",
             MG_FIELD(parallel.ddp_bucket_size)),
      // data
      on_off("--mock-data", "train on Megatron's synthetic mock dataset", MG_FIELD(mock_data)),
      valued("--split", "A,B,C", "train/valid/test weights", MG_FIELD(split)),
      on_off("--eod-mask-loss", "exclude positions whose input is EOD from the loss",
             MG_FIELD(eod_mask_loss)),
      on_off("--reset-position-ids", "restart position ids after each EOD",
             MG_FIELD(reset_position_ids)),
      // logging and evaluation
      valued("--log-interval", "N", "iterations per log line", MG_FIELD(log_interval)),
      valued("--eval-interval", "N", "iterations between validations (0: never)",
             MG_FIELD(eval_interval)),
      valued("--eval-iters", "N", "global batches per validation", MG_FIELD(eval_iters)),
      valued("--dump-final-params", "PATH",
             "after training, write all parameters in the single-rank layout (raw fp32 to PATH, "
             "names/shapes/offsets to PATH.json); for layout-parity checks",
             MG_FIELD(dump_final_params)),
  };
}

#undef MG_FIELD

}  // namespace

const std::vector<Option>& train_options() {
  static const std::vector<Option> table = build_table();
  return table;
}

TrainConfig parse_train_args(const std::vector<std::string>& args) {
  TrainConfig cfg;
  const auto& table = train_options();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inline_value = false;
    if (auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    const Option* opt = nullptr;
    for (const Option& o : table)
      if (o.flag == flag) opt = &o;
    MG_USER_CHECK(opt != nullptr, flag.starts_with("--") ? "unknown flag " : "unexpected argument ",
                  flag, " (see `megatron train --help`)");
    if (opt->metavar.empty()) {
      MG_USER_CHECK(!inline_value, flag, " takes no value");
    } else if (!inline_value) {
      MG_USER_CHECK(i + 1 < args.size(), flag, " needs a value (", opt->metavar, ")");
      value = args[++i];
    }
    opt->set(cfg, value);
  }
  return cfg;
}

std::string train_help() {
  std::ostringstream os;
  os << "usage: megatron train [flags]\n\nTrains a GPT-2-style model. Flags follow Megatron-LM's "
        "names and meanings.\n\n";
  const TrainConfig defaults;
  for (const Option& o : train_options()) {
    std::string left = "  " + o.flag + (o.metavar.empty() ? "" : " " + o.metavar);
    if (left.size() < 34) left.resize(34, ' ');
    else left += "  ";
    os << left << o.help;
    if (!o.metavar.empty()) os << " [default: " << o.show(defaults) << "]";
    os << "\n";
  }
  return os.str();
}

}  // namespace mg
