// upload_dir: the experiment dir mirrored to s3:// (aws s3 sync), gs:// (gsutil
// rsync), file:// (rsync) or a custom "CMD {source} {target}" template, as <upload_dir>/<name>.
//
// A mirror runs in two steps: the tree without experiment_state.json (--delete, so pruned
// checkpoints vanish from the mirror too), then a snapshot of the state taken before the first
// step. The mirrored state therefore never names a trial file the mirror lacks because of
// ordering. Helper processes run in the background; the driver's loop only polls them.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "spec/experiment.hpp"
#include "util/error.hpp"

namespace tune::sync {

namespace fs = std::filesystem;

// What belongs to the experiment dir where it is and never travels with it: pending
// `tune stop --trial` requests (for this copy's driver) and the callbacks' output. Not mirrored,
// not downloaded, not copied by --restore-from.
inline constexpr const char* kLocalOnlyDirs[] = {".tune/stop_requests", ".tune/callbacks"};
// True for those dirs and anything inside them (`rel`: relative to the experiment dir).
[[nodiscard]] bool is_local_only(const fs::path& rel);
// Removes them from a downloaded copy (a custom upload_syncer, or an older mirror, holds them).
void drop_local_only(const fs::path& exp_dir);

class Uploader {
 public:
  Uploader(fs::path exp_dir, const std::string& name, const spec::SyncConfig& cfg);
  ~Uploader();
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  // The state was written: mirror if `sync_period` passed since the last mirror started, or
  // at once if `now`. A request while a mirror runs is coalesced into one more after it.
  void request(bool now);
  // Reaps a finished step and starts the next; never blocks. True while a mirror runs or waits.
  bool poll();
  [[nodiscard]] bool busy() const { return pid_ > 0 || queued_; }
  // Mirrors that failed (or were killed at sync_timeout) since the last one that succeeded.
  [[nodiscard]] int failures() const { return failures_; }
  // Kills a running mirror (Ctrl-C twice).
  void cancel();
  // Where it mirrors to, for messages.
  [[nodiscard]] const std::string& target() const { return remote_; }

  // Refuses a file:// mirror that is the experiment dir, lies inside it, or contains it (a
  // mirror with --delete would then delete the experiment or recurse into itself).
  [[nodiscard]] static Result<void> check(const fs::path& exp_dir, const std::string& name,
                                          const spec::SyncConfig& cfg);
  // --resume=auto with no local state: does the mirror hold one? (nullopt for a custom
  // template, which cannot be asked).
  [[nodiscard]] static Result<std::optional<bool>> remote_has_state(const fs::path& exp_dir,
                                                                    const std::string& name,
                                                                    const spec::SyncConfig& cfg);
  // Copies the mirror into exp_dir (blocking).
  [[nodiscard]] static Result<void> download(const fs::path& exp_dir, const std::string& name,
                                             const spec::SyncConfig& cfg);

 private:
  bool start_step();

  fs::path exp_dir_;
  std::string remote_;  // <upload_dir>/<name>
  spec::SyncConfig cfg_;
  pid_t pid_ = -1;
  int step_ = 0;  // 1: tree, 2: state snapshot
  bool queued_ = false;
  double last_start_ = -1e18;
  double started_ = 0;
  int failures_ = 0;
};

}  // namespace tune::sync
