// Pieces shared by the subcommands: finding experiments, the lock, logging setup.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

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

// DIR/.tune/<this>: the experiment file and --set values of the last `tune run` (JSON).
inline constexpr const char* kStartedAsFile = "started_as.json";

// The command that resumes the experiment in `exp_dir`: `tune run FILE --resume=auto`, with
// the --set values it was started with, and --name/--storage-path when FILE alone would not
// lead back to `exp_dir`.
[[nodiscard]] std::string resume_command(const fs::path& exp_dir);

// The driver of an experiment as `tune status` sees it: alive when it holds DIR/.tune/lock.
struct DriverInfo {
  bool alive = false;
  std::string pid, host;  // the lock's last holder, as it recorded itself ("?" if unknown)
};
[[nodiscard]] DriverInfo probe_driver(const fs::path& exp_dir);

// The EXPERIMENT argument and --storage-path, shared by the read-only commands.
void add_experiment_options(CLI::App& app, std::string& experiment,
                            std::optional<std::string>& storage);

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
