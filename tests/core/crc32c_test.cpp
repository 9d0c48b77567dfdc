// CRC-32C against published check values (the catalogue's "123456789" check and RFC 3720's
// iSCSI vectors) and TensorFlow's mask of it.
#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mg {
namespace {

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i)
    up[size_t(i)] = (unsigned char)i, down[size_t(i)] = (unsigned char)(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), 32), 0x113FDB5Cu);
}

TEST(Crc32c, TensorFlowMask) {
  // ((c >> 15) | (c << 17)) + 0xa282ead8 of the check value, worked by hand.
  EXPECT_EQ(mask_crc32c(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
  EXPECT_EQ(mask_crc32c(0u), 0xa282ead8u);
}

}  // namespace
}  // namespace mg
