#include "train/checkpoint_model.h"

#include "checkpoint/checkpoint.h"
#include "core/log.h"
#include "model/fields.h"

namespace mg {

bool model_from_checkpoint(TrainConfig& cfg, const std::set<std::string>& given) {
  if (cfg.load.empty() || latest_checkpoint_dir(cfg.load).empty()) return false;
  const GPTConfig saved = checkpoint_model_config(cfg.load);
  std::string taken;
  for (const ModelField& f : model_fields()) {
    if (given.count(f.flag)) continue;
    std::visit([&](auto m) { cfg.model.*m = saved.*m; }, f.member);
    if (f.structural)
      taken += std::string(taken.empty() ? "" : ", ") + f.flag + " " + field_text(cfg.model, f);
  }
  if (!taken.empty())
    log_line(
        str_cat(" > model flags not given, from the checkpoint in --load ", cfg.load, ": ", taken));
  return true;
}

int64_t train_vocab_size(const TrainConfig& cfg, int64_t tokenizer_vocab, bool model_from_ckpt,
                         const std::set<std::string>& given) {
  if (!model_from_ckpt || given.count("--vocab-size")) return tokenizer_vocab;
  MG_USER_CHECK(tokenizer_vocab <= cfg.model.vocab_size, "the tokenizer (--tokenizer-type ",
                cfg.tokenizer.tokenizer_type, ") has ", tokenizer_vocab,
                " tokens but the checkpoint in --load ", cfg.load, " has vocab_size ",
                cfg.model.vocab_size, ": use the tokenizer the model was trained with");
  return cfg.model.vocab_size;
}

}  // namespace mg
