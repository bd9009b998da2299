// experiment_state.json: the searcher's position and every trial, written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trial/trial.hpp"
#include "util/error.hpp"

namespace tune::state {

namespace fs = std::filesystem;

inline constexpr int kStateVersion = 1;
inline constexpr const char* kStateFile = "experiment_state.json";
// The scheduler's append-only log (sched::TrialScheduler::log_tail), in the experiment dir; only
// its first `scheduler_log_bytes` bytes belong to the state.
inline constexpr const char* kSchedulerLog = ".tune/scheduler.log";

// A stop or pause of a running function-mode attempt (a scheduler's decision, or `tune stop`),
// journalled before the signal goes out and recorded in the state at its next write. A resume
// after a crash in between carries it out: the attempt's results up to `iteration` are read
// again and exactly this decision is applied at that result (control/scheduling.cpp).
struct JournalledDecision {
  std::string trial_id;
  int attempt = 0;
  trial::Reason reason = trial::Reason::kStopped;  // kStopped or kPaused
  trial::Cause cause = trial::Cause::kNone;
  double decided_at = 0;  // the scheduler's time_attr value then
  int64_t iteration = 0;  // the trial's training_iteration when it was decided
  // A pause that is a PBT exploit: the trial's pending_exploit as decided (donor, donor
  // checkpoint, new config, ...); null otherwise.
  nlohmann::json exploit;
};

struct ExperimentState {
  std::string name;
  uint64_t seed = 0;
  uint64_t total_trials = 0;      // the search space's size (num_samples x grid)
  uint64_t next_index = 0;        // the searcher's position: trials [0, next_index) exist
  double start_time = 0;          // wall clock, epoch seconds
  double elapsed_s = 0;           // driver running time so far
  std::string phase = "running";  // running | finished | interrupted
  std::optional<std::string> metric;
  std::string mode = "min";
  std::map<std::string, std::string> hosts;  // host -> "up" | "unreachable" (as last seen)
  nlohmann::json scheduler;                  // the trial scheduler's own state (null for fifo)
  nlohmann::json search_alg;                 // the searcher's own state (null for random)
  uint64_t pbt_policy_bytes = 0;     // pbt_policy.jsonl's length as of this state (control/exploit)
  uint64_t scheduler_log_bytes = 0;  // kSchedulerLog's length as of this state
  std::vector<trial::Trial> trials;
  // Read from the journal by load(), never written: decisions the state does not record yet
  // (the latest per trial, for RUNNING trials' current attempts only).
  std::vector<JournalledDecision> decisions;
};

[[nodiscard]] nlohmann::json to_json(const ExperimentState& s);
// {"loss": {"last": .., "min": .., "max": ..}, ...} of one trial (state file and `tune status`).
[[nodiscard]] nlohmann::json metrics_to_json(const trial::Trial& t);
// Validates every field; `where` names the file in messages.
// `progress(done, total)`: trials checked so far.
[[nodiscard]] Result<ExperimentState> from_json(
    const nlohmann::json& j, const std::string& where,
    const std::function<void(size_t, size_t)>& progress = {});

// The write-ahead journal (.tune/state.journal): one JSON line per trial launch, appended with
// one write() before the trial's process starts, so a launch is on disk without rewriting the
// whole state; and one per decision to stop or pause a running attempt, appended before the
// signal goes out. load() replays it over experiment_state.json (idempotently: a line the state
// already covers changes nothing); it is emptied after each full state write.
class Journal {
 public:
  Journal() = default;
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  [[nodiscard]] Result<void> open(const fs::path& exp_dir);
  // Records that `t` (already marked RUNNING with its new attempt) is about to start.
  [[nodiscard]] Result<void> record_launch(const trial::Trial& t);
  // Records a decision about to be carried out (the stop or pause is signalled next).
  [[nodiscard]] Result<void> record_decision(const JournalledDecision& d);
  // Empties the journal (after the full state was written).
  [[nodiscard]] Result<void> reset();

 private:
  [[nodiscard]] Result<void> append(const nlohmann::json& line);
  fs::path path_;
  int fd_ = -1;
};

// Writes experiment_state.json atomically (fsync'ed when `durable`), one trial per line. It
// keeps each trial's serialized text and serializes again only the trials whose progress
// changed since its last write: a finished trial is serialized once, so with 10,000 trials a
// write costs about the bytes it writes.
class StateWriter {
 public:
  [[nodiscard]] Result<void> save(const fs::path& exp_dir, const ExperimentState& s, bool durable);
  // Trials serialized again by the last save() (for tests and benchmarks).
  [[nodiscard]] size_t last_serialized() const { return last_serialized_; }

 private:
  // What changes whenever anything persisted of a trial changes.
  struct Key {
    int status = -1, reason = 0, attempt = 0, failures = 0;
    int64_t iteration = 0, checkpoint_seq = 0;
    size_t checkpoints = 0;
    uint64_t stdout_offset = 0;
    double time_total_s = 0, attempt_started = 0;
    std::string host, error;
    int cause = 0;
    double decided_at = 0;
    int exploits = 0;
    bool exploit_pending = false;
    std::string job_id;
    size_t adopting = 0;
    int64_t adopting_seq = 0;  // the newest being taken
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    std::string text;
  };
  std::vector<Entry> cache_;  // by position in ExperimentState::trials
  size_t last_serialized_ = 0;
};

// What `tune ls` needs of an experiment, read from the state file's first line (the header,
// which carries the trial counts by status as of the write) without parsing the trials.
struct Summary {
  std::string name;
  std::string phase;
  uint64_t total_trials = 0;
  uint64_t next_index = 0;
  double elapsed_s = 0;
  std::map<trial::Status, uint64_t> counts;  // trials in the state, by status
};
// Reads the summary from dir/experiment_state.json's header line; an error if the file has no
// such header (written by an older tune: read the whole state instead) or it is unreadable.
[[nodiscard]] Result<Summary> read_summary(const fs::path& exp_dir);

// Reads dir/experiment_state.json one trial line at a time, with the journal replayed over
// each, calling `on_header` once (with no trials) and then `on_trial` for every trial in file
// order (trials only the journal knows come last). Memory stays at one trial; an error names
// the file and line.
[[nodiscard]] Result<void> stream(const fs::path& exp_dir,
                                  const std::function<void(const ExperimentState&)>& on_header,
                                  const std::function<void(trial::Trial&&)>& on_trial);

// Writes dir/experiment_state.json atomically (fsync'ed when `durable`), without a cache.
[[nodiscard]] Result<void> save(const fs::path& exp_dir, const ExperimentState& s, bool durable);
// Reads dir/experiment_state.json and replays the journal over it; a torn, empty or foreign
// state file is a clear error (a torn last journal line is dropped).
// `progress(stage, done, total)` reports how far it got (a big state takes seconds): bytes of
// experiment_state.json parsed, then trials checked.
enum class LoadStage { kParse, kCheck };
[[nodiscard]] const char* load_stage_label(LoadStage s);  // "reading state", "checking trials"
using LoadProgress = std::function<void(LoadStage, size_t done, size_t total)>;
[[nodiscard]] Result<ExperimentState> load(const fs::path& exp_dir,
                                           const LoadProgress& progress = {});

}  // namespace tune::state
