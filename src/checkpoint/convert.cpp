#include "checkpoint/convert.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/files.h"
#include "checkpoint/hf_gpt2.h"
#include "checkpoint/single_rank.h"
#include "core/log.h"

namespace mg {

void ConvertConfig::validate() const {
  MG_USER_CHECK(direction == "hf-to-megatron" || direction == "megatron-to-hf", "--direction '",
                direction, "': use hf-to-megatron or megatron-to-hf");
  MG_USER_CHECK(!load.empty(), "--load DIR is required");
  MG_USER_CHECK(!save.empty(), "--save DIR is required");
  MG_USER_CHECK(make_vocab_size_divisible_by > 0, "--make-vocab-size-divisible-by must be positive");
}

void load_checkpoint_weights(const std::string& dir, GPTModel& model) {
  CheckpointConfig cc;
  cc.model = model.config();
  cc.load = dir;
  cc.no_load_optim = true;
  cc.exit_on_missing_checkpoint = true;
  Optimizer opt(model.layout(), OptimizerConfig{});
  ProcessGroups g = make_single_process_groups();
  TrainProgress progress;
  load_checkpoint({model, opt, g, cc, false}, progress);
}

namespace {

namespace fs = std::filesystem;

// --save must be new or empty; a directory with a training checkpoint or other files only with
// --overwrite (converting into a checkpoint directory would make iteration 0 its latest).
void check_destination(const ConvertConfig& cfg) {
  std::error_code ec;
  if (!fs::exists(cfg.save, ec)) return;
  MG_USER_CHECK(fs::is_directory(cfg.save, ec), "--save '", cfg.save, "' exists and is not a directory");
  if (cfg.overwrite) return;
  bool training = false, empty = true;
  for (const auto& e : fs::directory_iterator(cfg.save, ec)) {
    const std::string n = e.path().filename().string();
    training |= n == kLatestFile || n.rfind("iter_", 0) == 0;
    empty = false;
  }
  MG_USER_CHECK(!ec, "--save '", cfg.save, "' cannot be listed: ", ec.message());
  MG_USER_CHECK(!training, "--save '", cfg.save, "' holds a training checkpoint "
                "(latest_checkpointed_iteration.txt or iter_* directories); converting into it "
                "would replace its latest checkpoint: choose a new directory, or pass --overwrite");
  MG_USER_CHECK(empty, "--save '", cfg.save, "' is not empty: choose a new or empty directory, or "
                "pass --overwrite");
}

void convert_files(const ConvertConfig& cfg) {
  if (cfg.direction == "hf-to-megatron") {
    const GPTConfig mc =
        hf_gpt2_config(cfg.load + "/config.json", cfg.make_vocab_size_divisible_by);
    const SafetensorsReader hf(cfg.load + "/model.safetensors");
    SingleRankModel h(mc);
    const std::vector<float> p = params_from_hf(hf, mc, cfg.allow_unused_tensors);
    std::copy(p.begin(), p.end(), h.model->params());
    h.ckpt.save = cfg.save;
    h.ckpt.no_save_optim = true;
    h.ckpt.argv = {"convert", "--direction", cfg.direction, "--load", cfg.load, "--save", cfg.save};
    save_checkpoint(h.io(), TrainProgress{});
    log_line(str_cat(" > converted ", cfg.load, " (", mc.num_layers, " layers, hidden ",
                     mc.hidden_size, ", vocab ", mc.vocab_size, " padded to ",
                     mc.padded_vocab_size(), ") to ", cfg.save));
    return;
  }
  const GPTConfig mc = checkpoint_model_config(cfg.load);
  std::string features;
  for (const std::string& f : mc.non_gpt2_features()) features += (features.empty() ? "" : ", ") + f;
  MG_USER_CHECK(features.empty(), "--load ", cfg.load,
                ": megatron convert writes Hugging Face GPT-2 only, and this checkpoint's model "
                "has ", features, ": converting it is not supported by megatron-cpp yet");
  SingleRankModel h(mc);
  h.ckpt.load = cfg.load;
  h.ckpt.no_load_optim = true;
  h.ckpt.exit_on_missing_checkpoint = true;
  TrainProgress progress;
  load_checkpoint(h.io(), progress);
  std::error_code ec;
  fs::create_directories(cfg.save, ec);
  MG_USER_CHECK(fs::is_directory(cfg.save, ec), "--save: cannot create directory '", cfg.save, "'");
  const std::vector<float> params(h.model->params(), h.model->params() + h.model->num_params());
  write_safetensors(cfg.save + "/model.safetensors", params_to_hf(params, mc));
  write_hf_gpt2_config(cfg.save + "/config.json", mc);
  log_line(str_cat(" > converted ", cfg.load, " to ", cfg.save, "/model.safetensors"));
}

}  // namespace

void convert(const ConvertConfig& cfg) {
  cfg.validate();
  check_destination(cfg);
  std::error_code ec;
  const bool created = !fs::exists(cfg.save, ec);
  try {
    convert_files(cfg);
  } catch (...) {
    // Every file is written atomically (no .tmp survives); a directory this run created goes too.
    if (created) fs::remove_all(cfg.save, ec);
    throw;
  }
}

}  // namespace mg
