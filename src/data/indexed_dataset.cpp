#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace mg {

namespace {
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeader = 34;

bool valid_dtype(uint8_t code) { return code >= 1 && code <= 8; }

void write_all(FILE* f, const void* p, size_t n, const std::string& path) {
  MG_USER_CHECK(std::fwrite(p, 1, n, f) == n, "cannot write '", path, "': ", std::strerror(errno));
}

// Maps a whole file read-only; returns nullptr for an empty file.
void* map_file(const std::string& path, size_t& size) {
  const int fd = open(path.c_str(), O_RDONLY);
  MG_USER_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno),
                " (a --data-path prefix names P for the pair P.bin / P.idx)");
  struct stat st {};
  fstat(fd, &st);
  size = size_t(st.st_size);
  void* p = nullptr;
  if (size > 0) {
    p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) p = nullptr;
  }
  close(fd);
  MG_USER_CHECK(size == 0 || p != nullptr, "cannot mmap '", path, "'");
  return p;
}
}  // namespace

size_t token_dtype_size(TokenDType t) {
  switch (t) {
    case TokenDType::U8: case TokenDType::I8: return 1;
    case TokenDType::I16: case TokenDType::U16: return 2;
    case TokenDType::I32: case TokenDType::F32: return 4;
    case TokenDType::I64: case TokenDType::F64: return 8;
  }
  return 0;
}

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::U16 : TokenDType::I32;
}

// ---- writer ----

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  MG_USER_CHECK(dtype == TokenDType::U16 || dtype == TokenDType::I32,
                "only uint16 and int32 token files are written");
  const std::string tmp = prefix_ + ".bin.tmp";
  bin_ = std::fopen(tmp.c_str(), "wb");
  MG_USER_CHECK(bin_ != nullptr, "cannot create '", tmp, "': ", std::strerror(errno),
                " (check --output-prefix)");
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_) std::fclose(bin_);
  if (!done_) {
    std::remove((prefix_ + ".bin.tmp").c_str());
    std::remove((prefix_ + ".idx.tmp").c_str());
  }
}

void IndexedDatasetWriter::add_document(const std::vector<int32_t>& ids,
                                        const std::vector<int32_t>& lengths) {
  int64_t total = 0;
  for (int32_t l : lengths) total += l;
  MG_CHECK(total == int64_t(ids.size()), "sequence lengths sum to ", total, ", not ", ids.size());
  if (dtype_ == TokenDType::U16) {
    std::vector<uint16_t> v(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      MG_CHECK(ids[i] >= 0 && ids[i] < 65536, "token ", ids[i], " does not fit uint16");
      v[i] = uint16_t(ids[i]);
    }
    write_all(bin_, v.data(), v.size() * 2, prefix_ + ".bin.tmp");
  } else {
    write_all(bin_, ids.data(), ids.size() * 4, prefix_ + ".bin.tmp");
  }
  lengths_.insert(lengths_.end(), lengths.begin(), lengths.end());
  doc_idx_.push_back(int64_t(lengths_.size()));
  tokens_ += total;
}

void IndexedDatasetWriter::add_index(const std::string& prefix) {
  IndexedDataset in(prefix);
  MG_USER_CHECK(in.dtype() == dtype_, "'", prefix, "' stores tokens of dtype code ",
                int(in.dtype()), ", the merged dataset ", int(dtype_), "; merge like with like");
  const int64_t base = int64_t(lengths_.size());
  lengths_.insert(lengths_.end(), in.lengths(), in.lengths() + in.num_sequences());
  for (int64_t d = 1; d <= in.num_documents(); ++d) doc_idx_.push_back(base + in.document_indices()[d]);
  size_t bytes = 0;
  for (int64_t i = 0; i < in.num_sequences(); ++i) {
    bytes += size_t(in.lengths()[i]) * token_dtype_size(dtype_);
    tokens_ += in.lengths()[i];
  }
  if (bytes) {
    size_t sz = 0;
    void* p = map_file(prefix + ".bin", sz);
    write_all(bin_, p, bytes, prefix_ + ".bin.tmp");
    munmap(p, sz);
  }
}

void IndexedDatasetWriter::finalize() {
  MG_USER_CHECK(std::fflush(bin_) == 0 && fsync(fileno(bin_)) == 0, "cannot flush '", prefix_,
                ".bin.tmp'");
  std::fclose(bin_);
  bin_ = nullptr;
  const std::string idx_tmp = prefix_ + ".idx.tmp";
  FILE* f = std::fopen(idx_tmp.c_str(), "wb");
  MG_USER_CHECK(f != nullptr, "cannot create '", idx_tmp, "': ", std::strerror(errno));
  const uint64_t version = 1, n = lengths_.size(), d = doc_idx_.size();
  const uint8_t code = uint8_t(dtype_);
  write_all(f, kMagic, 9, idx_tmp);
  write_all(f, &version, 8, idx_tmp);
  write_all(f, &code, 1, idx_tmp);
  write_all(f, &n, 8, idx_tmp);
  write_all(f, &d, 8, idx_tmp);
  write_all(f, lengths_.data(), n * 4, idx_tmp);
  std::vector<int64_t> pointers(n);
  int64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    pointers[i] = at;
    at += int64_t(lengths_[i]) * int64_t(token_dtype_size(dtype_));
  }
  write_all(f, pointers.data(), n * 8, idx_tmp);
  write_all(f, doc_idx_.data(), d * 8, idx_tmp);
  MG_USER_CHECK(std::fflush(f) == 0 && fsync(fileno(f)) == 0, "cannot flush '", idx_tmp, "'");
  std::fclose(f);
  std::filesystem::rename(prefix_ + ".bin.tmp", prefix_ + ".bin");
  std::filesystem::rename(idx_tmp, prefix_ + ".idx");
  done_ = true;
}

// ---- reader ----

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  idx_map_ = map_file(idx, idx_size_);
  const auto* p = static_cast<const uint8_t*>(idx_map_);
  MG_USER_CHECK(idx_size_ >= kHeader, "'", idx, "' is truncated: ", idx_size_,
                " bytes, smaller than the 34-byte header");
  MG_USER_CHECK(std::memcmp(p, kMagic, 9) == 0, "'", idx,
                "' is not a Megatron index file (bad magic; expected MMIDIDX)");
  uint64_t version, n, d;
  std::memcpy(&version, p + 9, 8);
  MG_USER_CHECK(version == 1, "'", idx, "' has index version ", version, "; only version 1 exists");
  const uint8_t code = p[17];
  MG_USER_CHECK(valid_dtype(code) && code != 6 && code != 7, "'", idx, "' has token dtype code ",
                int(code), "; expected an integer type (1-5 or 8)");
  dtype_ = TokenDType(code);
  std::memcpy(&n, p + 18, 8);
  std::memcpy(&d, p + 26, 8);
  // 34 + 12N + 8D bytes, checked without overflow.
  MG_USER_CHECK(n < (uint64_t(1) << 40) && d >= 1 && d < (uint64_t(1) << 40) &&
                    idx_size_ == kHeader + 12 * n + 8 * d,
                "'", idx, "' has ", idx_size_, " bytes but its header announces ", n,
                " sequences and ", d, " document boundaries (", kHeader + 12 * n + 8 * d,
                " bytes): truncated or corrupted");
  n_ = int64_t(n);
  d_ = int64_t(d);
  lengths_ = reinterpret_cast<const int32_t*>(p + kHeader);
  pointers_ = reinterpret_cast<const int64_t*>(p + kHeader + 4 * n);
  doc_idx_ = reinterpret_cast<const int64_t*>(p + kHeader + 12 * n);
  MG_USER_CHECK(doc_idx_[0] == 0 && doc_idx_[d_ - 1] == n_, "'", idx,
                "' document boundaries must run from 0 to the sequence count ", n_);
  for (int64_t k = 1; k < d_; ++k)
    MG_USER_CHECK(doc_idx_[k] >= doc_idx_[k - 1], "'", idx, "' document boundary ", k,
                  " decreases: corrupted");
  bin_map_ = map_file(bin, bin_size_);
  const int64_t item = int64_t(token_dtype_size(dtype_));
  int64_t at = 0;
  for (int64_t i = 0; i < n_; ++i) {
    MG_USER_CHECK(lengths_[i] >= 0 && pointers_[i] == at, "'", idx, "' sequence ", i,
                  " has length ", lengths_[i], " at byte ", pointers_[i], " (expected byte ", at,
                  "): corrupted");
    at += int64_t(lengths_[i]) * item;
  }
  MG_USER_CHECK(uint64_t(at) == bin_size_, "'", bin, "' has ", bin_size_, " bytes but '", idx,
                "' describes ", at, ": truncated or mismatched pair");
}

IndexedDataset::~IndexedDataset() {
  if (idx_map_) munmap(idx_map_, idx_size_);
  if (bin_map_) munmap(bin_map_, bin_size_);
}

void IndexedDataset::get(int64_t i, int64_t offset, int64_t n, int32_t* out) const {
  MG_CHECK(i >= 0 && i < n_ && offset >= 0 && offset + n <= lengths_[i], "sequence ", i,
           " range [", offset, ", ", offset + n, ") outside its ", lengths_[i], " tokens");
  const auto* base = static_cast<const uint8_t*>(bin_map_) + pointers_[i];
  for (int64_t k = 0; k < n; ++k) {
    const int64_t j = offset + k;
    switch (dtype_) {
      case TokenDType::U8: out[k] = base[j]; break;
      case TokenDType::I8: out[k] = reinterpret_cast<const int8_t*>(base)[j]; break;
      case TokenDType::I16: { int16_t v; std::memcpy(&v, base + 2 * j, 2); out[k] = v; break; }
      case TokenDType::U16: { uint16_t v; std::memcpy(&v, base + 2 * j, 2); out[k] = v; break; }
      case TokenDType::I32: std::memcpy(out + k, base + 4 * j, 4); break;
      case TokenDType::I64: { int64_t v; std::memcpy(&v, base + 8 * j, 8); out[k] = int32_t(v); break; }
      default: MG_CHECK(false, "float token file");
    }
  }
}

}  // namespace mg
