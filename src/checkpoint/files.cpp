#include "checkpoint/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace mg::ckpt {

uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = uInt(std::min<size_t>(n, 1u << 30));
    crc = uint32_t(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

SyncedWriter::SyncedWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MG_USER_CHECK(fd_ >= 0, "cannot create '", path, "': ", std::strerror(errno));
}

SyncedWriter::~SyncedWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SyncedWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  crc_ = crc32_of(p, n, crc_);
  bytes_ += n;
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, 1u << 30));
    MG_USER_CHECK(w > 0 || errno == EINTR, "cannot write '", path_, "': ", std::strerror(errno),
                  " (disk full?)");
    if (w <= 0) continue;
    p += w;
    n -= size_t(w);
  }
}

void SyncedWriter::close() {
  MG_USER_CHECK(::fsync(fd_) == 0, "cannot fsync '", path_, "': ", std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  MG_USER_CHECK(rc == 0, "cannot close '", path_, "': ", std::strerror(errno));
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  MG_USER_CHECK(fd >= 0, "cannot open directory '", dir, "': ", std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  MG_USER_CHECK(rc == 0, "cannot fsync directory '", dir, "': ", std::strerror(errno));
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path), w_(path + ".tmp") {}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) ::unlink((path_ + ".tmp").c_str());
}

void AtomicFileWriter::commit() {
  const std::string tmp = path_ + ".tmp";
  w_.close();
  MG_USER_CHECK(std::rename(tmp.c_str(), path_.c_str()) == 0, "cannot rename '", tmp, "' to '",
                path_, "': ", std::strerror(errno));
  committed_ = true;
  const size_t slash = path_.find_last_of('/');
  fsync_dir(slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFileWriter w(path);
  w.write(content.data(), content.size());
  w.commit();
}

void write_file_synced(const std::string& path, const std::string& content) {
  SyncedWriter w(path);
  w.write(content.data(), content.size());
  w.close();
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MG_USER_CHECK(f.good(), "cannot read '", path, "' (missing?)");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  MG_USER_CHECK(fd >= 0, "file '", path, "' is missing (", std::strerror(errno), ")");
  struct stat st {};
  ::fstat(fd, &st);
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    MG_USER_CHECK(p != MAP_FAILED, "cannot map '", path, "': ", std::strerror(errno));
    data_ = static_cast<const char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

void MappedFile::release(const char* p, uint64_t n) const {
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  // Whole pages inside the range only: a neighbour's bytes on a shared page stay mapped.
  const uint64_t begin = (uint64_t(p - data_) + page - 1) / page * page;
  const uint64_t end = uint64_t(p - data_) + n;
  if (end > begin + page)
    ::madvise(const_cast<char*>(data_) + begin, (end - begin) / page * page, MADV_DONTNEED);
}

RandomAccessFile::RandomAccessFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY);
  MG_USER_CHECK(fd_ >= 0, "file '", path, "' is missing (", std::strerror(errno), ")");
  struct stat st {};
  ::fstat(fd_, &st);
  size_ = uint64_t(st.st_size);
}

RandomAccessFile::~RandomAccessFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RandomAccessFile::read(uint64_t offset, void* dst, size_t n) const {
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    MG_USER_CHECK(got > 0, "cannot read '", path_, "' at byte ", offset, ": ",
                  got == 0 ? "end of file (truncated?)" : std::strerror(errno));
    out += got, offset += uint64_t(got), n -= size_t(got);
  }
}

uint32_t RandomAccessFile::crc32() const {
  std::vector<char> buf(size_t(16) << 20);
  uint32_t crc = 0;
  for (uint64_t at = 0; at < size_;) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), size_ - at));
    read(at, buf.data(), n);
    crc = crc32_of(buf.data(), n, crc);
    at += n;
  }
  return crc;
}

}  // namespace mg::ckpt
