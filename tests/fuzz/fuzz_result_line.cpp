// Fuzz target: one stdout line of a trial -> the result it holds (trial::parse_result_line).
// Never throws; what it returns is a JSON object that can be written back out (result.json).
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_target.hpp"
#include "trial/result_line.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tune;
  std::string_view line = fuzz::as_text(data, size);
  try {
    trial::LineIssue issue = trial::LineIssue::kNone;
    auto r = trial::parse_result_line(line, &issue);
    if (r) {
      if (!r->is_object()) fuzz::finding("a result that is not an object");
      if (issue != trial::LineIssue::kNone) fuzz::finding("a result with an issue");
      (void)r->dump();  // result.json is written with the strict handler
    }
  } catch (const std::exception& ex) {
    fuzz::finding(std::string("parse_result_line threw: ") + ex.what());
  }
  return 0;
}
