#include "agent/nonce.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace tune::agent {

namespace {

constexpr size_t kKeyBytes = 16;

uint64_t rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

// SipHash-2-4: a keyed PRF, so a nonce reveals nothing of the key or of other nonces.
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

bool key_bytes(std::string_view hex, std::array<uint8_t, kKeyBytes>& key) {
  key = {};
  if (hex.size() != 2 * kKeyBytes) return false;
  for (size_t i = 0; i < hex.size(); ++i) {
    const char* digits = "0123456789abcdef";
    const char* at = hex[i] ? std::strchr(digits, hex[i]) : nullptr;
    if (!at) {
      key = {};
      return false;
    }
    key[i / 2] = static_cast<uint8_t>(key[i / 2] << 4 | (at - digits));
  }
  return true;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

bool valid_nonce_key(std::string_view key) {
  std::array<uint8_t, kKeyBytes> k{};
  return key_bytes(key, k);
}

std::string keyed_nonce(std::string_view key, std::string_view name, long n) {
  std::array<uint8_t, kKeyBytes> k{};
  key_bytes(key, k);
  std::string msg = std::string(name) + '\0' + std::to_string(n);
  return hex64(siphash24(k, "a" + msg)) + hex64(siphash24(k, "b" + msg));
}

std::string slurm_run_nonce(std::string_view job_key, std::string_view job_id, long restart_count) {
  return keyed_nonce(job_key, "slurm job " + std::string(job_id), restart_count);
}

}  // namespace tune::agent
