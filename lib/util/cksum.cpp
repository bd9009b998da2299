#include "util/cksum.hpp"

#include <array>

namespace tune::util {

namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i << 24;
    for (int k = 0; k < 8; ++k) c = (c & 0x80000000u) ? (c << 1) ^ 0x04C11DB7u : c << 1;
    t[i] = c;
  }
  return t;
}

constexpr auto kTable = make_table();

}  // namespace

uint32_t posix_cksum(std::string_view data) {
  uint32_t crc = 0;
  auto add = [&](unsigned char b) { crc = (crc << 8) ^ kTable[(crc >> 24) ^ b]; };
  for (char c : data) add(static_cast<unsigned char>(c));
  // then the length, least significant byte first, as few bytes as it takes
  for (uint64_t n = data.size(); n != 0; n >>= 8) add(static_cast<unsigned char>(n & 0xff));
  return ~crc;
}

}  // namespace tune::util
