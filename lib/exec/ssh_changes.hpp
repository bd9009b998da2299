// What changed in a trial dir on an SSH host since its last sync, asked in one command of the
// host's kept shell (or, for an ended attempt the host's agent started, sent by the agent with
// its exit: agent/dir_changes.hpp, the same answer). An ended attempt's last sync takes a few
// small changed files from that answer and writes them on the head itself, in place of an
// rsync, which costs several round trips more (on a distant host a short trial spent most of
// its time in it).
#pragma once

#include <time.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "agent/dir_changes.hpp"
#include "util/error.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

// What a sync never copies, and the limits of an answer (agent/dir_changes.hpp).
using agent::kMaxInlineBytes;
using agent::kMaxInlineFiles;
using agent::kMaxListed;
using agent::kSyncExcludes;

// An entry of the trial dir, as the host listed it.
struct ListedFile {
  std::string path;     // relative to the trial dir
  bool dir = false;     // a dir, else a regular file
  bool changed = true;  // since the last sync's mark (then `data` holds a file's bytes)
  uint64_t size = 0;
  timespec mtime{};
  unsigned mode = 0644;
  std::string data;
};

struct Changes {
  enum class Kind {
    kUnchanged,  // the trial dir holds nothing a sync copies
    kRsync,      // an rsync is wanted (anything but a few small files, or an answer not understood)
    kFiles,      // the trial dir holds these files and dirs, and nothing else: `files`
  } kind = Kind::kRsync;
  std::vector<ListedFile> files;
};

// The command (for SshHost::shell_run) that looks for changes in `dir` since the last sync and
// marks this one. Without `inline_files`, it says only whether anything changed. With it (an
// ended attempt's trial dir, which nothing writes into any more, on a host with GNU find, dd,
// base64 and timeout), it lists every entry a sync copies, and when that is only files and
// dirs, at most kMaxListed, and the changed files few and small, the answer holds those files.
[[nodiscard]] std::string changes_command(const std::string& dir, bool inline_files);

// Its answer. Anything not as expected (a path that leaves the dir or names what a sync never
// copies, data that is not the size listed, a truncated answer) asks for an rsync, which copies
// whatever is there.
[[nodiscard]] Changes parse_changes(std::string_view answer);

// Brings the head's trial dir `head_dir` to what the host listed: fails, writing nothing, if
// an entry listed as unchanged is not there as listed (a file made with an old mtime, or one an
// earlier sync missed: an rsync must compare them all); else writes each changed file through
// a temporary name and a rename, with its mtime (dirs: made where missing, their mtimes set
// last). Never through a link, never outside `head_dir`. A file that is there keeps its mode
// (as rsync keeps it); a new one gets the host's permission bits, less the umask.
[[nodiscard]] Result<void> write_changed_files(const fs::path& head_dir,
                                               const std::vector<ListedFile>& files);

}  // namespace tune::exec
