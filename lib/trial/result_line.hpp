// One line of a trial's stdout, as the driver reads it: untrusted bytes (SPEC §3).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace tune::trial {

// Why a line that looked like a result was not taken.
enum class LineIssue {
  kNone,       // parsed, or not meant as a result (print debugging): nothing to say
  kNotUtf8,    // began like a JSON object but is not valid UTF-8
  kMalformed,  // began like a JSON object but is not one
};

// The JSON object a stdout line holds, or nullopt. Only a line whose first non-blank byte is
// '{' is meant as a result; anything else is ignored without an issue. Never throws.
[[nodiscard]] std::optional<nlohmann::json> parse_result_line(std::string_view line,
                                                              LineIssue* issue = nullptr);

}  // namespace tune::trial
