// `tune export`: the experiment as one table, from its dir alone. Rows are either one per trial
// (status, best checkpoint, flattened config as config/<key>, the last result as last/<key> and
// the result where the experiment's metric was best as best/<key>) or, with all_results, one
// per result row of every trial (trial_id, trial_name, config/<key>, then the row's keys).
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tune::report {

enum class ExportFormat { kCsv, kJson, kJsonl };

// One CSV field (RFC 4180): null is empty, strings as they are, numbers in their shortest
// round-trip form, anything else as JSON text; quoted (with doubled quotes) when it holds a
// comma, a quote, a line break or leading/trailing spaces.
[[nodiscard]] std::string csv_field(const nlohmann::json& v);

// The header of a CSV table: `first` in that order (those present in `keys`), then the other
// keys grouped by prefix in the order of `groups` ("config/", "last/", ...), sorted within.
[[nodiscard]] std::vector<std::string> column_order(const std::vector<std::string>& keys,
                                                    const std::vector<std::string>& first,
                                                    const std::vector<std::string>& groups);

// `progress(done, total)`: trials read so far (with all_results in CSV each trial is read twice,
// and counted so).
using Progress = std::function<void(size_t done, size_t total)>;

// Lines of result.json files that were not result rows (torn, truncated, not JSON): left out
// of the export, and counted so that the caller can say so.
struct Skipped {
  size_t lines = 0, files = 0;
  std::filesystem::path first;  // the first file that had one
  void add(size_t bad, const std::filesystem::path& file) {
    if (bad == 0) return;
    if (files++ == 0) first = file;
    lines += bad;
  }
};

// Writes the experiment in `exp_dir` to `out`. Errors: the state cannot be read.
[[nodiscard]] Result<void> export_experiment(const std::filesystem::path& exp_dir,
                                             ExportFormat format, bool all_results,
                                             std::ostream& out, const Progress& progress = {},
                                             Skipped* skipped = nullptr);

}  // namespace tune::report
