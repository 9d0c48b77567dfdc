#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace mg {

namespace {
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeader = 34;

bool valid_dtype(uint8_t code) { return code >= 1 && code <= 8; }

void write_all(FILE* f, const void* p, size_t n, const std::string& path) {
  if (n == 0) return;  // p may be an empty vector's null data()
  MG_USER_CHECK(std::fwrite(p, 1, n, f) == n, "cannot write '", path, "': ", std::strerror(errno));
}

// Maps a whole file read-only; returns nullptr for an empty file.
void* map_file(const std::string& path, size_t& size) {
  const int fd = open(path.c_str(), O_RDONLY);
  MG_USER_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno),
                " (a --data-path prefix names P for the pair P.bin / P.idx)");
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular) close(fd);
  MG_USER_CHECK(regular, "'", path, "' is not a regular file");
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
    case TokenDType::U8:
    case TokenDType::I8: return 1;
    case TokenDType::I16:
    case TokenDType::U16: return 2;
    case TokenDType::I32:
    case TokenDType::F32: return 4;
    case TokenDType::I64:
    case TokenDType::F64: return 8;
  }
  return 0;
}

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::U16 : TokenDType::I32;
}

// ---- writer ----

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  MG_USER_CHECK(dtype == TokenDType::U16 || dtype == TokenDType::I32, "'", prefix,
                "': only uint16 and int32 token files are written (dtype code ", int(dtype), ")");
  const std::string tmp = prefix_ + ".bin.tmp";
  std::remove(tmp.c_str());  // a stale temporary (or a link planted there) is never written through
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
  for (int64_t i = 0; i < in.num_sequences(); ++i) {
    lengths_.push_back(in.length(i));
    tokens_ += in.length(i);
  }
  for (int64_t d = 1; d <= in.num_documents(); ++d) doc_idx_.push_back(base + in.document_bound(d));
  // parse_idx proved the sequences tile the whole .bin.
  if (in.bin_size() > 0) write_all(bin_, in.bin_data(), in.bin_size(), prefix_ + ".bin.tmp");
}

void IndexedDatasetWriter::finalize() {
  MG_USER_CHECK(std::fflush(bin_) == 0 && fsync(fileno(bin_)) == 0, "cannot flush '", prefix_,
                ".bin.tmp': ", std::strerror(errno));
  const int closed = std::fclose(bin_);
  bin_ = nullptr;
  MG_USER_CHECK(closed == 0, "cannot close '", prefix_, ".bin.tmp': ", std::strerror(errno));
  const std::string idx_tmp = prefix_ + ".idx.tmp";
  std::remove(idx_tmp.c_str());
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(idx_tmp.c_str(), "wb"), &std::fclose);
  MG_USER_CHECK(f != nullptr, "cannot create '", idx_tmp, "': ", std::strerror(errno));
  const uint64_t version = 1, n = lengths_.size(), d = doc_idx_.size();
  const uint8_t code = uint8_t(dtype_);
  write_all(f.get(), kMagic, 9, idx_tmp);
  write_all(f.get(), &version, 8, idx_tmp);
  write_all(f.get(), &code, 1, idx_tmp);
  write_all(f.get(), &n, 8, idx_tmp);
  write_all(f.get(), &d, 8, idx_tmp);
  write_all(f.get(), lengths_.data(), n * 4, idx_tmp);
  std::vector<int64_t> pointers(n);
  int64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    pointers[i] = at;
    at += int64_t(lengths_[i]) * int64_t(token_dtype_size(dtype_));
  }
  write_all(f.get(), pointers.data(), n * 8, idx_tmp);
  write_all(f.get(), doc_idx_.data(), d * 8, idx_tmp);
  MG_USER_CHECK(std::fflush(f.get()) == 0 && fsync(fileno(f.get())) == 0, "cannot flush '", idx_tmp,
                "': ", std::strerror(errno));
  MG_USER_CHECK(std::fclose(f.release()) == 0, "cannot close '", idx_tmp,
                "': ", std::strerror(errno));
  for (const char* ext : {".bin", ".idx"}) {
    const std::string from = prefix_ + ext + ".tmp", to = prefix_ + ext;
    MG_USER_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename '", from, "' to '", to,
                  "': ", std::strerror(errno));
  }
  done_ = true;
}

// ---- reader ----

IdxLayout parse_idx(const uint8_t* p, size_t size, uint64_t bin_size, const std::string& prefix) {
  const std::string idx = prefix + ".idx", bin = prefix + ".bin";
  MG_USER_CHECK(size >= kHeader, "'", idx, "' is truncated: ", size,
                " bytes, smaller than the 34-byte header");
  MG_USER_CHECK(std::memcmp(p, kMagic, 9) == 0, "'", idx,
                "' is not a Megatron index file (bad magic; expected MMIDIDX)");
  const uint64_t version = load_le<uint64_t>(p + 9);
  MG_USER_CHECK(version == 1, "'", idx, "' has index version ", version, "; only version 1 exists");
  const uint8_t code = p[17];
  MG_USER_CHECK(valid_dtype(code) && code != 6 && code != 7, "'", idx, "' has token dtype code ",
                int(code), "; expected an integer type (1-5 or 8)");
  const uint64_t n = load_le<uint64_t>(p + 18), d = load_le<uint64_t>(p + 26);
  // 34 + 12N + 8D bytes, in exact arithmetic: a header announcing more cannot wrap around.
  uint64_t arrays = 0, bounds_bytes = 0, want = 0;
  const bool fits = !__builtin_mul_overflow(n, uint64_t(12), &arrays) &&
                    !__builtin_mul_overflow(d, uint64_t(8), &bounds_bytes) &&
                    !__builtin_add_overflow(arrays, bounds_bytes, &want) &&
                    !__builtin_add_overflow(want, uint64_t(kHeader), &want);
  MG_USER_CHECK(fits && want == size, "'", idx, "' has ", size, " bytes but its header announces ",
                n, " sequences and ", d, " document boundaries (34 + 12 x ", n, " + 8 x ", d,
                " bytes): truncated or corrupted");
  MG_USER_CHECK(d >= 1, "'", idx, "' announces 0 document boundaries (documents + 1 >= 1)");
  IdxLayout L;
  L.dtype = TokenDType(code);
  L.num_sequences = int64_t(n);  // both < 2^61 now: the file holds 12N + 8D bytes
  L.num_bounds = int64_t(d);
  L.lengths_at = kHeader;
  L.pointers_at = kHeader + 4 * n;
  L.bounds_at = kHeader + 12 * n;
  const uint8_t* bounds = p + L.bounds_at;
  int64_t prev = load_le<int64_t>(bounds);
  MG_USER_CHECK(prev == 0, "'", idx, "' document boundary 0 is ", prev, ", not 0: corrupted");
  for (int64_t k = 1; k < L.num_bounds; ++k) {
    const int64_t b = load_le<int64_t>(bounds + 8 * k);
    MG_USER_CHECK(b >= prev && b <= L.num_sequences, "'", idx, "' document boundary ", k, " is ", b,
                  " after ", prev, " (boundaries must not decrease nor pass the ", L.num_sequences,
                  " sequences): corrupted");
    prev = b;
  }
  MG_USER_CHECK(prev == L.num_sequences, "'", idx, "' document boundaries end at sequence ", prev,
                ", not at the sequence count ", L.num_sequences, ": corrupted");
  const uint64_t item = token_dtype_size(L.dtype);
  uint64_t at = 0;  // <= bin_size throughout, so no sum below can wrap
  for (int64_t i = 0; i < L.num_sequences; ++i) {
    const int32_t len = load_le<int32_t>(p + L.lengths_at + 4 * i);
    const int64_t ptr = load_le<int64_t>(p + L.pointers_at + 8 * i);
    MG_USER_CHECK(len >= 0, "'", idx, "' sequence ", i, " has length ", len, ": corrupted");
    MG_USER_CHECK(ptr >= 0 && uint64_t(ptr) == at, "'", idx, "' sequence ", i, " starts at byte ",
                  ptr, "; the sequences before it end at byte ", at, ": corrupted");
    const uint64_t bytes = uint64_t(len) * item;
    MG_USER_CHECK(bytes <= bin_size - at, "'", bin, "' has ", bin_size, " bytes but '", idx,
                  "' sequence ", i, " ends at byte ", at + bytes, ": truncated or mismatched pair");
    at += bytes;
  }
  MG_USER_CHECK(at == bin_size, "'", bin, "' has ", bin_size, " bytes but '", idx, "' describes ",
                at, ": truncated or mismatched pair");
  return L;
}

IndexedDataset::IndexedDataset(const std::string& prefix, int64_t vocab_size)
    : prefix_(prefix),
      vocab_limit_(vocab_size > 0 && vocab_size <= INT32_MAX ? vocab_size
                                                             : int64_t(INT32_MAX) + 1) {
  try {
    idx_map_ = map_file(prefix + ".idx", idx_size_);
    bin_map_ = map_file(prefix + ".bin", bin_size_);
    static const uint8_t kEmpty[1] = {0};
    layout_ = parse_idx(idx_map_ ? idx() : kEmpty, idx_size_, bin_size_, prefix);
  } catch (...) {  // the destructor does not run for a constructor that throws
    unmap();
    throw;
  }
}

IndexedDataset::~IndexedDataset() { unmap(); }

void IndexedDataset::unmap() {
  if (idx_map_) munmap(idx_map_, idx_size_);
  if (bin_map_) munmap(bin_map_, bin_size_);
  idx_map_ = bin_map_ = nullptr;
}

void IndexedDataset::bad_token(int64_t i, int64_t position, int64_t id) const {
  // The document holding sequence i: the last boundary <= i.
  int64_t lo = 0, hi = layout_.num_bounds - 1;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (document_bound(mid) <= i ? lo : hi) = mid;
  }
  const bool vocab = vocab_limit_ <= INT32_MAX;
  throw UsageError(str_cat("'", prefix_, ".bin' document ", lo, " (sequence ", i, ", token ",
                           position, ") holds id ", id, ", outside ",
                           vocab
                               ? str_cat("the model's vocabulary [0, ", vocab_limit_, ")")
                               : std::string("[0, 2^31), the int32 range token ids are read into"),
                           "; preprocess the data with the tokenizer given to train"));
}

void IndexedDataset::get(int64_t i, int64_t offset, int64_t n, int32_t* out) const {
  MG_CHECK(i >= 0 && i < num_sequences() && offset >= 0 && n >= 0 && offset + n <= length(i),
           "sequence ", i, " range [", offset, ", ", offset + n, ") outside its tokens");
  if (n == 0) return;
  // Each id is range-checked as its stored type, before it is narrowed to int32.
  auto copy = [&]<typename T>() {
    const uint8_t* base = bin_data() + pointer(i) + offset * int64_t(sizeof(T));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t v = int64_t(load_le<T>(base + k * int64_t(sizeof(T))));
      if (v < 0 || v >= vocab_limit_) bad_token(i, offset + k, v);
      out[k] = int32_t(v);
    }
  };
  switch (layout_.dtype) {
    case TokenDType::U8: copy.operator()<uint8_t>(); break;
    case TokenDType::I8: copy.operator()<int8_t>(); break;
    case TokenDType::I16: copy.operator()<int16_t>(); break;
    case TokenDType::U16: copy.operator()<uint16_t>(); break;
    case TokenDType::I32: copy.operator()<int32_t>(); break;
    case TokenDType::I64: copy.operator()<int64_t>(); break;
    default: MG_CHECK(false, "float token file");
  }
}

}  // namespace mg
