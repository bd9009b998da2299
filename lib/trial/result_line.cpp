#include "trial/result_line.hpp"

namespace tune::trial {

std::optional<nlohmann::json> parse_result_line(std::string_view line, LineIssue* issue) {
  if (issue) *issue = LineIssue::kNone;
  size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos || line[first] != '{') return std::nullopt;
  nlohmann::json obj = nlohmann::json::parse(line, nullptr, false);
  if (obj.is_discarded() || !obj.is_object()) {
    if (issue) *issue = LineIssue::kMalformed;
    return std::nullopt;
  }
  return obj;
}

}  // namespace tune::trial
