// NumPy .npy files (format 1.0), the format of Megatron's index caches: a magic string, a
// little-endian header dict {'descr', 'fortran_order', 'shape'} padded to 64 bytes, raw data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mg {

struct NpyArray {
  std::string descr;           // "<i4", "<i8", "<u4", "<i2"
  std::vector<int64_t> shape;
  std::vector<char> data;
  template <typename T>
  std::vector<T> as() const {  // element conversion to T
    std::vector<T> out;
    const size_t n = data.size() / item();
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.push_back(T(at(i)));
    return out;
  }
  size_t item() const { return size_t(descr.back() - '0'); }
  int64_t at(size_t i) const;
};

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);
// Throws UsageError naming the file when it is not a readable .npy of an integer type.
NpyArray read_npy(const std::string& path);

}  // namespace mg
