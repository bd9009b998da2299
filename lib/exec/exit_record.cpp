// Attempt nonces and the check of a supervisor's exit record (see exit_record.hpp).
#include "exec/exit_record.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/atomic_file.hpp"
#include "util/fs.hpp"

namespace tune::exec {

namespace {

constexpr size_t kKeyBytes = 16;

uint64_t rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

// SipHash-2-4 (Aumasson & Bernstein, 2012): a keyed PRF, so a nonce reveals nothing of the key
// or of other attempts' nonces.
uint64_t siphash24(const std::array<uint8_t, kKeyBytes>& key, std::string_view msg) {
  auto le64 = [](const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  };
  uint64_t k0 = le64(key.data()), k1 = le64(key.data() + 8);
  uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
  uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
  auto round = [&] {
    v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);
    v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);
  };
  const auto* p = reinterpret_cast<const uint8_t*>(msg.data());
  size_t n = msg.size(), full = n / 8 * 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = le64(p + i);
    v3 ^= m, round(), round(), v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(n & 0xff) << 56;
  for (size_t i = full; i < n; ++i) last |= static_cast<uint64_t>(p[i]) << (8 * (i - full));
  v3 ^= last, round(), round(), v0 ^= last;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

std::optional<std::array<uint8_t, kKeyBytes>> key_bytes(std::string_view hex) {
  if (hex.size() != 2 * kKeyBytes) return std::nullopt;
  std::array<uint8_t, kKeyBytes> key{};
  for (size_t i = 0; i < hex.size(); ++i) {
    const char* digits = "0123456789abcdef";
    const char* at = hex[i] ? std::strchr(digits, hex[i]) : nullptr;
    if (!at) return std::nullopt;
    key[i / 2] = static_cast<uint8_t>(key[i / 2] << 4 | (at - digits));
  }
  return key;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Result<std::string> load_record_key(const fs::path& file) {
  if (auto text = util::read_file(file, 4096)) {
    std::string key = text->substr(0, text->find('\n'));
    if (key_bytes(key)) return key;
  }
  std::array<uint8_t, kKeyBytes> raw{};
  for (size_t got = 0; got < raw.size();) {
    ssize_t n = ::getrandom(raw.data() + got, raw.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("cannot draw a random key: ", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  std::string key;
  for (uint8_t b : raw) key += hex64(b).substr(14);
  if (auto w = util::write_file_atomic(file, key + "\n", true); !w)
    return std::unexpected(w.error());
  ::chmod(file.c_str(), 0600);
  return key;
}

std::string attempt_nonce(std::string_view key, std::string_view trial_name, int attempt) {
  auto k = key_bytes(key).value_or(std::array<uint8_t, kKeyBytes>{});
  std::string msg = std::string(trial_name) + '\0' + std::to_string(attempt);
  return hex64(siphash24(k, "a" + msg)) + hex64(siphash24(k, "b" + msg));
}

std::string record_path(std::string_view trial_name) {
  return ".tune/exit/" + std::string(trial_name) + ".json";
}

RecordCheck check_exit_record(const std::optional<std::string>& text, int attempt,
                              const AttemptIdentity& id, ExitInfo& info) {
  if (!text) return RecordCheck::kAbsent;
  auto parsed = parse_exit_record(*text, attempt);
  if (!parsed || id.nonce.empty() || parsed->nonce != id.nonce) return RecordCheck::kForged;
  auto differs = [](const auto& known, const auto& recorded) { return known && recorded != known; };
  if (differs(id.supervisor, parsed->supervisor) || differs(id.pid, parsed->pid) ||
      differs(id.started, parsed->started))
    return RecordCheck::kForged;
  info = std::move(*parsed);
  return RecordCheck::kGenuine;
}

}  // namespace tune::exec
