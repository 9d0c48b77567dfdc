#include "train/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"

namespace mg {

namespace {

// Protobuf wire format: a key is (field << 3 | wire type); 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32. Fixed-width values are little-endian.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}
template <typename T>
void put_fixed(std::string& out, T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // this machine is little-endian, as x86-64 and aarch64 are
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, 1);  // Event.wall_time
  put_fixed(e, wall_time);
  if (step != 0) {     // proto3 leaves a zero default out
    put_key(e, 2, 0);  // Event.step
    put_varint(e, uint64_t(step));
  }
  return e;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string tfrecord_frame(std::string_view data) {
  std::string r;
  put_fixed(r, uint64_t(data.size()));
  put_fixed(r, masked_crc32c(r.data(), 8));
  r.append(data);
  put_fixed(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::string file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");  // Event.file_version
  return e;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);  // Summary.Value.tag
  put_key(v, 2, 5);      // Summary.Value.simple_value
  put_fixed(v, value);
  std::string summary;
  put_bytes(summary, 1, v);  // Summary.value (repeated; one per event, as add_scalar writes)
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t queue_size)
    : queue_size_(queue_size) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MG_USER_CHECK(!ec, "--tensorboard-dir: cannot create ", dir, ": ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double t = now_seconds();
  // TensorBoard orders a directory's files by name: seconds, host, pid, then a counter.
  char name[400];
  std::snprintf(name, sizeof(name), "events.out.tfevents.%010lld.%s.%d.0", (long long)t, host,
                int(getpid()));
  path_ = (std::filesystem::path(dir) / name).string();
  file_ = std::fopen(path_.c_str(), "wb");
  MG_USER_CHECK(file_ != nullptr, "--tensorboard-dir: cannot create ", path_, ": ",
                std::strerror(errno));
  pending_.push_back(tfrecord_frame(file_version_event(t)));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    flush();
  } catch (const std::exception&) {  // a destructor must not throw; the run's result stands
  }
  std::fclose(file_);
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step) {
  pending_.push_back(tfrecord_frame(scalar_event(now_seconds(), step, tag, float(value))));
  if (int64_t(pending_.size()) >= queue_size_) flush();
}

void TensorBoardWriter::flush() {
  for (const std::string& r : pending_)
    MG_USER_CHECK(std::fwrite(r.data(), 1, r.size(), file_) == r.size(),
                  "--tensorboard-dir: cannot write ", path_, ": ", std::strerror(errno));
  pending_.clear();
  MG_USER_CHECK(std::fflush(file_) == 0, "--tensorboard-dir: cannot write ", path_, ": ",
                std::strerror(errno));
  fsync(fileno(file_));
}

}  // namespace mg
