// Filesystem helpers that are careful with untrusted paths: no symlink following on delete,
// containment checks after resolving links, bounded reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace tune::util {

namespace fs = std::filesystem;

// Reads a whole file; fails if it is larger than `max_bytes` or unreadable.
[[nodiscard]] Result<std::string> read_file(const fs::path& path,
                                            uint64_t max_bytes = 256ull << 20);

// True if `path` (through symlinks) is a regular file. Readers of files in an experiment dir
// check this first: opening a FIFO planted there blocks forever, a device never ends.
[[nodiscard]] bool is_regular_file_at(const fs::path& path) noexcept;

// Expands a leading `~` or `~/` to $HOME.
[[nodiscard]] fs::path expand_user(std::string_view path);

// Makes a string safe as one path component: keeps [A-Za-z0-9._=,+-], maps the rest to '_',
// never returns "", "." or "..", and cuts to at most `max_bytes` bytes.
[[nodiscard]] std::string safe_component(std::string_view s, size_t max_bytes = 200);

// True if `path` (resolved through symlinks) equals `root` or lies below it (root resolved too).
[[nodiscard]] bool resolves_under(const fs::path& path, const fs::path& root);

// Removes `name` inside directory `dir` recursively without ever following a symlink: a symlink
// is unlinked, never its target. Refuses names containing '/' or equal to "." / "..".
[[nodiscard]] Result<void> remove_tree_nofollow(const fs::path& dir, std::string_view name);

// Moves directory `src` to `dst` (which must not exist): rename(2) on one filesystem, otherwise
// a copy that keeps symlinks as symlinks, fsyncs the files, then removes `src`.
[[nodiscard]] Result<void> move_dir(const fs::path& src, const fs::path& dst);

// Copies directory `src` to `dst` (which must not exist), keeping symlinks as symlinks (never
// following one) and fsyncing each file; gives up when `cancel` turns true. On failure nothing
// is left at `dst`.
[[nodiscard]] Result<void> copy_dir(const fs::path& src, const fs::path& dst,
                                    const std::atomic<bool>& cancel);

// Size of a file, or 0 if it does not exist.
[[nodiscard]] uint64_t file_size_or_zero(const fs::path& path);

// The machine's host name.
[[nodiscard]] std::string host_name();

}  // namespace tune::util
