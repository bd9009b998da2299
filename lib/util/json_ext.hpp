// JSON with the non-finite numbers Python's json module writes: NaN, Infinity, -Infinity.
//
// Trials report a diverged loss as `{"loss": NaN}` (json.dumps does this by default), and Ray
// keeps it so in result.json. nlohmann's parser rejects these tokens and its serializer writes
// them as null; this pair reads and writes them as numbers, and is what every file holding
// results (result.json, experiment_state.json, the journal) goes through.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tune::util {

// Deepest nesting parse_json_ext() accepts by default (deeper documents are rejected, so
// nothing recursive over a parsed value can run out of stack).
inline constexpr size_t kMaxJsonDepth = 4096;

// Parses one JSON text; bare NaN, Infinity and -Infinity outside strings are numbers (a string
// "NaN" stays a string). Returns a discarded value (is_discarded()) for invalid JSON, invalid
// UTF-8 or nesting deeper than `max_depth`. Never throws.
[[nodiscard]] nlohmann::json parse_json_ext(std::string_view text,
                                            size_t max_depth = kMaxJsonDepth) noexcept;

// Same, calling `progress(bytes parsed, total bytes)` every MiB or so (a big state file takes
// seconds: a progress bar). `progress` must not throw.
[[nodiscard]] nlohmann::json parse_json_ext(
    std::string_view text, size_t max_depth,
    const std::function<void(size_t, size_t)>& progress) noexcept;

// Appends the compact form of `j` (as j.dump() writes it, invalid UTF-8 replaced by U+FFFD),
// with non-finite floats written as NaN, Infinity and -Infinity instead of null.
void dump_json_ext(const nlohmann::json& j, std::string& out);

// Same, returned.
[[nodiscard]] std::string dump_json_ext(const nlohmann::json& j);

// What a scan of JSON-like text outside its strings finds, to say why it did not parse: its
// deepest nesting of objects and arrays, and whether a number there is beyond a double's range
// (1e999). Malformed text is scanned as far as it goes.
struct JsonShape {
  size_t depth = 0;
  bool overflow = false;
};
[[nodiscard]] JsonShape json_shape(std::string_view text);

// Whether `j` holds a NaN or infinite float anywhere.
[[nodiscard]] bool has_non_finite(const nlohmann::json& j);

}  // namespace tune::util
