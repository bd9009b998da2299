// Taking ownership of a checkpoint directory a trial reported (SPEC §3, function mode).
#pragma once

#include <filesystem>
#include <string>

#include "util/error.hpp"

namespace tune::checkpoint {

namespace fs = std::filesystem;

// The system temp dir ($TMPDIR, else /tmp).
[[nodiscard]] fs::path temp_dir();

// Moves the reported directory `reported` (absolute, or relative to `cwd`) into
// `trial_dir/dest_name`. The path must name a real directory (not a symlink) that resolves
// under `trial_dir` or the temp dir, and must not be the trial dir, an ancestor of it, or an
// existing checkpoint; anything else is refused and left untouched.
[[nodiscard]] Result<void> adopt(const std::string& reported, const fs::path& cwd,
                                 const fs::path& trial_dir, const std::string& dest_name);

}  // namespace tune::checkpoint
