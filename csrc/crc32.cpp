#include "crc32.h"

#include <array>

namespace poincare {

namespace {

// Slicing-by-8 tables: eight bytes per step instead of one keeps checksumming far below the cost
// of reading the file.
struct Tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  Tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int b = 0; b < 8; ++b) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  }
};

const Tables& tables() {
  static const Tables tb;
  return tb;
}

constexpr std::uint32_t kPolynomial = 0xEDB88320u;  // reflected: bit 31 is x^0

// a * b modulo the CRC polynomial, in the reflected bit order the CRC uses.
std::uint32_t multiply_mod(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(8 * bytes) modulo the polynomial: appending `bytes` zero bytes multiplies a CRC's state by
// it. Square-and-multiply over the powers x^(2^k).
std::uint32_t shift_by_bytes(std::size_t bytes) {
  std::uint32_t result = 1u << 31;  // x^0
  std::uint32_t power = 1u << 23;   // x^8: one byte
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = multiply_mod(power, result);
    power = multiply_mod(power, power);
  }
  return result;
}

}  // namespace

std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::size_t length_b) {
  // The pre- and post-inversions of both CRCs cancel but for crc(A)'s state carried over B.
  return multiply_mod(shift_by_bytes(length_b), crc_a) ^ crc_b;
}

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) {
  const auto& t = tables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (size >= 8) {
    const std::uint32_t lo =
        crc ^ (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
               static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    size -= 8;
  }
  while (size--) crc = t[0][(crc ^ *p++) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace poincare
