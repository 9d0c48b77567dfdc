// libFuzzer target: a checkpoint's metadata.json (docs/checkpoint-format.md) as `--load` and
// `megatron convert` read it. Input: the metadata.json text. It replaces the metadata of a tiny
// real checkpoint (saved once at start-up, shards intact); then the model config is read
// (checkpoint_model_config) and, when the described model is small, the whole checkpoint loads
// (load_checkpoint: shard list, checksums, pieces, optimizer state, counters).
#include <filesystem>

#include "checkpoint/single_rank.h"
#include "core/log.h"
#include "fuzz_util.h"

namespace {

using namespace mg;

// Bounds on what one execution allocates; bigger models are only parsed, not loaded.
bool small(const GPTConfig& c) {
  return c.num_layers <= 8 && c.hidden_size <= 256 && c.ffn() <= 1024 && c.vocab_size <= 4096 &&
         c.max_positions() <= 1024 && c.head_dim() <= 256 && c.num_attention_heads <= 64 &&
         c.make_vocab_size_divisible_by <= 1024;
}

// The tiny checkpoint whose metadata each input replaces (params zero: its bytes do not depend
// on the machine, so the committed seed's checksums match).
const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_path("ck");
    GPTConfig c;
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.seq_length = 16;
    c.vocab_size = 500;
    SingleRankModel h(c);
    h.ckpt.save = d;
    TrainProgress progress;
    progress.iteration = 3;
    save_checkpoint(h.io(), progress);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_log_rank(1);  // log_line prints on rank 0 only: no load/save lines per input
  const std::string meta = latest_checkpoint_dir(checkpoint_dir()) + "/metadata.json";
  // MG_FUZZ_WRITE_SEED=FILE: copy the pristine metadata there (how the seed corpus was made).
  if (const char* seed = std::getenv("MG_FUZZ_WRITE_SEED"))
    std::filesystem::copy_file(meta, seed, std::filesystem::copy_options::overwrite_existing);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mg;
  const std::string dir = checkpoint_dir();
  fuzz::write_file(latest_checkpoint_dir(dir) + "/metadata.json", fuzz::as_text(data, size));
  fuzz::expect_usage_errors_only([&] {
    const GPTConfig c = checkpoint_model_config(dir);
    if (!small(c)) return;
    SingleRankModel h(c);
    h.ckpt.load = dir;
    h.ckpt.exit_on_missing_checkpoint = true;
    TrainProgress progress;
    load_checkpoint(h.io(), progress);
  });
  return 0;
}
