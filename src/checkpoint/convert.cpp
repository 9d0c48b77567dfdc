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

void convert(const ConvertConfig& cfg) {
  cfg.validate();
  namespace fs = std::filesystem;
  if (cfg.direction == "hf-to-megatron") {
    const GPTConfig mc =
        hf_gpt2_config(cfg.load + "/config.json", cfg.make_vocab_size_divisible_by);
    const SafetensorsReader hf(cfg.load + "/model.safetensors");
    SingleRankModel h(mc);
    const std::vector<float> p = params_from_hf(hf, mc);
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
  MG_USER_CHECK(fs::is_directory(cfg.save), "--save: cannot create directory '", cfg.save, "'");
  const std::vector<float> params(h.model->params(), h.model->params() + h.model->num_params());
  write_safetensors(cfg.save + "/model.safetensors", params_to_hf(params, mc));
  write_hf_gpt2_config(cfg.save + "/config.json", mc);
  log_line(str_cat(" > converted ", cfg.load, " to ", cfg.save, "/model.safetensors"));
}

}  // namespace mg
