// A trial's learning curves read from its result.json, and their binary form in the report:
// little-endian columns (x as float64 when it is not a run 1..n, each metric as float32) that
// the page decodes into typed arrays. Decimal JSON of a million points took the browser seconds
// to parse; base64 of float32 is ~5.3 bytes a point and decodes at memory speed. The curves are
// for drawing: every number the page shows as a number (table, best trial) comes from the
// state's exact values, never from these columns.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tune::report {

// Result keys that are the driver's bookkeeping, not curves worth plotting.
[[nodiscard]] bool is_bookkeeping_key(const std::string& key);

// One trial's curves: training_iteration of each result row (x) and, per numeric top-level
// result key, its value in each row (NaN where the row lacks it or it is not finite).
struct Series {
  std::vector<double> x;
  bool x_integer = true;  // every x was written as an integer
  std::map<std::string, std::vector<double>, std::less<>> y;
  size_t rows = 0, bad_lines = 0;
};

// Reads `trial_dir/result.json` line by line (a torn or foreign line, or one without a numeric
// training_iteration, is skipped and counted); at most `max_keys` distinct metric keys are kept
// (the first ones met, in each row's key order). A missing file is an empty series.
[[nodiscard]] Series read_series(const std::filesystem::path& trial_dir, size_t max_keys = 64);

// Appends `s`'s columns to `blob` and returns where they are, as the page reads them:
// {"n": rows, "x0": first x} when x is x0, x0+1, ..., x0+n-1, else {"n", "xo": byte offset of
// n float64}; "y": {metric: byte offset of n float32} (NaN: a gap; values beyond float's range
// are clamped to it). Offsets are aligned to their element size.
[[nodiscard]] nlohmann::json append_columns(const Series& s, std::string& blob);

}  // namespace tune::report
