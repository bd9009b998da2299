// Base64 (RFC 4648, standard alphabet, '=' padding): binary data inside text, e.g. the report's
// series in its HTML page.
#pragma once

#include <string>
#include <string_view>

namespace tune::util {

// Appends the base64 form of `bytes` to `out` (4 characters per 3 bytes, padded). Never fails.
void base64_encode(std::string_view bytes, std::string& out);

}  // namespace tune::util
