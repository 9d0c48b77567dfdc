// The "low-level dataset" interface a GPTDataset reads from: sequences of token ids addressed
// by index, offset and length (Megatron's IndexedDataset.get). Implemented by the mock dataset
// now and by the mmap'd .bin/.idx reader.
#pragma once
#include <cstdint>
#include <string>

namespace mg {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_sequences() const = 0;
  virtual int64_t sequence_length(int64_t i) const = 0;
  // Copies tokens [offset, offset + n) of sequence i into out.
  virtual void get(int64_t i, int64_t offset, int64_t n, int32_t* out) const = 0;
};

}  // namespace mg
