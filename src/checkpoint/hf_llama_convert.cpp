#include "checkpoint/hf_llama_convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "backend/ops.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/files.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_llama_config.h"
#include "checkpoint/json_fields.h"
#include "core/log.h"
#include "layers/block_params.h"
#include "core/timer.h"
#include "parallel/parallel_config.h"

namespace mg {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string>& hf_side_files() {
  static const std::vector<std::string> files = {// config.json first
                                                 "config.json",      "generation_config.json",
                                                 "tokenizer.json",   "tokenizer_config.json",
                                                 "tokenizer.model",  "special_tokens_map.json",
                                                 "vocab.json",       "merges.txt",
                                                 "added_tokens.json"};
  return files;
}

namespace {

// Copies those of hf_side_files() (but config.json unless with_config) that exist in `from`
// into `to`; returns how many.
int copy_side_files(const std::string& from, const std::string& to, bool with_config) {
  std::error_code ec;
  int n = 0;
  for (const std::string& f : hf_side_files()) {
    if ((f == "config.json" && !with_config) || !fs::is_regular_file(from + "/" + f, ec)) continue;
    fs::create_directories(to, ec);
    ckpt::write_file_atomic(to + "/" + f, ckpt::read_text_file(from + "/" + f));
    ++n;
  }
  return n;
}

// The target layout must be one a run could train: heads, query groups, FFN and vocabulary
// divisible by TP, layers by PP.
void check_target_layout(const ConvertConfig& cfg, const GPTConfig& mc) {
  ParallelConfig par;
  par.tensor_model_parallel_size = int(cfg.target_tp);
  par.pipeline_model_parallel_size = int(cfg.target_pp);
  try {
    par.validate(int(cfg.target_tp * cfg.target_pp), mc.layout_dims(cfg.target_tp), 1, 1);
  } catch (const UsageError& e) {
    throw UsageError(str_cat("--target-tensor-parallel-size ", cfg.target_tp,
                             " / --target-pipeline-parallel-size ", cfg.target_pp,
                             " cannot hold this model: ", e.what()));
  }
}

// The number of elements in one row (everything after the first dim) of a shape.
int64_t row_numel(const Shape& s) { return s.size() > 1 ? shape_numel(s) / s[0] : 1; }

std::string argv_text(const ConvertConfig& cfg) {
  return str_cat("--target-tensor-parallel-size ", cfg.target_tp,
                 " --target-pipeline-parallel-size ", cfg.target_pp);
}

// HF's norm weights are gamma: a zero-centred w (--apply-layernorm-1p) is written as w + 1,
// computed in f32 and rounded once to the checkpoint's dtype.
void add_to_each(std::vector<char>& bytes, DType dtype, float offset) {
  if (offset == 0.f) return;
  const int64_t n = int64_t(bytes.size() / dtype_size(dtype));
  std::vector<float> v(static_cast<size_t>(n));
  cpu::cast_to_f32(v.data(), bytes.data(), dtype, n);
  for (float& x : v) x += offset;
  cpu::cast_from_f32(bytes.data(), dtype, v.data(), n);
}

}  // namespace

void llama_hf_to_megatron(const ConvertConfig& cfg, const json& config,
                          const std::string& config_path) {
  Timer timer;
  GPTConfig mc = hf_llama_config(config, config_path, cfg.make_vocab_size_divisible_by);
  check_target_layout(cfg, mc);
  mc.vocab_pad_tp = cfg.target_tp;
  const HfTensorFiles hf(cfg.load);
  const std::vector<LlamaTensor> tensors = llama_tensors(mc, hf_architecture(config, config_path));
  // Everything is checked before anything is written: every tensor present, of config.json's
  // shape, all of one dtype; every tensor of the files used.
  const SafeTensor& embed = hf.get("model.embed_tokens.weight");
  const DType dtype =
      dtype_of_safetensors(embed.dtype, "'" + embed.path + "': tensor '" + embed.name + "'");
  std::set<std::string> used;
  for (const LlamaTensor& t : tensors)
    for (const HfRows& p : t.parts) {
      const SafeTensor& st = hf.get(p.name);
      MG_USER_CHECK(st.shape == p.shape, "'", st.path, "': tensor ", p.name, " has shape ",
                    shape_str(st.shape), " but ", config_path, " says ", shape_str(p.shape));
      MG_USER_CHECK(st.dtype == embed.dtype, "'", st.path, "': tensor ", p.name, " is ", st.dtype,
                    " but model.embed_tokens.weight is ", embed.dtype,
                    "; a checkpoint holds its weights in one dtype");
      used.insert(p.name);
    }
  if (mc.tied_output() && hf.has("lm_head.weight")) {  // a tied copy: it must be the embedding
    const SafeTensor& head = hf.get("lm_head.weight");
    MG_USER_CHECK(head.shape == embed.shape && head.dtype == embed.dtype &&
                      std::memcmp(head.data, embed.data, embed.bytes) == 0,
                  "'", head.path, "': lm_head.weight differs from model.embed_tokens.weight but ",
                  config_path, " says tie_word_embeddings: true");
    used.insert("lm_head.weight");
    hf.release(head);
  }
  std::vector<std::string> unused;
  for (const std::string& n : hf.names())
    if (!used.count(n) && !is_hf_buffer(n)) unused.push_back(n);
  if (!unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 8) list += str_cat(", ... (", unused.size() - 8, " more)");
    const std::string what =
        str_cat(hf.describe(), " holds ", unused.size(), " tensors that ", config_path,
                " (num_hidden_layers ", mc.num_layers, ") does not use: ", list);
    MG_USER_CHECK(cfg.allow_unused_tensors, what,
                  "; check config.json against the files, or "
                  "pass --allow-unused-tensors to drop them");
    log_line(" > warning: " + what + "; skipped (--allow-unused-tensors)");
  }

  CheckpointWriter out(cfg.save, mc, cfg.target_tp, cfg.target_pp, dtype,
                       {"convert", "--direction", cfg.direction, "--load", cfg.load, "--save",
                        cfg.save, argv_text(cfg)});
  const size_t esize = dtype_size(dtype);
  uint64_t bytes = 0;
  std::vector<char> global;
  for (const LlamaTensor& t : tensors) {
    const Shape& shape = out.global_layout().get(t.ours).global_shape;
    const SafeTensor& first = hf.get(t.parts.front().name);
    if (t.parts.size() == 1 && first.shape == shape) {  // one HF tensor as it is: no copy
      out.add(t.ours, first.data);
      hf.release(first);
      bytes += first.bytes;
      continue;
    }
    global.assign(size_t(shape_numel(shape)) * esize, 0);  // padding rows stay zero
    const size_t row = size_t(row_numel(shape)) * esize;
    size_t at = 0;
    for (const HfRows& p : t.parts) {
      const SafeTensor& st = hf.get(p.name);
      std::memcpy(global.data() + at, st.data + size_t(p.row_begin) * row, size_t(p.rows) * row);
      at += size_t(p.rows) * row;
    }
    out.add(t.ours, global.data());
    for (const HfRows& p : t.parts) hf.release(hf.get(p.name));
    bytes += at;
  }
  const int side = copy_side_files(cfg.load, cfg.save + "/hf", true);
  out.finish();
  log_line(str_cat(" > converted ", cfg.load, " (", hf_architecture(config, config_path), ", ",
                   mc.num_layers, " layers, hidden ", mc.hidden_size,
                   mc.num_experts > 0
                       ? str_cat(", ", mc.num_experts, " experts, top-", mc.moe_router_topk)
                       : std::string(),
                   ", vocab ", mc.vocab_size, " padded to ", mc.padded_vocab_size(), ", ",
                   torch_dtype_name(dtype), ", ", bytes / 1e6, " MB) to ", cfg.save, " for TP ",
                   cfg.target_tp, " x PP ", cfg.target_pp, " in ", timer.seconds(), " s; kept ",
                   side, " config/tokenizer files in ", cfg.save, "/hf"));
}

void llama_megatron_to_hf(const ConvertConfig& cfg) {
  Timer timer;
  const std::string ckdir = latest_checkpoint_dir(cfg.load);
  MG_USER_CHECK(!ckdir.empty(), "--load '", cfg.load, "' holds no checkpoint (no ", kLatestFile,
                ")");
  const CheckpointMetadata meta = read_checkpoint_metadata(ckdir);
  const GPTConfig& mc = meta.model;
  // The source's config.json (kept by hf-to-megatron in LOAD/hf, or beside the tokenizer files
  // of --tokenizer-model) restores what we do not model (bos/eos ids, ...).
  const std::string tok = cfg.tokenizer_model.empty() ? cfg.load + "/hf" : cfg.tokenizer_model;
  std::error_code ec;
  std::string kept = cfg.load + "/hf/config.json";
  if (!fs::is_regular_file(kept, ec)) kept = tok + "/config.json";
  json original;
  std::string preferred;
  if (fs::is_regular_file(kept, ec)) {
    original =
        ckpt::JsonFields::parse_object(ckpt::read_text_file(kept), "HF config '" + kept + "'");
    if (original.contains("architectures")) preferred = hf_architecture(original, kept);
  }
  const std::string arch = hf_llama_architecture_for(mc, preferred, "--load " + cfg.load);
  MG_USER_CHECK(cfg.tokenizer_model.empty() ||
                    std::any_of(hf_side_files().begin() + 1, hf_side_files().end(),
                                [&](const std::string& f) {
                                  return fs::is_regular_file(tok + "/" + f, ec);
                                }),
                "--tokenizer-model '", tok,
                "' holds none of the tokenizer files "
                "(tokenizer.json, tokenizer_config.json, tokenizer.model, ...)");
  CheckpointReader reader(ckdir, meta);
  const std::vector<LlamaTensor> tensors = llama_tensors(mc, arch);
  const DType dtype = reader.dtype("model/embedding.word_embeddings.weight");
  std::vector<HfTensorInfo> plan;
  for (const LlamaTensor& t : tensors)
    for (const HfRows& p : t.parts)
      if (std::none_of(plan.begin(), plan.end(),
                       [&](const HfTensorInfo& i) { return i.name == p.name; }))
        plan.push_back({p.name, dtype, p.shape});
  fs::create_directories(cfg.save, ec);
  MG_USER_CHECK(fs::is_directory(cfg.save, ec), "--save: cannot create directory '", cfg.save, "'");
  HfShardedWriter out(cfg.save, plan, parse_shard_size(cfg.max_shard_size, "--max-shard-size"));
  const size_t esize = dtype_size(dtype);
  uint64_t bytes = 0;
  std::vector<char> gathered;
  for (const LlamaTensor& t : tensors) {
    const std::string key = "model/" + t.ours;
    const Shape shape = reader.shape(key);
    const Shape& want = t.parts.front().shape;
    int64_t rows = 0;
    for (const HfRows& p : t.parts) rows += p.rows;
    MG_USER_CHECK(reader.dtype(key) == dtype && shape.size() == want.size() && shape[0] >= rows &&
                      row_numel(shape) == row_numel(want),
                  "checkpoint '", ckdir, "': ", key, " is ", dtype_name(reader.dtype(key)), " ",
                  shape_str(shape), " but the model record needs ", dtype_name(dtype), " with ",
                  rows, " rows of ", row_numel(want));
    std::vector<char> global = reader.global_bytes(key);
    if (t.norm_weight) add_to_each(global, dtype, mc.norm_weight_offset());
    const size_t row = size_t(row_numel(shape)) * esize;
    // Each HF tensor in plan order: straight from our tensor when one part covers it (a copy,
    // gate, up), else gathered (q, k, v from the per-group rows).
    std::vector<std::string> order;
    for (const HfRows& p : t.parts)
      if (std::find(order.begin(), order.end(), p.name) == order.end()) order.push_back(p.name);
    for (const std::string& name : order) {
      size_t at = 0;
      std::vector<std::pair<const HfRows*, size_t>> mine;  // parts of `name`, their byte offsets
      for (const HfRows& p : t.parts) {
        if (p.name == name) mine.push_back({&p, at});
        at += size_t(p.rows) * row;
      }
      const Shape& hs = mine.front().first->shape;
      if (mine.size() == 1 && mine.front().first->rows == hs[0]) {
        out.write(name, global.data() + mine.front().second);
      } else {
        gathered.resize(size_t(shape_numel(hs)) * esize);
        for (const auto& [p, off] : mine)
          std::memcpy(gathered.data() + size_t(p->row_begin) * row, global.data() + off,
                      size_t(p->rows) * row);
        out.write(name, gathered.data());
      }
      bytes += size_t(shape_numel(hs)) * esize;
    }
  }
  const std::vector<std::string> files = out.finish();
  ckpt::write_file_atomic(
      cfg.save + "/config.json",
      hf_llama_config_json(mc, arch, torch_dtype_name(dtype), original).dump(2) + "\n");
  const int side = copy_side_files(tok, cfg.save, false);
  if (side == 0)
    log_line(str_cat(" > note: no tokenizer files written (", tok,
                     " has none): pass "
                     "--tokenizer-model DIR to copy them from DIR"));
  log_line(str_cat(" > converted ", ckdir, " (", arch, ", ", torch_dtype_name(dtype), ", ",
                   bytes / 1e6, " MB) to ", cfg.save, " (", files.size(),
                   files.size() == 1 ? " weight file" : " files with the index", ", ", side,
                   " tokenizer/generation files) in ", timer.seconds(), " s"));
}

}  // namespace mg
