// `tune stop --trial ID`: one request file per trial in <experiment>/.tune/stop_requests/. The
// running driver looks for them once a second; a resumed driver reads them before it runs
// anything. The driver removes a request once it has acted on it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tune::control {

namespace fs = std::filesystem;

// Asks for trial `trial_id` (its id, as the state names it) to be stopped.
[[nodiscard]] Result<void> write_stop_request(const fs::path& exp_dir, const std::string& trial_id);
// The trial ids asked for (names that are no trial id are skipped); empty when there are none.
[[nodiscard]] std::vector<std::string> stop_requests(const fs::path& exp_dir);
[[nodiscard]] bool stop_requested(const fs::path& exp_dir, const std::string& trial_id);
void remove_stop_request(const fs::path& exp_dir, const std::string& trial_id);

}  // namespace tune::control
