// Taking ownership of a checkpoint directory a trial reported (function mode, and step-mode
// saves). What a trial reports is untrusted: the driver moves only what lies inside the trial's
// own dir, copies what lies under the temp dir or the trial's workdir (leaving it where it
// was), and refuses anything else. It never follows a symlink out of those roots.
#pragma once

#include <atomic>
#include <filesystem>
#include <string>

#include "util/error.hpp"

namespace tune::checkpoint {

namespace fs = std::filesystem;

// The system temp dir ($TMPDIR, else /tmp).
[[nodiscard]] fs::path temp_dir();

// Where a reported checkpoint lives, and so how it is taken over.
struct Source {
  enum class How {
    kMove,  // inside the trial's own dir (or its staging dir): renamed into place
    kCopy,  // under the temp dir or the trial's workdir: copied, the original left alone
  };
  How how = How::kMove;
  fs::path path;  // resolved, absolute
};

// The directories a trial's checkpoint may come from.
struct Roots {
  fs::path trial_dir;       // the trial's dir on the head
  fs::path experiment_dir;  // nothing else in it is ever taken (another trial's dir)
  fs::path workdir;         // the trial's working directory
};

// Checks `reported` (absolute, or relative to the workdir): it must be a real directory (not
// a symlink) resolving inside one of the roots, not the trial dir or an ancestor of it, not a
// root itself, not an existing checkpoint of the trial, and not inside the experiment dir
// unless inside the trial's own dir. Touches nothing.
[[nodiscard]] Result<Source> locate(const std::string& reported, const Roots& roots);

// Moves a kMove source to `trial_dir/dest_name` (a leftover there is replaced).
[[nodiscard]] Result<void> move_in(const Source& src, const fs::path& trial_dir,
                                   const std::string& dest_name);

// Copies a kCopy source to `trial_dir/dest_name` through a hidden partial dir, renamed only
// when complete (a leftover there is replaced). Slow: meant for the file worker.
[[nodiscard]] Result<void> copy_in(const Source& src, const fs::path& trial_dir,
                                   const std::string& dest_name, const std::atomic<bool>& cancel);

// locate() then move_in() or copy_in(), at once (hosts where the whole thing runs remotely).
[[nodiscard]] Result<void> adopt(const std::string& reported, const fs::path& cwd,
                                 const fs::path& trial_dir, const std::string& dest_name);

// The hidden name a copy is built under before it is renamed to `dest_name`.
[[nodiscard]] std::string partial_name(const std::string& dest_name);

}  // namespace tune::checkpoint
