// How both modes of tune-agent start an attempt: a forked child of the agent becomes its
// supervisor (lib/agent/supervise.hpp); no exec, so the trial's is the attempt's only one.
#pragma once

#include <sys/types.h>

#include <initializer_list>
#include <string>

#include "agent/supervise.hpp"

namespace tune::agent_app {

// Forks the supervisor of `a`. The child has /dev/null as stdin, stdout and stderr and no
// descriptor of the agent's but `log_fd` (the attempt log, where it names itself first) and,
// when `events_fd` >= 0, a copy of it for its start and exit events (the agent's stdout on the
// driver's machine; on an SSH host a pipe the agent relays, relay.hpp); with a
// `record_file`, it also writes the exit record there (what an SSH host's driver reads); it keeps
// `hold_fd` (a lock the agent holds) open until it has named itself, then closes it. Returns
// its pid once it has named itself in the attempt log (or died), so that a driver that resumes
// after this never misses it; -1 if it could not be forked (`error` says why).
pid_t fork_supervisor(const tune::agent::Attempt& a, int log_fd, int events_fd, std::string& error,
                      const std::string& record_file = "", int hold_fd = -1);

// An exclusive flock on `fd`, tried every 10 ms for up to `wait_ms`: kLocked; kHeld (another
// open file held it all along); kFailed (flock itself failed, e.g. a file system without it:
// errno says why).
enum class FlockWait { kLocked, kHeld, kFailed };
FlockWait wait_for_flock(int fd, int wait_ms);
// " (pid N)" for the process that holds the flock on `path`, or "" if it cannot be told.
std::string flock_holder_text(const std::string& path);

// (in the child) Closes every descriptor from 3 up but those in `keep`.
void close_all_but(std::initializer_list<int> keep);

}  // namespace tune::agent_app
