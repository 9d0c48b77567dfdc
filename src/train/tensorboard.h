// TensorBoard event files written natively: the file TensorBoard's loader reads
// (events.out.tfevents.<seconds>.<host>.<pid>.<n>) is a sequence of TFRecords (uint64 length,
// masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes) each holding one
// Event protobuf: wall_time (field 1, double), step (2, int64), and either file_version (3,
// "brain.Event:2", the first record) or a Summary (5) of Values {tag (1), simple_value (2,
// float)}. The protobufs are encoded here by hand; no TensorFlow or protobuf library is needed.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace mg {

// The record framing of bytes (length, masked CRCs) around data.
std::string tfrecord_frame(std::string_view data);
// Event protobufs, serialized.
std::string file_version_event(double wall_time);
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

// One event file under dir, as torch's SummaryWriter(log_dir=dir, max_queue=queue_size) makes
// it: scalars queue in memory and reach the file when queue_size of them wait or at flush(),
// which also fsyncs it (the trainer flushes at every log interval, so a killed run loses at
// most the last interval).
class TensorBoardWriter {
 public:
  TensorBoardWriter(const std::string& dir, int64_t queue_size);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(std::string_view tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FILE* file_ = nullptr;
  int64_t queue_size_;
  std::vector<std::string> pending_;  // framed records not yet written
};

}  // namespace mg
