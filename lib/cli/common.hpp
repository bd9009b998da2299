// Pieces shared by the subcommands: finding experiments, the lock, logging setup.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "state/state.hpp"

namespace tune::ui {
class LiveTable;
}

namespace tune::cli {

namespace fs = std::filesystem;

// EXPERIMENT argument: a directory path holding experiment_state.json, or a name under the
// storage path; empty = the most recently updated experiment there.
[[nodiscard]] fs::path resolve_experiment(const std::string& arg,
                                          const std::optional<std::string>& storage);

// Loads an experiment's state or throws Fatal naming the problem.
[[nodiscard]] state::ExperimentState load_state_or_throw(const fs::path& dir);

// One driver per experiment: an flock on DIR/.tune/lock holding "pid host". Throws Fatal
// naming the holder when another driver has it. Released when the process exits.
void acquire_lock(const fs::path& exp_dir);

// Logging: DIR/tune.log gets info (debug with verbose); stderr gets warnings (info with
// verbose, errors only with quiet), printed above the live table.
void setup_logging(const fs::path& exp_dir, bool quiet, bool verbose, ui::LiveTable* table,
                   bool color);

// Where the Python helper module lives ($TUNE_HELPERS_DIR, the install, or the source tree).
[[nodiscard]] std::string python_helpers_dir();

}  // namespace tune::cli
