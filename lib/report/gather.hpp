// What the report shows, read from an experiment dir alone: experiment_state.json (through the
// state loader) and each trial's result.json. Nothing here needs the driver or the spec file,
// so it works on a copied or mirrored dir and while a driver runs.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "trial/trial.hpp"
#include "util/error.hpp"

namespace tune::report {

namespace fs = std::filesystem;

// Result keys that are the driver's bookkeeping, not curves worth plotting.
[[nodiscard]] bool is_bookkeeping_key(const std::string& key);

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

// One trial's curves: training_iteration of each result row (x) and, per numeric top-level
// result key, its value in each row (null where the row lacks it or it is not finite).
struct Series {
  nlohmann::json x = nlohmann::json::array();
  nlohmann::json y = nlohmann::json::object();
  size_t rows = 0, bad_lines = 0;
};

// Reads `trial_dir/result.json` line by line (a torn or foreign line is skipped and counted);
// at most `max_keys` distinct metric keys are kept (the first ones met).
[[nodiscard]] Series read_series(const fs::path& trial_dir, size_t max_keys = 64);

// The whole report's data, as the page's script reads it:
// {name, dir, phase, elapsed_s, start_time, metric, mode, time_attr, total_trials, counts,
//  params, metrics, best: {trial, value, checkpoint} | null, trials: [{id, name, status, reason,
//  host, iter, error, time_total_s, config, last, best, ckpts, ckpt_path, y, and x or, when x
//  is x0, x0+1, ..., x0+n-1, x0 and n}]}. The driver's time_this_iter_s and time_total_s are
//  not curves (they are in the table and the export).
// Errors: the state cannot be read (named with its file).
// `progress(done, total)` is called after each trial is read.
[[nodiscard]] Result<nlohmann::json> gather(
    const fs::path& exp_dir, const std::function<void(size_t, size_t)>& progress = {});

}  // namespace tune::report
