// Helper processes (rsync, aws, gsutil, custom syncers): started without a shell, in their own
// process group, output to a log file, waited for without blocking.
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace tune::util {

namespace fs = std::filesystem;

// The longest NAME=VALUE string Linux passes to a program in its environment or arguments
// (MAX_ARG_STRLEN, its NUL included).
inline constexpr size_t kMaxEnvString = 131072;

// Spawn attributes every helper and supervisor gets: no blocked signals, and the signals the
// driver handles (INT, TERM, CHLD, PIPE, HUP) back to their defaults; plus `flags`
// (POSIX_SPAWN_SETSID or POSIX_SPAWN_SETPGROUP). Destroy with posix_spawnattr_destroy.
void init_spawn_attrs(posix_spawnattr_t& attr, short flags);

// Starts argv[0] (searched on PATH) with the driver's environment, in its own process group;
// stdin is /dev/null, stdout and stderr go to `log` (truncated), or /dev/null if empty. Started
// from the main thread or one that called tie_helpers_to_this_thread, it gets SIGTERM when that
// thread ends (PR_SET_PDEATHSIG): a killed driver leaves no rsync, ssh master or upload behind.
[[nodiscard]] Result<pid_t> spawn_process(const std::vector<std::string>& argv,
                                          const fs::path& log);

// As spawn_process, but in a session of its own and never tied to the driver: it outlives a
// killed driver (a Slurm job step's srun, whose death would end the step). Still the driver's
// child while the driver lives (reap it with try_wait).
[[nodiscard]] Result<pid_t> spawn_detached(const std::vector<std::string>& argv,
                                           const fs::path& log);

// Helpers this thread starts from now on are tied to it as to the main thread (for threads
// that live as long as the driver's work, such as a host's I/O thread).
void tie_helpers_to_this_thread();

// The exit status (128+signal if killed) once `pid` has ended, else nullopt. Never blocks.
[[nodiscard]] std::optional<int> try_wait(pid_t pid);

// Runs argv to completion (blocking); returns the exit status. With `timeout_s` > 0, a process
// still running after that long has its process group killed, and the result is an error that
// says so (a stalled network must not hang the caller for ever).
[[nodiscard]] Result<int> run_process(const std::vector<std::string>& argv, const fs::path& log,
                                      double timeout_s = 0);

// rsync's quick check skips a file whose size and modification time match, and by default it
// compares times in whole seconds: a file rewritten with the same size within the second of
// the last copy (a state file, a PBT trial's params.json) would stay stale at the other end.
// Every `rsync` this project runs passes this: compare nanoseconds too (the receiving end needs
// rsync 3.1.3 or later, as in Debian 10 and later).
inline constexpr const char* kRsyncExactTimes = "--modify-window=-1";

// rsync's exit status when some source files vanished while it ran (and nothing else went
// wrong): everything else was copied.
inline constexpr int kRsyncVanished = 24;

// Kills the process group of `pid` and reaps it.
void kill_and_reap(pid_t pid);

// What /proc/PID/stat says of process `pid`, as far as it is read here; nullopt if there is no
// such process (or the file is not as the kernel writes it).
struct ProcStat {
  std::string comm;    // field 2: its name (at most 15 bytes; the parentheses removed)
  char state = '?';    // field 3: R, S, D, T (stopped), t (traced), Z, X, ...
  long session = 0;    // field 6
  uint64_t start = 0;  // field 22: the start time in clock ticks since boot
};
[[nodiscard]] std::optional<ProcStat> proc_stat(pid_t pid);
// The same from the text of a /proc/PID/stat file (read elsewhere, e.g. on an SSH host), with
// the pid it names (field 1).
[[nodiscard]] std::optional<std::pair<pid_t, ProcStat>> parse_proc_stat(std::string_view text);

// The start time of process `pid` in clock ticks since boot (field 22 of /proc/PID/stat), which
// tells a live process from a later one that reused its pid; 0 if there is no such process.
[[nodiscard]] uint64_t process_start_ticks(pid_t pid);

// The last non-empty line of a log file (for one-line error messages).
[[nodiscard]] std::string last_line(const fs::path& log);

}  // namespace tune::util
