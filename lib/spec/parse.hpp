// Reading an experiment YAML into a validated Experiment.
#pragma once

#include <string>
#include <vector>

#include "spec/experiment.hpp"
#include "util/error.hpp"

namespace tune::spec {

// Command-line adjustments applied on top of the file, before validation.
struct Overrides {
  std::vector<std::string> set;             // "dotted.key=value" (value parsed as YAML)
  std::optional<std::string> name;          // --name
  std::optional<std::string> storage_path;  // --storage-path (beats the file and TUNE_STORAGE_PATH)
  std::optional<int> max_concurrent;        // --max-concurrent
};

// Parses and validates `path`. Every problem is reported as
// `FILE:LINE:COL: message` (or `--set KEY: message` for a command-line value); nothing is
// started before this succeeds.
[[nodiscard]] Result<Experiment> load_experiment(const fs::path& path, const Overrides& ov = {});

// Same, from YAML text (`path` is only used for messages and to resolve relative paths).
[[nodiscard]] Result<Experiment> parse_experiment(const std::string& yaml_text,
                                                  const fs::path& path, const Overrides& ov = {});

// Compares the spec an experiment was started with (`before`, Experiment::effective) with the
// one it is resumed with. Only stop rules, the time budget, concurrency, checkpoint retention,
// sync settings and timeouts may change; returns the first other differing key (dotted), or
// nullopt when the change is allowed.
[[nodiscard]] std::optional<std::string> forbidden_change(const nlohmann::json& before,
                                                          const nlohmann::json& after);
// The keys forbidden_change() lets differ, for messages.
[[nodiscard]] std::vector<std::string> changed_keys(const nlohmann::json& before,
                                                    const nlohmann::json& after);

// The default storage path: $TUNE_STORAGE_PATH, else ~/tune_results.
[[nodiscard]] fs::path default_storage_path();

}  // namespace tune::spec
