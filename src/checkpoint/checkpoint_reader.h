// Reading one checkpoint (iter_%07d) tensor by tensor: its validated metadata, its rank indexes
// (checksummed), and each key assembled from its pieces into the global tensor. Shard files are
// read by byte ranges, never mapped or loaded whole; each file's size and CRC-32 are checked
// once, streamed, on first use. So a reader holds about one tensor in memory (what `convert`
// needs to export a model larger than half the host's memory).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/metadata.h"

namespace mg {

// The metadata of checkpoint directory ckdir, validated, recording the iteration its directory
// name says (a missing metadata.json is an incomplete checkpoint: the message says what to do).
CheckpointMetadata read_checkpoint_metadata(const std::string& ckdir);

class CheckpointReader {
 public:
  // Reads and checks every rank index meta lists (checksum, rank, file names).
  CheckpointReader(const std::string& ckdir, const CheckpointMetadata& meta);
  bool has(const std::string& key) const { return by_key_.count(key) > 0; }
  // The global shape and stored dtype of `key` (its pieces must agree on both).
  Shape shape(const std::string& key) const;
  DType dtype(const std::string& key) const;

  // The whole tensor `key` in f32 (row-major, global shape), assembled from its pieces;
  // covered(i) then says whether element i was stored.
  std::vector<float> global(const std::string& key, Shape& shape);
  bool covered(int64_t i) const { return covered_[size_t(i)]; }
  // The whole tensor `key` as stored (dtype(key), row-major, global shape); every element
  // must be stored.
  std::vector<char> global_bytes(const std::string& key);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct FileInfo {
    std::string path;
    uint64_t bytes;
    uint32_t crc;
    std::unique_ptr<ckpt::RandomAccessFile> file;
  };
  struct Src {
    size_t file;
    PieceInfo piece;
  };
  const std::vector<Src>& pieces(const std::string& key) const;
  // Reads one piece's bytes (opening and verifying its file on first use).
  void read_piece(const Src& s, const std::string& key, char* dst);
  // Calls f(local element j, global element) for each run of elements of a piece that is
  // contiguous in both; `shape` is the key's global shape.
  template <typename F>
  void for_each_run(const PieceInfo& m, const Shape& shape, F f) const;

  std::string dir_;
  std::vector<FileInfo> files_;
  std::map<std::string, std::vector<Src>> by_key_;
  std::vector<bool> covered_;
  uint64_t bytes_read_ = 0;
};

}  // namespace mg
