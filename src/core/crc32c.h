// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF), as
// TFRecord files checksum their records, and TensorFlow's mask of it,
// ((crc >> 15) | (crc << 17)) + 0xa282ead8, which keeps a CRC stored inside checksummed data
// from checksumming to a constant.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mg {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);
uint32_t mask_crc32c(uint32_t crc);

}  // namespace mg
