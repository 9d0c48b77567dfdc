// The event file's bytes: TFRecord framing and the hand-encoded Event protobuf, pinned against
// bytes worked out from the wire format (tensorboard_e2e_test.cpp reads whole files back with
// an independent reader).
#include "train/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/crc32c.h"
#include "core/error.h"
#include "train/tensorboard_log.h"

namespace mg {
namespace {

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += d[c >> 4], h += d[c & 15];
  return h;
}

TEST(TensorBoard, ScalarEventBytes) {
  // wall_time 1.5 (field 1, fixed64), step 7 (field 2, varint), summary (field 5) holding one
  // value {tag "lm loss" (field 1), simple_value 2.0f (field 2, fixed32)}.
  EXPECT_EQ(hex(scalar_event(1.5, 7, "lm loss", 2.0f)),
            "09000000000000f83f"
            "1007"
            "2a10"
            "0a0e"
            "0a076c6d206c6f7373"
            "1500000040");
  // A step past 127 takes a multi-byte varint: 300 = 0xac 0x02.
  EXPECT_EQ(hex(scalar_event(0.0, 300, "x", 0.0f)).substr(0, 24),
            "0900000000000000001"
            "0ac02");
}

TEST(TensorBoard, FileVersionEventBytes) {
  // No step field (proto3 leaves zero out); file_version is field 3.
  EXPECT_EQ(hex(file_version_event(0.0)),
            "090000000000000000"
            "1a0d" +
                hex("brain.Event:2"));
}

TEST(TensorBoard, RecordFraming) {
  const std::string data = "123456789";
  const std::string r = tfrecord_frame(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  uint64_t len;
  uint32_t len_crc, data_crc;
  std::memcpy(&len, r.data(), 8);
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 12 + data.size(), 4);
  EXPECT_EQ(len, data.size());
  EXPECT_EQ(len_crc, masked_crc32c(r.data(), 8));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(data_crc, 0xC78AB0E5u);  // the masked check value of "123456789"
}

TEST(TensorBoard, WriterQueuesUntilFlush) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mg_tb_unit_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w(dir.string(), /*queue_size=*/3);
    path = w.path();
    EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    const auto version_only = std::filesystem::file_size(path);  // written and flushed at once
    EXPECT_EQ(version_only, 12 + file_version_event(0.0).size() + 4);
    w.add_scalar("a", 1.0, 1);
    w.add_scalar("a", 2.0, 2);
    EXPECT_EQ(std::filesystem::file_size(path), version_only);  // queued
    w.add_scalar("a", 3.0, 3);                                  // the third fills the queue
    EXPECT_GT(std::filesystem::file_size(path), version_only);
    const auto three = std::filesystem::file_size(path);
    w.add_scalar("a", 4.0, 4);
    w.flush();
    EXPECT_GT(std::filesystem::file_size(path), three);
  }
  std::filesystem::remove_all(dir);
}

// Bad values get a UsageError naming the flag.
TEST(TensorBoard, BadFlagsNameTheFlag) {
  auto message = [](const TensorBoardConfig& c) {
    try {
      c.validate();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TensorBoardConfig c;
  EXPECT_EQ(message(c), "");
  c.log_interval = 0;
  EXPECT_NE(message(c).find("--tensorboard-log-interval"), std::string::npos);
  c = {};
  c.queue_size = -1;
  EXPECT_NE(message(c).find("--tensorboard-queue-size"), std::string::npos);
  try {
    TensorBoardWriter w("/proc/version/tb", 10);  // under a file: cannot be created
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard-dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mg
