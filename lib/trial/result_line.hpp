// One line of a trial's stdout, as the driver reads it: untrusted bytes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace tune::trial {

// What is worth saying about a line that began like a JSON object.
enum class LineIssue {
  kNone,       // parsed, or not meant as a result (print debugging): nothing to say
  kNonFinite,  // parsed, and holds NaN, Infinity or -Infinity (a diverged metric)
  kNotUtf8,    // began like a JSON object but is not valid UTF-8: not taken
  kMalformed,  // began like a JSON object but is not one: not taken
  kTooDeep,    // a JSON object nested deeper than kMaxResultDepth: not taken
  kTooLarge,   // a JSON object with a number beyond a double's range (1e999): not taken
};

// Deepest nesting a result line may have.
inline constexpr size_t kMaxResultDepth = 256;

// The JSON object a stdout line holds, or nullopt. Only a line whose first non-blank byte is
// '{' is meant as a result; anything else is ignored without an issue. Bare NaN, Infinity and
// -Infinity (what Python's json.dumps writes) are numbers. Never throws.
[[nodiscard]] std::optional<nlohmann::json> parse_result_line(std::string_view line,
                                                              LineIssue* issue = nullptr);

// Flattens nested objects the way Ray Tune does: {"val": {"acc": 0.9}} becomes
// {"val/acc": 0.9}, at any depth, so a nested metric can be ranked, compared with `stop` and
// named as `metric`. A key already present at the top level wins over a flattened one.
void flatten_result(nlohmann::json& result);

// Keeps a trial's warnings about its result lines few: the first line with a non-finite number,
// and the first kMaxBadLines lines not taken, then one note that further ones go unsaid.
class LineIssueLog {
 public:
  static constexpr int kMaxBadLines = 5;
  // The warning to log for `issue` on line `line_no` of the attempt's output, if any.
  [[nodiscard]] std::optional<std::string> note(LineIssue issue, uint64_t line_no);

 private:
  bool non_finite_said_ = false;
  int bad_lines_ = 0;
};

}  // namespace tune::trial
