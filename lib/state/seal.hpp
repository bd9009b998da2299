// Line seals: each line of experiment_state.json and of the journal carries a checksum of its
// own bytes, so a damaged line (a flipped byte that still parses, e.g. a changed trial id) is
// found and named by its byte offset instead of being believed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tune::state {

// The seal's key, written as the object's last member: {..., "crc": "<16 hex digits>"}.
inline constexpr std::string_view kSealKey = ",\"crc\":\"";

// FNV-1a (64-bit) of `bytes`: any change of one byte changes it.
[[nodiscard]] uint64_t fnv1a64(std::string_view bytes);

// `object` (a JSON object's text, ending with '}') with its seal added as the last member.
[[nodiscard]] std::string seal_object(std::string_view object);

// The header of a sealed state file: `object` without its closing brace, its seal, and what
// follows it in the file (`tail`, e.g. ",\"trials\":[").
[[nodiscard]] std::string seal_header(std::string_view object, std::string_view tail);

enum class SealCheck {
  kUnsealed,  // no seal (written by an older tune, or by hand)
  kValid,     // the seal matches the bytes
  kBroken,    // a seal that does not match, or is malformed
};

// Checks a sealed object line (`{..., "crc": "..."}`, as seal_object writes it).
[[nodiscard]] SealCheck check_object(std::string_view line);

// Checks a sealed header line (as seal_header writes it, `tail` included).
[[nodiscard]] SealCheck check_header(std::string_view line, std::string_view tail);

}  // namespace tune::state
