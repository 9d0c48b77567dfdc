// The --save directory and its crash-safe upkeep (rank 0 only). Final names are iter_%07d;
// a save writes iter_%07d.tmp and publishes it by one rename; latest_checkpointed_iteration.txt
// is replaced only after that rename, so it always names a complete checkpoint. A checkpoint is
// removed by first renaming it to iter_%07d.deleting (atomic) and fsyncing the directory, and
// only then deleting its files: a crash leaves a complete checkpoint or a name that the loader
// never considers and the next save removes. No directory under a final name is ever partial.
#pragma once
#include <cstdint>
#include <string>

namespace mg {

// Megatron's pointer to the newest complete checkpoint: its iteration and a newline.
constexpr const char* kLatestFile = "latest_checkpointed_iteration.txt";

std::string checkpoint_dir_name(int64_t iteration);  // "iter_0000010"
// The iteration a final checkpoint directory name stands for ("iter_0000010" -> 10), or -1.
int64_t iteration_of_dir_name(const std::string& name);
// The iteration dir/latest_checkpointed_iteration.txt names, or -1 when there is no such file.
int64_t read_latest_iteration(const std::string& dir);

namespace ckpt {

// Removes what interrupted saves left in dir: iter_*.tmp (a save), iter_*.deleting (a removal),
// iter_*.old (older builds), the latest file's .tmp, and final-named directories older than the
// latest checkpoint that lack metadata.json (half-deleted by older builds). Logs each.
void remove_leftovers(const std::string& dir);
// Rank 0 before a save: creates dir if new (a UsageError naming --save if it cannot), removes
// what interrupted saves left in it, and creates the save's directory tmp (iter_%07d.tmp).
void begin_save(const std::string& dir, const std::string& tmp);
// Moves the finished tmp directory to iter_%07d (an existing one is swapped out atomically
// and then removed), fsyncs dir, and points latest_checkpointed_iteration.txt at it.
void publish_checkpoint(const std::string& dir, const std::string& tmp, int64_t iteration);
// --ckpt-keep-last K: keeps the checkpoint at `latest` and the K - 1 newest complete ones
// before it; removes the older ones (checkpoints newer than `latest` are not touched).
void keep_last_checkpoints(const std::string& dir, int64_t latest, int64_t keep_last);
// Removes a directory crash-safely: rename to PATH.deleting, fsync the parent, delete.
void remove_dir_safely(const std::string& path);

}  // namespace ckpt
}  // namespace mg
