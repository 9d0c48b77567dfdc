// Megatron's indexed dataset: P.bin holds the token ids of every sequence back to back; P.idx
// holds a 34-byte header ("MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count N,
// u64 document count D = documents + 1), then i32 lengths[N], i64 byte pointers[N], i64
// document boundaries[D] (megatron-reference.md §2.1-2.3). Little-endian, no padding.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace mg {

// Megatron's DType codes.
enum class TokenDType : uint8_t { U8 = 1, I8 = 2, I16 = 3, I32 = 4, I64 = 5, F64 = 6, F32 = 7, U16 = 8 };
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

// Memory-mapped reader. Every field is validated against the file sizes on open; a truncated
// or corrupted pair gets a UsageError naming the file and what is wrong.
class IndexedDataset : public TokenSource {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset() override;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  int64_t num_sequences() const override { return n_; }
  int64_t sequence_length(int64_t i) const override { return lengths_[i]; }
  void get(int64_t i, int64_t offset, int64_t n, int32_t* out) const override;

  int64_t num_documents() const { return d_ - 1; }
  const int64_t* document_indices() const { return doc_idx_; }
  const int32_t* lengths() const { return lengths_; }
  const int64_t* pointers() const { return pointers_; }
  TokenDType dtype() const { return dtype_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  int64_t n_ = 0, d_ = 0;
  void* idx_map_ = nullptr;
  size_t idx_size_ = 0;
  void* bin_map_ = nullptr;
  size_t bin_size_ = 0;
  const int32_t* lengths_ = nullptr;
  const int64_t* pointers_ = nullptr;
  const int64_t* doc_idx_ = nullptr;
};

}  // namespace mg
