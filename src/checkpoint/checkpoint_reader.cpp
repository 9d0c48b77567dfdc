#include "checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "backend/cpu/half.h"
#include "checkpoint/checkpoint_dir.h"
#include "core/error.h"
#include "tensor_parallel/sharding.h"

namespace mg {

namespace fs = std::filesystem;

CheckpointMetadata read_checkpoint_metadata(const std::string& ckdir) {
  const std::string path = ckdir + "/metadata.json";
  std::error_code ec;
  MG_USER_CHECK(fs::is_regular_file(path, ec), "checkpoint '", ckdir, "' has no metadata.json: ",
                fs::is_directory(ckdir, ec) ? "it is incomplete" : "it does not exist", "; point ",
                fs::path(ckdir).parent_path().string(), "/", kLatestFile,
                " at another complete iter_ directory");
  const CheckpointMetadata meta = parse_checkpoint_metadata(ckpt::read_text_file(path), path);
  const int64_t named = iteration_of_dir_name(fs::path(ckdir).filename().string());
  MG_USER_CHECK(meta.iteration == named, "checkpoint metadata '", path, "' records iteration ",
                meta.iteration, " but its directory is named for iteration ", named,
                " (a checkpoint copied or renamed by hand?); restore the original directory");
  return meta;
}

CheckpointReader::CheckpointReader(const std::string& dir, const CheckpointMetadata& meta)
    : dir_(dir) {
  for (size_t r = 0; r < meta.ranks.size(); ++r) {
    const ShardFiles& sf = meta.ranks[r];
    const std::string ipath = dir + "/" + sf.index;
    const std::string text = ckpt::read_text_file(ipath);
    MG_USER_CHECK(ckpt::crc32_of(text.data(), text.size()) == sf.index_crc32, "checkpoint index '",
                  ipath, "' is corrupt (checksum mismatch)");
    ShardIndex index = parse_shard_index(text, ipath);
    MG_USER_CHECK(index.rank == int64_t(r) && index.bin == sf.bin &&
                      index.bin_bytes == sf.bin_bytes && index.bin_crc32 == sf.bin_crc32,
                  "checkpoint index '", ipath, "' is not the one its metadata.json lists (rank ",
                  index.rank, ", ", index.bin, ")");
    files_.push_back({dir + "/" + sf.bin, sf.bin_bytes, sf.bin_crc32, nullptr});
    for (PieceInfo& p : index.pieces) by_key_[p.key].push_back({files_.size() - 1, std::move(p)});
  }
}

const std::vector<CheckpointReader::Src>& CheckpointReader::pieces(const std::string& key) const {
  auto it = by_key_.find(key);
  MG_USER_CHECK(it != by_key_.end(), "checkpoint '", dir_, "' has no tensor ", key);
  for (const Src& s : it->second)
    MG_USER_CHECK(s.piece.global_shape == it->second.front().piece.global_shape &&
                      s.piece.dtype == it->second.front().piece.dtype,
                  "checkpoint '", dir_, "': pieces of ", key,
                  " disagree on its global shape or dtype");
  return it->second;
}

Shape CheckpointReader::shape(const std::string& key) const {
  return pieces(key).front().piece.global_shape;
}

DType CheckpointReader::dtype(const std::string& key) const {
  return pieces(key).front().piece.dtype;
}

void CheckpointReader::read_piece(const Src& s, const std::string& key, char* dst) {
  FileInfo& f = files_[s.file];
  if (!f.file) {
    f.file = std::make_unique<ckpt::RandomAccessFile>(f.path);
    MG_USER_CHECK(f.file->size() == f.bytes, "checkpoint file '", f.path, "' has ", f.file->size(),
                  " bytes but the metadata says ", f.bytes, " (truncated?)");
    MG_USER_CHECK(f.file->crc32() == f.crc, "checkpoint file '", f.path,
                  "' is corrupt (CRC-32 mismatch)");
    bytes_read_ += f.bytes;
  }
  const PieceInfo& m = s.piece;
  const uint64_t n = uint64_t(m.numel) * dtype_size(m.dtype);
  MG_USER_CHECK(m.offset + n <= f.bytes, "checkpoint file '", f.path, "': piece of ", key,
                " lies outside the file");
  f.file->read(m.offset, dst, size_t(n));
}

template <typename F>
void CheckpointReader::for_each_run(const PieceInfo& m, const Shape& shape, F f) const {
  Sharding sh;
  sh.split_dim = m.tp_split_dim;
  sh.stride = m.tp_stride;
  // A run of local elements contiguous in the global tensor: the whole shard when unsplit or
  // split along dim 0 in one part; else a stacked part's slice, or one row's slice.
  int64_t run = shape_numel(m.local_shape);
  if (sh.split() && m.tp_size > 1) {
    run = m.local_shape[size_t(sh.split_dim)] / sh.stride;
    for (size_t d = size_t(sh.split_dim) + 1; d < m.local_shape.size(); ++d)
      run *= m.local_shape[d];
  }
  for (int64_t j = 0; j < m.numel;) {
    const int64_t local = m.local_begin + j;
    const int64_t n = std::min(m.numel - j, run - local % run);
    const int64_t gi = global_index(shape, m.local_shape, sh, local, m.tp_size, m.tp_rank);
    MG_CHECK(gi >= 0 && gi + n <= shape_numel(shape), "piece outside its global shape");
    f(j, gi, n);
    j += n;
  }
}

std::vector<float> CheckpointReader::global(const std::string& key, Shape& shape) {
  const auto& srcs = pieces(key);
  shape = srcs.front().piece.global_shape;
  std::vector<float> out(size_t(shape_numel(shape)), 0.f);
  covered_.assign(out.size(), false);
  std::vector<char> bytes;
  for (const Src& s : srcs) {
    const PieceInfo& m = s.piece;
    bytes.resize(size_t(m.numel) * dtype_size(m.dtype));
    read_piece(s, key, bytes.data());
    for_each_run(m, shape, [&](int64_t j, int64_t gi, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        out[size_t(gi + k)] = cpu::load_f32(bytes.data(), m.dtype, j + k);
        covered_[size_t(gi + k)] = true;
      }
    });
  }
  return out;
}

std::vector<char> CheckpointReader::global_bytes(const std::string& key) {
  const auto& srcs = pieces(key);
  const Shape shape = srcs.front().piece.global_shape;
  const size_t esize = dtype_size(srcs.front().piece.dtype);
  std::vector<char> out(size_t(shape_numel(shape)) * esize);
  std::vector<bool> covered(size_t(shape_numel(shape)), false);
  std::vector<char> bytes;
  for (const Src& s : srcs) {
    const PieceInfo& m = s.piece;
    int64_t runs = 0, first = 0;
    for_each_run(m, shape, [&](int64_t, int64_t gi, int64_t) { first = runs++ ? first : gi; });
    if (runs == 1) {  // contiguous in the global tensor: read in place, no staging copy
      read_piece(s, key, out.data() + size_t(first) * esize);
      std::fill(covered.begin() + first, covered.begin() + first + m.numel, true);
      continue;
    }
    bytes.resize(size_t(m.numel) * esize);
    read_piece(s, key, bytes.data());
    for_each_run(m, shape, [&](int64_t j, int64_t gi, int64_t n) {
      std::memcpy(out.data() + size_t(gi) * esize, bytes.data() + size_t(j) * esize,
                  size_t(n) * esize);
      std::fill(covered.begin() + gi, covered.begin() + gi + n, true);
    });
  }
  MG_USER_CHECK(std::all_of(covered.begin(), covered.end(), [](bool c) { return c; }),
                "checkpoint '", dir_, "' lacks elements of ", key,
                " (a shard file missing from its metadata?)");
  return out;
}

}  // namespace mg
