#include "state/seal.hpp"

#include <cstdio>

namespace tune::state {

namespace {

constexpr size_t kHexDigits = 16;

std::string hex(uint64_t v) {
  char buf[kHexDigits + 1];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Checks `line` = BODY + kSealKey + HEX + `suffix`, where the seal covers BODY + "}".
SealCheck check(std::string_view line, std::string_view suffix) {
  size_t at = line.rfind(kSealKey);
  if (at == std::string_view::npos) return SealCheck::kUnsealed;
  std::string_view rest = line.substr(at + kSealKey.size());
  if (rest.size() != kHexDigits + 1 + suffix.size() || rest[kHexDigits] != '"' ||
      rest.substr(kHexDigits + 1) != suffix)
    return SealCheck::kBroken;
  std::string body(line.substr(0, at));
  body += '}';
  return rest.substr(0, kHexDigits) == hex(fnv1a64(body)) ? SealCheck::kValid : SealCheck::kBroken;
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string seal_object(std::string_view object) {
  std::string out(object.substr(0, object.size() - 1));  // without '}'
  out += kSealKey;
  out += hex(fnv1a64(object));
  out += "\"}";
  return out;
}

std::string seal_header(std::string_view object, std::string_view tail) {
  std::string out(object.substr(0, object.size() - 1));
  out += kSealKey;
  out += hex(fnv1a64(object));
  out += '"';
  out += tail;
  return out;
}

SealCheck check_object(std::string_view line) {
  return check(line, "}");
}

SealCheck check_header(std::string_view line, std::string_view tail) {
  return check(line, tail);
}

}  // namespace tune::state
