// One attempt of a trial on an SSH host as its host's I/O thread sees it, and the syncs that
// bring its trial dir to the head: rsync (or the user's syncer) over the host's master
// connection, each checkpoint copied under a staging name and published under its own only
// when complete and still retained. Used only on the host's I/O thread.
#pragma once

#include <sys/types.h>

#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "exec/arrivals.hpp"
#include "exec/executor.hpp"
#include "exec/exit_record.hpp"
#include "exec/ssh_host.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

struct Run {
  std::string id;
  int attempt = 0;
  SshHost* host = nullptr;
  std::string dir;      // on the host
  fs::path head_dir;    // on the head
  std::string record;   // on the host: where its supervisor records the exit
  AttemptIdentity who;  // what a genuine record must say
  bool warned_forged = false;
  uint64_t offset = 0;
  ArrivalReader times{0};             // stdout.times on the host
  std::optional<std::string> params;  // params.json, sent in its launch request (then dropped)
  // notes an agent's event carried ahead of their bytes (handed on with them)
  std::vector<Arrival> arrivals_ahead;
  std::optional<HostTime> started_ahead;
  int sup_pid = -1;
  uint64_t sup_started = 0;  // its start time there (from its start event; 0: not known)
  // Its agent said its supervisor ended, without a record, and the host could not confirm it
  // (no answer, or the pid runs): the liveness checks ask about it until they settle it.
  bool confirm_gone = false;
  bool unread_denied = false;  // the last failed read of its output: permission denied
  // The host's agent (by SshHost::agent_gen) that says when its stdout.log grows and when its
  // supervisor ends, so that it is looked at only then (and every kWatchedLook seconds); -1:
  // none, looked at on every poll. A watch is asked once of each new agent.
  int watched_by = -1;
  int watch_asked = -1;
  int launched_by = -1;  // the agent that started it (it need not be asked to watch it)
  bool look = true;      // something may be there to read
  // A line went to its stdin: until output comes, looked at on every poll unless its agent
  // watches it and was heard from lately (then the agent's output event brings the answer).
  bool awaiting_answer = false;
  // Lines for its stdin that no agent said written yet, in order, each with its number in
  // the driver's run and the agent (agent_gen) it went to (-1: none now): sent again when
  // that agent ends, goes silent or its link is cut (the host's record of the last line
  // written, agent/stdin_record.hpp, keeps each from going twice).
  struct StdinLine {
    std::string text;
    uint64_t n = 0;
    int by = -1;
    double sent = 0;  // (monotonic)
  };
  std::deque<StdinLine> unwritten;
  bool stdin_refused = false;  // a line was dropped (its trial reads none): said once
  bool stdin_lost = false;     // no line can reach it: the controller was told
  // 1: SIGTERM asked, 2: kill at once (done in the host's shell if its agent cannot)
  int stop_asked = 0;
  int stop_by = -1;         // the agent (agent_gen) it was last asked of
  int failed_looks = 0;     // looks in a row since its exit that could not read its output
  double unread_since = 0;  // when the first of them was
  double last_look = -1e9;  // when it was looked at last (monotonic)
  std::optional<int> child_pid;
  bool pid_asked = false;
  bool exited = false;  // exit record read and all output delivered
  // What changed in its trial dir, as its agent looked when it ended (ssh_changes.hpp's answer;
  // taken by its last sync in place of asking)
  std::optional<std::string> exit_changes;
  std::optional<ExitInfo> exit;
  std::set<std::string> checkpoints;  // retained, on the host
  int adopting = 0;  // checkpoints its agent is moving in (its exit is handed on after them)
  std::set<std::string> found_at_attach;     // checkpoint dirs there when re-attached
  std::map<std::string, double> adopted_at;  // checkpoint -> when it was registered
  // sync: a queue of commands; a checkpoint's step is published (renamed) when it succeeds
  struct Step {
    std::vector<std::string> cmd;
    fs::path staging, final_path;    // empty for the files step
    std::vector<std::string> batch;  // checkpoints copied together into `staging` (by name)
  };
  pid_t sync_pid = -1;
  std::optional<Step> current;
  std::vector<Step> sync_steps;
  bool sync_due = false;   // a checkpoint was registered: copy the newest one kept
  bool sync_full = false;  // the trial ended: copy every checkpoint kept that the head lacks
  double due_at = 0;       // when one of them was asked for (syncs wait their turn by it)
  double next_sync = 0;
  std::vector<std::string> rm_later;
  // (dir on the host, checkpoint) moved there while a files step ran: seeded once it ends
  std::vector<std::pair<std::string, std::string>>
      seeds_later;  // retention dropped them while a copy ran: deleted after
  double sync_started = 0;
  double started_at = -1;  // when this driver started it (monotonic); -1 once output was read

  // Asks for a sync (full: every checkpoint kept that the head lacks, else the newest).
  void want_sync(bool full, double now) {
    if (!sync_due && !sync_full) due_at = now;
    (full ? sync_full : sync_due) = true;
  }
  // Wants a sync to start (asked for, or its period is up), since when.
  [[nodiscard]] std::optional<double> sync_wanted(double now) const {
    if (sync_due || sync_full) return due_at;
    if (now >= next_sync && !exited) return next_sync;
    return std::nullopt;
  }
};

// What the log's "ssh timings" line reports (bench/bench.py reads it).
struct SshStats {
  std::vector<double> start_ms, sync_ms;
  std::vector<double> first_output_ms;  // started -> its first output read on the head
  double sync_poll_max_ms = 0;          // the longest sync bookkeeping in one poll
  std::vector<double> publish_ms;       // checkpoint registered -> complete on the head
  uint64_t published_bytes = 0;
  uint64_t looks = 0;  // looks at an attempt's stdout.log (each an SFTP round trip or more)
  // exit record files read (an SFTP read each; an attempt its agent started says its exit in
  // an event instead), and trial pids asked with a shell command (each a round trip; such an
  // attempt's start event gives it)
  uint64_t records_read = 0, pid_asks = 0;
  // output handed on from the bytes the agent's events carried (no SFTP read for them)
  uint64_t carried = 0, carried_bytes = 0;
  // ended attempts' last syncs whose few small files came with the look for changes (no rsync)
  uint64_t inline_syncs = 0;
  // ended attempts' last syncs that took the look their agent sent with the exit (no command)
  uint64_t sent_looks = 0;
  // checkpoints moved in and deleted on hosts by their agents (in a process of its own), and
  // in the host's shell (one round trip each, on the host's thread: an agent that ended first)
  uint64_t agent_file_ops = 0, shell_file_ops = 0;
  void add(const SshStats& o);
};

// What the sync functions work with: the experiment's options, the host, its timings.
struct SyncContext {
  const SshOptions& opts;
  SshHost& host;
  SshStats& stats;
};

// The command that copies `src` on the host to `dst` on the head (rsync over the host's
// master connection, or the user's syncer template).
[[nodiscard]] std::vector<std::string> copy_from(const SyncContext& c, const std::string& src,
                                                 const std::string& dst,
                                                 const std::vector<std::string>& extra);
// Advances a trial's sync, and starts one if it is wanted and `may_start`; true while one runs.
bool poll_sync(SyncContext& c, Run& r, double now, bool may_start);
// The checkpoints a sync copies, by name (full: all those kept that the head lacks; else only
// the newest kept one, if the head lacks it).
std::vector<std::string> checkpoints_to_copy(const Run& r, bool full);
// The trial's dir `moved` (on the host) became checkpoint `name` there: a copy of it that an
// earlier files step brought to the head becomes the start of that checkpoint's copy (kept
// under its staging name; the copy then sends only what differs, checked by checksum).
void seed_checkpoint(Run& r, const std::string& moved, const std::string& name);
// Retention dropped checkpoint `name`: it is no longer copied, and a copy of it that is queued
// or under way is dropped (a copy of several goes on for the others).
void drop_checkpoint(SyncContext& c, Run& r, const std::string& name);
// Stops a trial's sync, if one runs, and drops what it was copying.
void drop_sync(Run& r);
// Copies of checkpoints that a sync killed with an earlier driver left half done.
void remove_sync_leftovers(const fs::path& head_dir);

}  // namespace tune::exec
