// Crash-safe replacement of a whole file.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace tune::util {

// Writes a file so that a crash at any instant leaves either the old or the new content:
// temp file beside the target (mkstemp), write, fsync, close (checked), rename over the target,
// fsync the directory. The destructor removes a temp file that was never committed.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Opens the temp file. Fails if the directory is missing or not writable.
  [[nodiscard]] Result<void> open();
  // Appends bytes to the temp file; a short write (disk full) is an error.
  [[nodiscard]] Result<void> write(std::string_view data);
  // fsync (when `durable`), close, rename over the target, fsync the directory (when `durable`).
  // On failure the target is untouched and the temp file is removed.
  [[nodiscard]] Result<void> commit(bool durable = true);

 private:
  void discard();
  std::filesystem::path target_;
  std::string temp_;
  int fd_ = -1;
};

// One-call helper: atomically replace `target` with `content`.
[[nodiscard]] Result<void> write_file_atomic(const std::filesystem::path& target,
                                             std::string_view content, bool durable = true);

}  // namespace tune::util
