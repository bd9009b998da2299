// A trial as the driver tracks it: identity, config, status, progress and checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trial/result_line.hpp"

namespace tune::trial {

using json = nlohmann::json;

// Ray Tune's trial statuses.
enum class Status { kPending, kRunning, kPaused, kTerminated, kError };

[[nodiscard]] const char* status_name(Status s);
// Parses "PENDING" etc.; nullopt for anything else.
[[nodiscard]] std::optional<Status> parse_status(std::string_view s);

// Why a trial is where it is, beyond its status (shown by `tune status`, kept in the state).
enum class Reason {
  kNone,
  kInterrupted,  // the driver ended its attempt for another reason than a stop criterion
                 // (Ctrl-C, fail_fast, an orphan timeout, a lost host): resumed from its
                 // latest checkpoint, never counted as a failure
  kStopped,      // TERMINATED early by the scheduler (see Trial::cause)
  kPaused,       // PAUSED by the scheduler; it resumes from its latest checkpoint
};

// Why a scheduler stopped or paused a trial.
enum class Cause {
  kNone,
  kCutoff,   // below its rung's cutoff (asha), or not among the best at its rung (hyperband)
  kMedian,   // its best is below the median of the others' running means (median_stopping)
  kMaxT,     // reached the scheduler's max_t
  kRung,     // paused at its rung until the rest of its bracket reaches it (hyperband)
  kTurn,     // paused at its check so that trials waiting for a slot get their turn (pbt)
  kExploit,  // restarts from another trial's checkpoint with a changed config (pbt)
  kUser,     // stopped by `tune stop --trial` (not a scheduler's doing)
};

[[nodiscard]] const char* cause_name(Cause c);
// Parses a cause_name(); nullopt for anything else.
[[nodiscard]] std::optional<Cause> parse_cause(std::string_view s);

[[nodiscard]] const char* reason_name(Reason r);
// Parses a reason_name(); nullopt for anything else.
[[nodiscard]] std::optional<Reason> parse_reason(std::string_view s);

// last/min/max of one numeric metric over the trial's recorded results.
struct MetricStats {
  double last = 0, min = 0, max = 0;
};

// A retained checkpoint: checkpoint_NNNNNN in the trial dir, and the result it was taken at.
struct Checkpoint {
  int64_t seq = 0;        // N of checkpoint_N (1-based)
  int64_t iteration = 0;  // training_iteration of its result
  double time_total_s = 0;
  json metrics = json::object();  // the result's top-level numeric values

  [[nodiscard]] std::string dir_name() const;
};

// A checkpoint whose adoption (a copy on the driver's file worker, or a move on the trial's SSH
// host) was under way when the state was written: a resume registers it if it completed, and
// otherwise takes it again from where the trial reported it.
struct Adopting {
  Checkpoint checkpoint;
  std::string reported;  // the path the trial reported
};

struct Trial {
  std::string id;    // "00003"
  std::string name;  // "trial_00003_lr=0.001,layers=2"
  uint64_t index = 0;
  json config;
  Status status = Status::kPending;
  Reason reason = Reason::kNone;
  Cause cause = Cause::kNone;  // with kStopped/kPaused: why
  double decided_at = 0;       // with kStopped/kPaused: the scheduler's time_attr value then
  int attempt = 0;             // attempts started so far
  int failures = 0;
  std::string host;
  std::string error;      // why it ended in ERROR
  int64_t iteration = 0;  // training_iteration of the last recorded result
  double time_total_s = 0;
  json last_result = json::object();
  std::map<std::string, MetricStats> metrics;
  std::vector<Checkpoint> checkpoints;  // retained, in seq order
  int64_t checkpoint_seq = 0;           // highest seq ever taken
  std::vector<Adopting> adopting;       // taken (seq counted) but not registered yet, in seq order
  uint64_t stdout_offset = 0;           // bytes of stdout.log consumed as whole lines
  // The running attempt (re-attach after a driver crash continues its clocks and counters).
  double attempt_started = 0;     // wall clock when it started
  int64_t restore_iteration = 0;  // training_iteration it restored from (0 = from scratch)
  double time_base = 0;           // time_total_s it restored from
  std::vector<int> gpu_ids;       // the GPUs it holds (CUDA_VISIBLE_DEVICES)
  std::string job_id;             // Slurm: the job (or JOBID.STEPID: the job step) running its
                                  // current attempt (once known)
  LineIssueLog line_issues;       // warnings said about its output lines (not persisted)
  // Failures in a row since its last recorded result (the retry back-off; not persisted).
  int fail_streak = 0;
  std::string last_failure;  // how its last attempt failed (to log a repeated failure once)
  // PBT: the donor of the last exploit carried out and the time_attr value it was decided at,
  // the exploits done so far, and the one decided but not carried out yet (null when none:
  // see control/exploit.cpp).
  std::string exploited_from;
  double exploited_at = 0;
  int exploits = 0;
  json pending_exploit;
  // A pause found its latest checkpoint older than the decision (said once; not persisted).
  bool told_stale_checkpoint = false;

  // Updates last/min/max from one result's numeric values (not the driver's bookkeeping).
  void track_metrics(const json& result);

  [[nodiscard]] const Checkpoint* latest_checkpoint() const {
    return checkpoints.empty() ? nullptr : &checkpoints.back();
  }
  [[nodiscard]] bool finished() const {
    return status == Status::kTerminated || status == Status::kError;
  }
};

// Directory names: trial_<id>_<varying params>, filesystem-safe, at most 200 bytes.
// "stopped by asha at 9", "paused by hyperband at 3", "reached max_t at 81", "exploited 00003
// @ 12": a scheduler's
// decision about `t` (empty when it has none).
[[nodiscard]] std::string describe_decision(const Trial& t, std::string_view scheduler);

[[nodiscard]] std::string make_trial_name(const std::string& id,
                                          const std::vector<std::pair<std::string, json>>& varying);

}  // namespace tune::trial
