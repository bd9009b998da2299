// What changed in a trial dir since its last sync, looked at on the host that holds it: by
// tune-agent when an attempt it started has ended, so that the answer travels with the exit
// event and the head's last sync of the attempt needs no round trip to ask
// (exec/ssh_changes.hpp reads it, and makes the same answer with a shell command where no
// agent sent one). Linked into tune-agent and the driver's library; libc and base64 only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tune::agent {

// What a sync never copies from a trial dir (rsync's --exclude patterns, each matching a name at
// any depth): checkpoints go their own way; the rest is the head's, or not a file to copy.
inline constexpr const char* kSyncExcludes[] = {
    "checkpoint_*", ".staged_checkpoint_*", ".pending_checkpoint_*",
    "stdin.fifo",   "stdin.sent",           ".tune_sync_mark",
    "*.tmp",        "result.json",          "progress.csv"};

// Up to this many entries are listed, and up to this many changed files of at most this many
// bytes in all come in the answer.
inline constexpr size_t kMaxListed = 1024;
inline constexpr size_t kMaxInlineFiles = 64;
inline constexpr uint64_t kMaxInlineBytes = 512 << 10;
// An answer longer than this (long paths) says "rsync" instead: it goes in one event line.
inline constexpr size_t kMaxAnswer = 900 << 10;

// Looks at `dir` as exec::changes_command(dir, true) does, in this process, and gives the same
// answer: "unchanged" (nothing a sync copies), "rsync" (anything but a few small regular files
// and dirs, or something that could not be read), or "files", the base64 listing of every
// entry ("n" changed since the last sync's mark, else "o"; type, size, mtime, mode, path) and
// each changed file's bytes. Marks this sync first (dir/.tune_sync_mark), as the command does.
// Never follows a link, never opens anything but a regular file or a dir, never waits on a
// FIFO. "" if `dir` cannot be opened (the command says nothing then either).
[[nodiscard]] std::string dir_changes(const std::string& dir);

}  // namespace tune::agent
