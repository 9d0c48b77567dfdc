#include "data/npy.h"

#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"

namespace mg {

int64_t NpyArray::at(size_t i) const {
  const char* p = data.data() + i * item();
  if (descr == "<i4") {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (descr == "<u4") {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (descr == "<i8") {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (descr == "<u8") {
    uint64_t v;
    std::memcpy(&v, p, 8);
    MG_USER_CHECK(v <= uint64_t(INT64_MAX), "'", path, "' element ", i, " (", v,
                  ") is past int64; delete the file to rebuild it");
    return int64_t(v);
  }
  if (descr == "<i2") {
    int16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  if (descr == "<u2") {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  MG_CHECK(false, "unsupported npy dtype ", descr);
  return 0;
}

void NpyArray::out_of_range(size_t i, int64_t v) const {
  throw UsageError(str_cat("'", path, "' element ", i, " (", v,
                           ") is outside the range of the index it holds; delete it to rebuild"));
}

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  std::string shape_s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    shape_s += std::to_string(shape[i]) + (shape.size() == 1      ? ","
                                           : i + 1 < shape.size() ? ", "
                                                                  : "");
  shape_s += ")";
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_s + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    MG_USER_CHECK(f.good(), "cannot write '", tmp, "' (check --data-cache-path)");
    const uint16_t len = uint16_t(header.size());
    f.write("\x93NUMPY\x01\x00", 8);
    f.write(reinterpret_cast<const char*>(&len), 2);
    f.write(header.data(), std::streamsize(header.size()));
    f.write(static_cast<const char*>(data), std::streamsize(bytes));
    f.flush();
    if (!f.good()) std::remove(tmp.c_str());
    MG_USER_CHECK(f.good(), "cannot write '", tmp, "' (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::remove(tmp.c_str());
  MG_USER_CHECK(!ec, "cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MG_USER_CHECK(f.good(), "cannot read '", path, "'");
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  MG_USER_CHECK(!ec, "cannot read '", path, "': ", ec.message());
  char magic[8];
  uint16_t len = 0;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&len), 2);
  MG_USER_CHECK(f.good() && std::memcmp(magic, "\x93NUMPY\x01", 7) == 0, "'", path,
                "' is not a .npy file (version 1)");
  MG_USER_CHECK(10 + uint64_t(len) <= file_size, "'", path, "': header of ", len,
                " bytes runs past the end of the file (truncated)");
  std::string header(len, '\0');
  f.read(header.data(), len);
  std::smatch m;
  MG_USER_CHECK(std::regex_search(header, m, std::regex("'descr': '([<|][iu][248])'")), "'", path,
                "': unsupported dtype");
  NpyArray a;
  a.path = path;
  a.descr = m[1];
  a.descr[0] = '<';
  MG_USER_CHECK(header.find("'fortran_order': False") != std::string::npos, "'", path,
                "': Fortran order is not supported");
  std::smatch s;
  MG_USER_CHECK(std::regex_search(header, s, std::regex("'shape': \\(([0-9, ]*)\\)")), "'", path,
                "': no shape");
  // Element count and byte size in exact arithmetic, checked against the file before any
  // allocation: a corrupted shape is an error, not a huge allocation or a wrapped count.
  uint64_t n = 1;
  const std::string dims = s[1];
  const std::regex number("[0-9]+");
  bool fits = true;
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number);
       it != std::sregex_iterator(); ++it) {
    const std::string d = it->str();
    uint64_t v = 0;
    const auto [end, err] = std::from_chars(d.data(), d.data() + d.size(), v);
    fits =
        fits && err == std::errc() && v <= uint64_t(INT64_MAX) && !__builtin_mul_overflow(n, v, &n);
    a.shape.push_back(fits ? int64_t(v) : 0);
  }
  uint64_t bytes = 0;
  fits = fits && !__builtin_mul_overflow(n, uint64_t(a.item()), &bytes);
  MG_USER_CHECK(fits && bytes <= file_size - 10 - len, "'", path, "': shape (", dims,
                ") needs more than the file's ", file_size - 10 - len,
                " data bytes (truncated or corrupted)");
  a.data.resize(size_t(bytes));
  f.read(a.data.data(), std::streamsize(a.data.size()));
  MG_USER_CHECK(f.gcount() == std::streamsize(a.data.size()), "'", path, "' is truncated");
  return a;
}

}  // namespace mg
