// Small string helpers: shell-like splitting, suggestions, number formatting.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace tune::util {

// Splits a command line into words the way a POSIX shell would split it (single quotes,
// double quotes with \" \\ \$ \` escapes, backslash outside quotes), with no expansion of any
// kind. Fails on an unterminated quote or a trailing backslash.
[[nodiscard]] Result<std::vector<std::string>> shell_split(std::string_view line);

// A "CMD {source} {target}" template as argv: split like a shell would (never run through
// one), each placeholder replaced inside its word. Values are inserted verbatim (a value that
// contains "{target}" stays as it is). Empty if the template does not split.
[[nodiscard]] std::vector<std::string> fill_template(std::string_view tmpl,
                                                     const std::string& source,
                                                     const std::string& target);

// The lines of `text`, without their newlines (a last line without one included).
[[nodiscard]] std::vector<std::string> lines_of(const std::string& text);

// `bytes` bytes from the kernel's random source, as 2 * `bytes` lowercase hex digits (keys,
// markers nobody can guess).
[[nodiscard]] Result<std::string> random_hex(size_t bytes);

// Quotes one word for a POSIX shell (single quotes), e.g. for log lines and remote commands.
[[nodiscard]] std::string shell_quote(std::string_view word);

// Levenshtein distance between two short strings.
[[nodiscard]] size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` if it is close enough to be a likely typo, else nullopt.
[[nodiscard]] std::optional<std::string> suggest(std::string_view word,
                                                 std::span<const std::string_view> candidates);

// Shortest decimal form of a double that reads back to the same value ("0.001", "1e-05", "3").
[[nodiscard]] std::string format_double(double v);

// A compact form for names and tables: up to `digits` significant digits ("0.0012", "2.5e-05").
[[nodiscard]] std::string format_short(double v, int digits = 4);

// The offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or npos if `s` is valid UTF-8.
[[nodiscard]] size_t invalid_utf8_at(std::string_view s);

// Replaces control characters so untrusted text can go on one log line; cuts at `max` bytes.
[[nodiscard]] std::string printable(std::string_view s, size_t max = 200);

}  // namespace tune::util
