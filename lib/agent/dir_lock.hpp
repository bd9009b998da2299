// The trial dir's lock: every attempt's supervisor holds an flock on its trial dir for as long
// as it runs, so two attempts of one trial never run at once on a machine, whatever the attempt
// log says (it may have been cut short or replaced while no driver ran), and a resuming driver
// can find a supervisor the log no longer names. Libc only: linked into tune-supervisor too.
#pragma once

#include <string>

namespace tune::agent {

// Takes the lock on `dir` (an fd the caller keeps open, close-on-exec, for as long as it is
// to hold it). -1 if another process holds it (errno EWOULDBLOCK) or `dir` cannot be opened.
[[nodiscard]] int lock_trial_dir(const std::string& dir);

// The pid of the process that holds an flock on `path` (a trial dir, a lock file), from
// /proc/locks, or -1: none, or it cannot be told (gone, /proc/locks unreadable, or two holders
// on that inode number).
[[nodiscard]] int flock_holder(const std::string& path);

}  // namespace tune::agent
