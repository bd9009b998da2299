// Fuzz target: an experiment YAML (and --set values) -> spec::Experiment.
// Input: the YAML text, optionally followed by a line "#--set" and one KEY=VALUE per line.
// parse_experiment reports every problem as an Error; it writes nothing. An exception escaping
// it (other than tune::Fatal), a crash, a leak or UB is a finding. What it accepts must be
// printable as JSON (the driver writes it to the experiment dir).
//   TUNE_FUZZ_SKIP_OPEN=1 skips inputs of the known open findings (YAML anchors/aliases,
//   NUL bytes, bytes that are not UTF-8: spec/crashes-open/README.md), so a long run explores
//   the rest.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_target.hpp"
#include "spec/parse.hpp"

namespace {

bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

bool skip_open() {
  static const bool skip = [] {
    const char* v = std::getenv("TUNE_FUZZ_SKIP_OPEN");
    return v && *v == '1';
  }();
  return skip;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tune;
  auto [yaml, sets] = fuzz::split_at(fuzz::as_text(data, size), "\n#--set\n");
  std::string_view all = fuzz::as_text(data, size);
  if (skip_open() && (all.find('&') != all.npos || all.find('\0') != all.npos || !valid_utf8(all)))
    return 0;
  spec::Overrides ov;
  ov.storage_path = "/nonexistent/tune-fuzz-results";
  while (!sets.empty()) {
    auto [line, rest] = fuzz::split_at(sets, "\n");
    ov.set.emplace_back(line);
    sets = rest;
  }
  try {
    auto e = spec::parse_experiment(std::string(yaml), "/nonexistent/fuzz/exp.yaml", ov);
    if (e) {
      (void)e->effective.dump();  // throws on bytes that are not UTF-8
      (void)e->name.size();
    } else if (e.error().message.empty()) {
      fuzz::finding("an error without a message");
    }
  } catch (const Fatal&) {
    // the documented error type
  } catch (const std::exception& ex) {
    fuzz::finding(std::string("exception escaped parse_experiment: ") + ex.what());
  }
  return 0;
}
