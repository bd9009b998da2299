// What `trial.sync_workdir` copies to each SSH host: the trial's workdir, less `.git`, the
// experiment's storage path and the SSH hosts' (when they lie inside), and files over 100 MiB,
// which are named so the log can say what was left out. The stamp (paths, sizes, mtimes) tells a
// resume whether the copy on a host is still current.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tune::sync {

namespace fs = std::filesystem;

struct WorkdirPlan {
  fs::path workdir;
  std::vector<std::string> excludes;  // rsync --exclude patterns, anchored at the workdir
  std::vector<std::string> left_out;  // for the log: ".git", "data/big.bin (1.2 GB)", ...
  std::string stamp;                  // changes when any copied file changes
  uint64_t files = 0, bytes = 0;      // what is copied
};

inline constexpr uint64_t kMaxWorkdirFile = 100ull << 20;
// More than this to copy is taken for a mistake (a workdir that is a home directory, say).
inline constexpr uint64_t kMaxWorkdirFiles = 100'000;
inline constexpr uint64_t kMaxWorkdirBytes = 1ull << 30;
// More than this is copied, with a warning that names the size (data beside the code, say).
inline constexpr uint64_t kWarnWorkdirBytes = 100ull << 20;

// An SSH host's storage path as configured (a path on that host; relative ones are skipped).
struct HostStorage {
  std::string host;
  fs::path storage_path;
};

// Walks `workdir` (symlinks are copied as links, never followed); `storage` is the head's
// storage path, `hosts` the SSH hosts' (left out too where they lie inside the workdir; where
// one is the workdir itself, its dir of `experiment` is). An error if it cannot be read or
// holds more than the limits above.
[[nodiscard]] Result<WorkdirPlan> plan_workdir(const fs::path& workdir, const fs::path& storage,
                                               const std::vector<HostStorage>& hosts = {},
                                               const std::string& experiment = "");

}  // namespace tune::sync
