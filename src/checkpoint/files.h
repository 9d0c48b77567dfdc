// Durable file operations for checkpoints and other outputs: whole-file writes that are fsynced
// before they count, directory fsyncs (so a rename survives a crash), atomic replacement by
// rename that leaves no .tmp behind on failure, and CRC-32 (zlib's polynomial, as `crc32` /
// Python's zlib.crc32 compute it).
#pragma once
#include <cstdint>
#include <string>

namespace mg::ckpt {

uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0);

// Appends bytes to a file and keeps its running CRC; close() fsyncs.
class SyncedWriter {
 public:
  explicit SyncedWriter(const std::string& path);
  ~SyncedWriter();
  void write(const void* data, size_t n);
  void close();
  uint64_t bytes() const { return bytes_; }
  uint32_t crc() const { return crc_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// Writes path atomically: the bytes go to path.tmp; commit() fsyncs it, renames it over path
// and fsyncs the directory, so readers see the old or the new content, never a torn one.
// Destroyed without commit() (an error on the way), it removes path.tmp.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  void write(const void* data, size_t n) { w_.write(data, n); }
  void commit();
  uint64_t bytes() const { return w_.bytes(); }
  uint32_t crc() const { return w_.crc(); }

 private:
  std::string path_;
  SyncedWriter w_;
  bool committed_ = false;
};

// A whole file written with AtomicFileWriter.
void write_file_atomic(const std::string& path, const std::string& content);
// A whole file written with SyncedWriter (in place: inside a directory published later).
void write_file_synced(const std::string& path, const std::string& content);
void fsync_dir(const std::string& dir);
std::string read_text_file(const std::string& path);

// A read-only mapping of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Drops the pages of [p, p + n) from this process (they are re-read if touched again): a
  // reader that copies one tensor at a time out of a large file keeps only that tensor resident.
  void release(const char* p, uint64_t n) const;

 private:
  const char* data_ = nullptr;
  uint64_t size_ = 0;
};

// A file read by byte ranges (pread), never mapped or loaded whole.
class RandomAccessFile {
 public:
  explicit RandomAccessFile(const std::string& path);
  ~RandomAccessFile();
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;
  uint64_t size() const { return size_; }
  // Bytes [offset, offset + n) into dst; a short read is a UsageError naming the file.
  void read(uint64_t offset, void* dst, size_t n) const;
  // The whole file's CRC-32, streamed through a small buffer.
  uint32_t crc32() const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace mg::ckpt
