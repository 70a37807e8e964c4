// CRC-32 (IEEE 802.3 polynomial, the one zlib.crc32 computes), for file checksums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace poincare {

// Continues a CRC over `size` bytes; start with crc = 0.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size);

}  // namespace poincare
