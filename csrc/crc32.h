// CRC-32 (IEEE 802.3 polynomial, the one zlib.crc32 computes), for file checksums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace poincare {

// Continues a CRC over `size` bytes; start with crc = 0.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size);

// The CRC of a concatenation A + B from crc(A), crc(B) and B's length: what lets pieces of a
// file be checksummed on several threads and checked against one CRC of the whole.
std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::size_t length_b);

}  // namespace poincare
