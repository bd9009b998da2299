// `tune run --restore-from`: an experiment copied under another name, then resumed there.
#pragma once

#include <filesystem>
#include <string>

#include "spec/experiment.hpp"

namespace tune::cli {

namespace fs = std::filesystem;

// Copies the experiment at `source` (a directory, or `s3://|gs://|file://.../NAME` an
// upload_dir mirror, downloaded with `sync`'s upload_syncer if any) into `dir` (which exists
// and holds no state). Throws Fatal when the source has no state, is `dir` itself, or is not
// quiet (its driver, or detached trials of it, still run on this machine: named). `bar`: a
// progress bar (bytes) on stderr while a directory is copied (a terminal's only).
void restore_from(const std::string& source, const fs::path& dir, const spec::SyncConfig& sync,
                  bool bar = false);

// Copies the tree `from` into `to` (created): directories, regular files and symlinks; a
// driver's lock and lease, fifos, and the experiment's local-only dirs (pending stop requests,
// the callbacks' output: sync::kLocalOnlyDirs) are left out. Throws Fatal naming what failed.
// With a `bar_label`, a progress bar of the bytes copied is drawn on stderr (call it on a
// terminal only; quick copies draw nothing).
void copy_tree(const fs::path& from, const fs::path& to, const std::string& bar_label = "");

}  // namespace tune::cli
