// Base64 (RFC 4648, standard alphabet, '=' padding): binary data inside text, e.g. the report's
// series in its HTML page, or a trial's output in an SSH host agent's event.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tune::util {

// Appends the base64 form of `bytes` to `out` (4 characters per 3 bytes, padded). Never fails.
void base64_encode(std::string_view bytes, std::string& out);
// The bytes `text` encodes; nullopt if it is not base64 (its length a multiple of 4, only the
// alphabet, '=' only as the padding at the end; unused bits before the padding are ignored).
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

}  // namespace tune::util
