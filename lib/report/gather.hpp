// What the report shows, read from an experiment dir alone: experiment_state.json (through the
// state loader), each trial's result.json and pbt_policy.jsonl. Nothing here needs the driver
// or the spec file, so it works on a copied or mirrored dir and while a driver runs.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "report/series.hpp"
#include "trial/trial.hpp"
#include "util/error.hpp"

namespace tune::report {

namespace fs = std::filesystem;

// Flattens a config: nested objects become "a/b" keys; scalars are kept, arrays and anything
// else become their JSON text.
[[nodiscard]] nlohmann::json flatten_config(const nlohmann::json& config);

// The trial's best retained checkpoint by `metric` (the latest if none holds it; null if none).
[[nodiscard]] const trial::Checkpoint* best_checkpoint(const trial::Trial& t,
                                                       const std::optional<std::string>& metric,
                                                       bool maximize);

// Calls `fn` with each result row (a JSON object) of `trial_dir/result.json`, in file order;
// torn or foreign lines are skipped. Returns how many lines were skipped.
size_t each_result(const fs::path& trial_dir, const std::function<void(nlohmann::json&&)>& fn);

// The whole report's data, as the page's script reads it. `meta`:
// {name, dir, phase, elapsed_s, start_time, metric, mode, time_attr, total_trials, counts,
//  params, metrics, best: {trial, value, checkpoint} | null, trials: [{id, name, status, reason,
//  host, iter, error, time_total_s, config, last, best, ckpts, ckpt_path, marks: [[at, kind,
//  text]], and the curves' places in `series` (see append_columns: n, x0 or xo, y)}]}.
// `series`: the curves' binary columns. The driver's time_this_iter_s and time_total_s are not
// curves (they are in the table and the export).
struct ReportData {
  nlohmann::json meta;
  std::string series;
};

// Errors: the state cannot be read (named with its file).
// `progress(done, total)` is called after each trial is read.
[[nodiscard]] Result<ReportData> gather(const fs::path& exp_dir,
                                        const std::function<void(size_t, size_t)>& progress = {});

}  // namespace tune::report
