// The file operations the driver needs on a worker host's trial dirs, run there (by tune-agent
// when the driver asks it, or by `tune-supervisor --adopt/--rm` in the host's shell): libc
// only, like the rest of what is copied to hosts. Each returns "" when done, else one line
// saying why not.
#pragma once

#include <string>

namespace tune::agent {

// Moves the checkpoint dir a trial reported (`reported`, relative to `dir` unless absolute)
// into `dir`/`dest`, replacing what is there. It must be a real directory (not a symlink) that
// resolves into the trial dir or the temp dir ($TMPDIR, else /tmp). Across filesystems it is
// copied under DEST.partial (files fsynced, holes and symlinks kept), renamed when complete,
// then renamed to REPORTED.tune-moved and removed there; such a copy stops after 30 minutes.
// While it copies (in a child that dies with this process), a newline goes to stdout every 2 s
// (the driver's read of a shell, or the agent, takes a silence as a process stopped or stuck).
std::string adopt_dir(const std::string& dir, std::string reported, const std::string& dest);

// Whether an earlier adopt_dir of the same request has done it: `dir`/`dest` is a directory and
// `reported` no longer exists (a driver that died during it, or a request said again).
bool adopted_already(const std::string& dir, std::string reported, const std::string& dest);

// Deletes `dir`/`name` (a plain name), never following a symlink; "" if it is not there. A
// directory is deleted in a child, with the newlines of adopt_dir's copy.
std::string remove_entry(const std::string& dir, const std::string& name);

}  // namespace tune::agent
