// NumPy .npy files (format 1.0), the format of Megatron's index caches: a magic string, a
// little-endian header dict {'descr', 'fortran_order', 'shape'} padded to 64 bytes, raw data.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mg {

struct NpyArray {
  std::string path;   // the file it was read from (for messages)
  std::string descr;  // "<i4", "<i8", "<u4", "<i2"
  std::vector<int64_t> shape;
  std::vector<char> data;
  // Element conversion to T; an element outside T's range is a UsageError naming the file,
  // never a silently wrapped value.
  template <typename T>
  std::vector<T> as() const {
    std::vector<T> out;
    const size_t n = data.size() / item();
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = at(i);
      if (!std::in_range<T>(v)) out_of_range(i, v);
      out.push_back(T(v));
    }
    return out;
  }
  [[noreturn]] void out_of_range(size_t i, int64_t v) const;
  size_t item() const { return size_t(descr.back() - '0'); }
  int64_t at(size_t i) const;
};

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);
// Throws UsageError naming the file when it is not a readable .npy of an integer type.
NpyArray read_npy(const std::string& path);

}  // namespace mg
