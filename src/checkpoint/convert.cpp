#include "checkpoint/convert.h"

#include <filesystem>
#include <set>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_writer.h"
#include "model/gpt.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/hf_llama_config.h"
#include "checkpoint/hf_llama_convert.h"
#include "checkpoint/json_fields.h"
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
  MG_USER_CHECK(make_vocab_size_divisible_by > 0,
                "--make-vocab-size-divisible-by must be positive");
  MG_USER_CHECK(target_tp >= 1 && target_tp <= 4096,
                "--target-tensor-parallel-size must be in "
                "[1, 4096], got ",
                target_tp);
  MG_USER_CHECK(target_pp >= 1 && target_pp <= 4096,
                "--target-pipeline-parallel-size must be in "
                "[1, 4096], got ",
                target_pp);
  parse_shard_size(max_shard_size, "--max-shard-size");
}

void load_checkpoint_weights(const std::string& dir, GPTModel& model) {
  load_checkpoint_weights(dir, model.store());
}

void load_checkpoint_weights(const std::string& dir, ParamStore& store) {
  CheckpointConfig cc;
  cc.model = store.config();
  cc.load = dir;
  cc.no_load_optim = true;
  cc.exit_on_missing_checkpoint = true;
  Optimizer opt(std::vector<ParamRun>{}, OptimizerConfig{}, DType::F32, nullptr);  // no state
  ProcessGroups g = make_single_process_groups();
  TrainProgress progress;
  load_checkpoint({store, opt, g, cc, false}, progress);
}

namespace {

namespace fs = std::filesystem;

// --save must be new or empty; a directory with a training checkpoint or other files only with
// --overwrite (converting into a checkpoint directory would make iteration 0 its latest).
void check_destination(const ConvertConfig& cfg) {
  std::error_code ec;
  if (!fs::exists(cfg.save, ec)) return;
  MG_USER_CHECK(fs::is_directory(cfg.save, ec), "--save '", cfg.save,
                "' exists and is not a directory");
  if (cfg.overwrite) return;
  bool training = false, empty = true;
  for (const auto& e : fs::directory_iterator(cfg.save, ec)) {
    const std::string n = e.path().filename().string();
    training |= n == kLatestFile || n.rfind("iter_", 0) == 0;
    empty = false;
  }
  MG_USER_CHECK(!ec, "--save '", cfg.save, "' cannot be listed: ", ec.message());
  MG_USER_CHECK(!training, "--save '", cfg.save,
                "' holds a training checkpoint "
                "(latest_checkpointed_iteration.txt or iter_* directories); converting into it "
                "would replace its latest checkpoint: choose a new directory, or pass --overwrite");
  MG_USER_CHECK(empty, "--save '", cfg.save,
                "' is not empty: choose a new or empty directory, or "
                "pass --overwrite");
}

// GPT-2 from HF: the whole model in f32 (small), streamed into the checkpoint writer.
void gpt2_hf_to_megatron(const ConvertConfig& cfg) {
  GPTConfig mc = hf_gpt2_config(cfg.load + "/config.json", cfg.make_vocab_size_divisible_by);
  mc.vocab_pad_tp = cfg.target_tp;
  const SafetensorsReader hf(cfg.load + "/model.safetensors");
  const std::vector<float> p = params_from_hf(hf, mc, cfg.allow_unused_tensors);
  CheckpointWriter out(cfg.save, mc, cfg.target_tp, cfg.target_pp, DType::F32,
                       {"convert", "--direction", cfg.direction, "--load", cfg.load, "--save",
                        cfg.save});
  const ParamLayout layout = gpt_param_layout(mc);
  for (const ParamSpec& s : layout.params())
    out.add(s.name, reinterpret_cast<const char*>(p.data() + s.offset));
  out.finish();
  log_line(str_cat(" > converted ", cfg.load, " (", mc.num_layers, " layers, hidden ",
                   mc.hidden_size, ", vocab ", mc.vocab_size, " padded to ", mc.padded_vocab_size(),
                   ") to ", cfg.save));
}

void gpt2_megatron_to_hf(const ConvertConfig& cfg, const GPTConfig& mc) {
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

void convert_files(const ConvertConfig& cfg) {
  if (cfg.direction == "hf-to-megatron") {
    // config.json's "architectures" picks the family; a GPT-2 file may lack it.
    const std::string path = cfg.load + "/config.json";
    const nlohmann::json config =
        ckpt::JsonFields::parse_object(ckpt::read_text_file(path), "HF config '" + path + "'");
    const std::string arch =
        config.contains("architectures") ? hf_architecture(config, path) : "GPT2LMHeadModel";
    if (arch == "GPT2LMHeadModel") return gpt2_hf_to_megatron(cfg);
    MG_USER_CHECK(is_hf_llama_family(arch), "HF config '", path, "': field 'architectures' is \"",
                  arch, "\"; megatron convert reads ", kHfArchitecturesRead);
    return llama_hf_to_megatron(cfg, config, path);
  }
  const GPTConfig mc = checkpoint_model_config(cfg.load);
  if (mc.non_gpt2_features().empty()) return gpt2_megatron_to_hf(cfg, mc);
  llama_megatron_to_hf(cfg);
}

}  // namespace

void convert(const ConvertConfig& cfg) {
  cfg.validate();
  check_destination(cfg);
  std::error_code ec;
  const bool created = !fs::exists(cfg.save, ec);
  std::set<std::string> before;
  if (!created)
    for (const auto& e : fs::directory_iterator(cfg.save, ec)) before.insert(e.path().filename());
  try {
    convert_files(cfg);
  } catch (...) {
    // Every file is written atomically (no .tmp survives); a directory this run created goes
    // too, and in one that existed, whatever this run added (finished shards of a failed export).
    if (created) {
      fs::remove_all(cfg.save, ec);
    } else {
      std::vector<fs::path> added;
      for (const auto& e : fs::directory_iterator(cfg.save, ec))
        if (!before.count(e.path().filename())) added.push_back(e.path());
      for (const fs::path& p : added) fs::remove_all(p, ec);
    }
    throw;
  }
}

}  // namespace mg
