// Megatron's indexed dataset: P.bin holds the token ids of every sequence back to back; P.idx
// holds a 34-byte header ("MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count N,
// u64 document count D = documents + 1), then i32 lengths[N], i64 byte pointers[N], i64
// document boundaries[D] (docs/reference/megatron-reference.md §2.1-2.3). Little-endian, no padding.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace mg {

// Megatron's DType codes.
enum class TokenDType : uint8_t {
  U8 = 1,
  I8 = 2,
  I16 = 3,
  I32 = 4,
  I64 = 5,
  F64 = 6,
  F32 = 7,
  U16 = 8
};
size_t token_dtype_size(TokenDType t);
// uint16 when the vocabulary fits (< 65500), else int32 (Megatron's optimal_dtype).
TokenDType optimal_token_dtype(int64_t vocab_size);

// Writes P.bin / P.idx under temporary names; finalize() renames them into place, so a crash
// or an error never leaves a half-written dataset under the final names.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetWriter();  // removes the temporaries if finalize() did not run
  // One document made of sequences (sentences) with the given lengths (summing to ids.size()).
  void add_document(const std::vector<int32_t>& ids, const std::vector<int32_t>& lengths);
  // Appends every document of an existing dataset (Megatron's add_index); dtypes must match.
  void add_index(const std::string& prefix);
  void finalize();
  int64_t num_documents() const { return int64_t(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return tokens_; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_idx_{0};
  int64_t tokens_ = 0;
  bool done_ = false;
};

// Where the arrays of a validated .idx image lie. The arrays start at byte 34, so they are not
// aligned to their element size: read them only through load_le.
struct IdxLayout {
  TokenDType dtype = TokenDType::U16;
  int64_t num_sequences = 0;  // N
  int64_t num_bounds = 0;     // D = documents + 1
  size_t lengths_at = 0;      // i32[N]
  size_t pointers_at = 0;     // i64[N]
  size_t bounds_at = 0;       // i64[D]
};

// Validates the .idx image `data[0, size)` field by field against the size of its .bin:
// header (magic, version, integer dtype), 34 + 12N + 8D == size, document boundaries running
// from 0 to N without decreasing, lengths non-negative, pointers contiguous from 0 and ending
// exactly at bin_size. Throws UsageError naming `prefix`.idx / .bin and the field; never reads
// outside the image and never overflows (the fuzz target of the reader).
IdxLayout parse_idx(const uint8_t* data, size_t size, uint64_t bin_size, const std::string& prefix);

// A little-endian value at any (unaligned) address.
template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Memory-mapped reader over a pair validated by parse_idx. Token ids are checked against
// [0, vocab_size) (0: against the int32 range they are read into) before they are narrowed,
// so a wide id is an error naming the .bin file, the document and the position, never a
// silently truncated id.
class IndexedDataset : public TokenSource {
 public:
  explicit IndexedDataset(const std::string& prefix, int64_t vocab_size = 0);
  ~IndexedDataset() override;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  int64_t num_sequences() const override { return layout_.num_sequences; }
  int64_t sequence_length(int64_t i) const override { return length(i); }
  void get(int64_t i, int64_t offset, int64_t n, int32_t* out) const override;

  int64_t num_documents() const { return layout_.num_bounds - 1; }
  int32_t length(int64_t i) const { return load_le<int32_t>(idx() + layout_.lengths_at + 4 * i); }
  int64_t pointer(int64_t i) const { return load_le<int64_t>(idx() + layout_.pointers_at + 8 * i); }
  // Document k covers sequences [document_bound(k), document_bound(k + 1)).
  int64_t document_bound(int64_t k) const {
    return load_le<int64_t>(idx() + layout_.bounds_at + 8 * k);
  }
  TokenDType dtype() const { return layout_.dtype; }
  const std::string& prefix() const { return prefix_; }
  const uint8_t* bin_data() const { return static_cast<const uint8_t*>(bin_map_); }
  size_t bin_size() const { return bin_size_; }

 private:
  const uint8_t* idx() const { return static_cast<const uint8_t*>(idx_map_); }
  [[noreturn]] void bad_token(int64_t i, int64_t position, int64_t id) const;
  void unmap();

  std::string prefix_;
  int64_t vocab_limit_;
  IdxLayout layout_;
  void* idx_map_ = nullptr;
  size_t idx_size_ = 0;
  void* bin_map_ = nullptr;
  size_t bin_size_ = 0;
};

}  // namespace mg
