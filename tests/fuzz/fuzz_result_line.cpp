// Fuzz target: one stdout line of a trial -> the result it holds (trial::parse_result_line).
// Never throws; what it returns is a JSON object that can be written back out (result.json).
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_target.hpp"
#include "trial/result_line.hpp"
#include "util/json_ext.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tune;
  std::string_view line = fuzz::as_text(data, size);
  try {
    trial::LineIssue issue = trial::LineIssue::kNone;
    auto r = trial::parse_result_line(line, &issue);
    if (r) {
      if (!r->is_object()) fuzz::finding("a result that is not an object");
      // A result holding NaN/Infinity is taken (and says so); any other issue means not taken.
      if (issue != trial::LineIssue::kNone && issue != trial::LineIssue::kNonFinite)
        fuzz::finding("a result with an issue");
      (void)util::dump_json_ext(*r);  // as result.json is written
    }
  } catch (const std::exception& ex) {
    fuzz::finding(std::string("parse_result_line threw: ") + ex.what());
  }
  return 0;
}
