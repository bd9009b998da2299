// Well-formed UTF-8, one sequence at a time: inline, for scanners that meet non-ASCII bytes in
// their inner loop (the report's row scanner) and for util::invalid_utf8_at.
#pragma once

#include <cstddef>
#include <string_view>

namespace tune::util {

// The length of the well-formed UTF-8 sequence (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF) that starts at s[i]: 1 for an ASCII byte, 0 if the bytes there are
// not one (a stray continuation byte, a sequence cut short by the end of `s`). `i` < s.size().
[[nodiscard]] inline size_t utf8_sequence_at(std::string_view s, size_t i) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  size_t n = s.size() - i;
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (len > n || p[1] < lo || p[1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (p[k] < 0x80 || p[k] > 0xBF) return 0;
  return len;
}

}  // namespace tune::util
