#include "trial/result_line.hpp"

#include "util/json_ext.hpp"
#include "util/strings.hpp"

namespace tune::trial {

namespace {
// Why a line that began like an object was not taken (the failing path only: it scans again).
LineIssue why_not(std::string_view line) {
  if (util::invalid_utf8_at(line) != std::string_view::npos) return LineIssue::kNotUtf8;
  auto shape = util::json_shape(line);
  if (shape.depth > kMaxResultDepth) return LineIssue::kTooDeep;
  if (shape.overflow) return LineIssue::kTooLarge;
  return LineIssue::kMalformed;
}
}  // namespace

std::optional<nlohmann::json> parse_result_line(std::string_view line, LineIssue* issue) {
  if (issue) *issue = LineIssue::kNone;
  size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos || line[first] != '{') return std::nullopt;
  nlohmann::json obj = util::parse_json_ext(line, kMaxResultDepth);
  if (obj.is_discarded() || !obj.is_object()) {
    // (a parsed value is valid UTF-8: nlohmann checks every string, and JSON outside strings
    // is ASCII)
    if (issue) *issue = why_not(line);
    return std::nullopt;
  }
  if (issue && util::has_non_finite(obj)) *issue = LineIssue::kNonFinite;
  return obj;
}

std::optional<std::string> LineIssueLog::note(LineIssue issue, uint64_t line_no) {
  std::string where = "output line " + std::to_string(line_no) + " of this attempt";
  switch (issue) {
    case LineIssue::kNone:
      return std::nullopt;
    case LineIssue::kNonFinite:
      if (non_finite_said_) return std::nullopt;
      non_finite_said_ = true;
      return "result on " + where +
             " holds NaN or Infinity: recorded, and such a value ranks last (said once per trial)";
    case LineIssue::kNotUtf8:
    case LineIssue::kMalformed:
    case LineIssue::kTooDeep:
    case LineIssue::kTooLarge:
      break;
  }
  if (++bad_lines_ > kMaxBadLines) return std::nullopt;
  std::string msg = where + " starts like a result but ";
  switch (issue) {
    case LineIssue::kNotUtf8:
      msg += "is not valid UTF-8";
      break;
    case LineIssue::kTooDeep:
      msg += "nests deeper than " + std::to_string(kMaxResultDepth) + " levels";
      break;
    case LineIssue::kTooLarge:
      msg += "holds a number beyond a double's range (such as 1e999)";
      break;
    default:
      msg += "is not a JSON object";
      break;
  }
  msg += ": ignored";
  if (bad_lines_ == kMaxBadLines) msg += " (further such lines of this trial are not logged)";
  return msg;
}

namespace {
void flatten_into(const nlohmann::json& obj, const std::string& prefix, nlohmann::json& out) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    std::string key = prefix + "/" + it.key();
    if (it->is_object() && !it->empty())
      flatten_into(*it, key, out);
    else if (!out.contains(key))
      out[key] = *it;
  }
}
}  // namespace

void flatten_result(nlohmann::json& result) {
  if (!result.is_object()) return;
  std::vector<std::string> nested;
  for (auto it = result.begin(); it != result.end(); ++it)
    if (it->is_object() && !it->empty()) nested.push_back(it.key());
  for (const auto& key : nested) {
    nlohmann::json inner = std::move(result[key]);
    result.erase(key);
    flatten_into(inner, key, result);
  }
}

}  // namespace tune::trial
