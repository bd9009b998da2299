// What changed in a trial dir on an SSH host since its last sync, asked in one command of the
// host's kept shell. An ended attempt's last sync takes a few small changed files from that
// answer and writes them on the head itself, in place of an rsync, which costs several round
// trips more (on a distant host a short trial spent most of its time in it).
#pragma once

#include <time.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

// What a sync never copies from a trial dir (rsync's --exclude patterns, each matching a name at
// any depth): checkpoints go their own way; the rest is the head's, or not a file to copy.
inline constexpr const char* kSyncExcludes[] = {"checkpoint_*",          ".staged_checkpoint_*",
                                                ".pending_checkpoint_*", "stdin.fifo",
                                                ".tune_sync_mark",       "*.tmp",
                                                "result.json",           "progress.csv"};

// Up to this many files of at most this many bytes in all come in the answer.
inline constexpr size_t kMaxInlineFiles = 64;
inline constexpr uint64_t kMaxInlineBytes = 512 << 10;

struct ChangedFile {
  std::string path;  // relative to the trial dir
  bool dir = false;  // a dir (made if missing), else a regular file
  timespec mtime{};
  unsigned mode = 0644;
  std::string data;
};

struct Changes {
  enum class Kind {
    kUnchanged,  // nothing changed since the last sync
    kRsync,      // an rsync is wanted (anything but a few small files, or an answer not understood)
    kFiles,      // these files and dirs changed, and nothing else: `files` holds them
  } kind = Kind::kRsync;
  std::vector<ChangedFile> files;
};

// The command (for SshHost::shell_run) that looks for changes in `dir` since the last sync and
// marks this one. `inline_files` (an ended attempt's trial dir, which nothing writes into any
// more, on a host with GNU find, dd, base64 and timeout): few small changes come in the answer.
[[nodiscard]] std::string changes_command(const std::string& dir, bool inline_files);

// Its answer. Anything not as expected (a path that leaves the dir, data that is not the size
// listed, a truncated answer) asks for an rsync, which copies whatever is there.
[[nodiscard]] Changes parse_changes(std::string_view answer);

// Writes `files` under `head_dir`, each through a temporary name and a rename, with its mtime
// (dirs: made where missing, and their mtimes set last): never through a link, never outside
// `head_dir`. A file that is there keeps its mode (as rsync keeps it); a new one gets the
// host's, less the umask.
[[nodiscard]] Result<void> write_changed_files(const fs::path& head_dir,
                                               const std::vector<ChangedFile>& files);

}  // namespace tune::exec
