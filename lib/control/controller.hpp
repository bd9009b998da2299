// The controller: owns the trials of one experiment run, drives an Executor, applies the trial
// protocol, stopping rules, failures and retries, checkpoint retention, and
// keeps experiment_state.json current. Single-threaded: one loop, no blocking calls
// on a trial's behalf.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/retention.hpp"
#include "control/events.hpp"
#include "control/resources.hpp"
#include "exec/executor.hpp"
#include "sched/scheduler.hpp"
#include "spec/experiment.hpp"
#include "state/state.hpp"
#include "trial/line_splitter.hpp"
#include "trial/result_log.hpp"
#include "util/file_worker.hpp"

namespace tune::sync {
class Uploader;
}
namespace tune::report {
class Refresher;
}

namespace tune::control {

namespace fs = std::filesystem;

struct ControllerOptions {
  double grace_s = 10;                          // SIGTERM -> SIGKILL
  std::optional<double> state_period_s;         // TUNE_GLOBAL_CHECKPOINT_S: fixed write period
  std::map<std::string, std::string> base_env;  // inherited by every trial
  std::string python_helpers_dir;               // prepended to the trials' PYTHONPATH
  std::vector<ResourcePool::Host> hosts;        // capacity; empty = derive from the spec
  sync::Uploader* uploader = nullptr;           // upload_dir mirror, if any
  report::Refresher* reporter = nullptr;        // the periodic report.html, if on
  double process_started = 0;     // monotonic time the process started (resume start-up log)
  double retry_backoff_s = 0.25;  // the first retry's wait; it doubles up to kMaxRetryDelay
  // trial.restore_from: the head's copy, given to local trials with no checkpoint of their own
  // (trials on SSH hosts get the path as written in the file).
  std::optional<fs::path> warm_start;
  // A resume pulling checkpoints that never reached the head from SSH hosts: called with the
  // checkpoints handled so far (brought or given up on) and how many there are (a progress bar).
  std::function<void(size_t done, size_t total)> fetch_progress;
};

// The controller is also what schedulers ask about the trials (sched::Population, exploit.cpp).
class Controller : private sched::Population {
 public:
  Controller(spec::Experiment exp, exec::Executor& executor, ControllerOptions opts,
             RunObserver* observer = nullptr);
  ~Controller();

  // Runs until every trial has ended, the budget is spent, or the user interrupts.
  // `resume` carries the state of an earlier run to continue. Returns the exit code.
  [[nodiscard]] int run(std::optional<state::ExperimentState> resume = std::nullopt);

  [[nodiscard]] const state::ExperimentState& state() const { return state_; }

 private:
  // kResync: a step-mode attempt found running after a driver crash is stopped and restarted
  // from its latest checkpoint (which command it was answering is unknown).
  // kScheduler: stopped early by the scheduler (TERMINATED); kPause: paused by it (PAUSED).
  enum class StopWhy {
    kNone,
    kCriterion,
    kDone,
    kBudget,
    kUser,
    kFailFast,
    kResync,
    kScheduler,
    kPause,
    kDirLost,    // its trial dir was deleted or replaced while it ran: a failure
    kStdinLost,  // step mode: its commands could not reach it (Runtime::lost_why): a failure
  };
  enum class StepOp { kNone, kStep, kSave, kStop };
  // Stops that a later Ctrl-C does not turn into an interruption.
  static bool is_final(StopWhy w) {
    return w == StopWhy::kCriterion || w == StopWhy::kDone || w == StopWhy::kScheduler ||
           w == StopWhy::kPause || is_failure(w);
  }
  // Stops of the driver's that fail the attempt (retried per failure_config).
  static bool is_failure(StopWhy w) { return w == StopWhy::kDirLost || w == StopWhy::kStdinLost; }

  // What the controller knows about a running attempt (not persisted).
  struct Runtime {
    trial::LineSplitter splitter;
    trial::ResultLog log;
    Placement placement;
    double started = 0;         // monotonic
    double last_result_at = 0;  // monotonic
    int64_t iterations_since_restore = 0;
    double time_base = 0;  // time_total_s carried over from a restore
    StopWhy stop_why = StopWhy::kNone;
    double kill_deadline = -1;  // when to escalate a requested stop
    bool term_sent = false;
    std::optional<int> pid;
    StepOp pending = StepOp::kNone;
    bool stop_after_save = false;
    bool force_save = false;   // step mode: a pause saves even without checkpoint_at_end
    sched::Decision decision;  // the scheduler's answer to the latest result
    int64_t last_checkpoint_iteration = -1;
    int64_t pending_seq = 0;
    double next_write_warning = 0;  // write errors (disk full) are logged at most every 30 s
    // Re-attached: checkpoint dirs the crashed driver adopted after its last state write; the
    // output read again names them once more and they are registered then.
    std::set<std::string> adopted_before;
    // Checkpoints being copied in on the file worker; the attempt's exit waits for them.
    int copies_in_flight = 0;
    // Its trial dir on the head, once it exists (device, inode): one deleted or replaced while
    // the attempt runs is noticed within a second (check_trial_dirs).
    std::pair<dev_t, ino_t> dir_identity{0, 0};
    std::string lost_why;  // kStdinLost: why its commands could not reach it
    std::optional<exec::ExitInfo> deferred_exit;
    // When its output arrived, on its host's clocks (exec/arrivals.hpp), when the host notes
    // it: results then get the trial's times even when read late.
    std::deque<exec::Arrival> arrivals;          // notes not yet passed
    std::optional<exec::HostTime> host_started;  // the attempt's start
    exec::HostTime host_last;                    // the last result's arrival (or the start)
    // Resume: a stop or pause journalled before the crash that the state does not record; it
    // is applied when the results read again reach its iteration.
    std::optional<state::JournalledDecision> replay;
    std::optional<exec::HostTime> passed;  // the latest note passed
    uint64_t line_end = 0;                 // in on_line: stdout offset after the line
  };

  trial::Trial& trial(const std::string& id) { return state_.trials[index_.at(id)]; }
  [[nodiscard]] fs::path trial_dir(const trial::Trial& t) const { return exp_.dir() / t.name; }

  // Starts what is ready, for at most kLaunchSlice s a turn (launch_more_ says more is ready):
  // hundreds of slots freed at once must not hold the loop while their processes start.
  void launch_ready();
  static constexpr double kLaunchSlice = 0.05;
  bool launch_more_ = false;
  // Journals and starts a trial's first attempt; false if it could not be journaled.
  bool start_first_attempt(trial::Trial& t, const Placement& p);
  // The pending trial to run next, among those whose retry back-off has passed: the lowest
  // scheduler priority, then the oldest; none while a trial not created yet should go first.
  [[nodiscard]] std::optional<size_t> next_pending(double now) const;
  bool launch(trial::Trial& t, const Placement& p);
  // The host name a placement puts a trial on (as the state records it).
  [[nodiscard]] std::string host_of(const Placement& p) const;
  // A retried or resumed attempt restarts from the latest checkpoint: later results are
  // dropped (each training_iteration is recorded once) and stray checkpoint dirs removed.
  void prepare_restart(trial::Trial& t);
  // Resume: re-attaches to a RUNNING trial's attempt if it is still running (or ended
  // meanwhile); otherwise queues it for a restart.
  void resume_running(trial::Trial& t);
  // Removes checkpoint_* dirs the state does not name (pruned, or adopted after the last state
  // write unless `keep_newer`), and staging leftovers; forgets state checkpoints that are gone.
  // Checkpoints a crashed driver was taking when it wrote the state (t.adopting): before the
  // re-attach, those whose dir is complete on the head are registered (settle_adopting); after
  // it, the others are taken again from where the trial reported them, as they were the first
  // time (retake_adopting); an attempt that is gone takes them at once where it can, on this
  // machine (take_adopting_now), before it restarts.
  void settle_adopting(trial::Trial& t);
  // Puts `c` among t's checkpoints in seq order, unless one has its number already (no
  // retention, no events: for checkpoints found complete, not taken by a running attempt).
  static bool insert_checkpoint(trial::Trial& t, trial::Checkpoint c);
  void retake_adopting(trial::Trial& t, Runtime& rt);
  void take_adopting_now(trial::Trial& t);
  void reconcile_checkpoints(trial::Trial& t, bool keep_newer, Runtime* rt);
  // Forgets t's checkpoints after `name` (all of them if "" or unknown), deleting their dirs
  // after the next state write: the trial restarts from `name`.
  void rewind_checkpoints(trial::Trial& t, const std::string& name);
  std::vector<std::string> trial_argv(const trial::Trial& t) const;
  mutable bool warned_big_config_ = false;  // (trial_env: a config too big for TUNE_CONFIG)
  std::map<std::string, std::string> trial_env(const trial::Trial& t, const Placement& p,
                                               const std::string& restore) const;
  // The trial dir on the host where `p` places it (the head's own dir for this machine).
  [[nodiscard]] fs::path host_trial_dir(const trial::Trial& t, const Placement& p) const;
  // The SSH host a trial last ran on ("" for this machine).
  [[nodiscard]] std::string remote_host(const trial::Trial& t) const;
  // Resume: brings checkpoints the state names that the trial saved on its SSH host but that
  // never reached the head (its driver died first) to the head, before anything restarts.
  // The checkpoints `t` (on an SSH host) recorded that are not on the head.
  [[nodiscard]] std::vector<std::string> missing_on_head(const trial::Trial& t) const;
  void fetch_remote_only(trial::Trial& t, const std::vector<std::string>& missing);
  // Brings every trial's missing checkpoints (a resume), reporting progress.
  void fetch_all_remote_only();
  // Resume: asks every host which attempts run there, and ends those no trial expects (an
  // attempt re-queued elsewhere while its host was unreachable, say), before anything starts.
  void end_strays();
  // Resume: the output read again of re-attached attempts reaches the scheduler in the order
  // the crashed driver saw it, whatever order the executor delivers it in: attempt by attempt
  // in launch order, an attempt that had ended (its output, then its exit) before any later
  // one's. Events of later attempts are held meanwhile (dispatch_in_order), and let go as each
  // earlier attempt exits (advance_catch_up); an attempt still running holds nothing back.
  void order_catch_up();
  void dispatch_in_order(exec::Event& ev);
  void advance_catch_up();
  // Lets go of everything held (after kCatchUpLimit s: an ended attempt's exit never came).
  void release_catch_up();
  static constexpr double kCatchUpLimit = 60;
  // A new trial with the searcher's config; nullptr if the searcher has none yet (or no more).
  trial::Trial* new_trial();
  // The searcher said "wait": ends the run once it says so for search_alg.timeout_s with no
  // trial running, pending or paused (nothing it could wait for would come).
  void searcher_waits();
  // The searcher side of a loop turn: answers collected, a failure turned into a stop.
  void poll_searcher();
  // Slurm job ids the executor learned since the last call, into the trials (and so the state).
  void note_job_ids();
  // Starts the searcher (after a resume's restore, with the trials the state holds).
  void start_searcher();
  // search_alg.restore_from: that experiment's finished trials, read before anything starts
  // (as untrusted input; a bad dir is a Fatal naming it) ...
  void load_warm_start();
  // ... and told to the searcher at the start of a fresh run.
  void warm_searcher();

  void on_output(const exec::OutputEvent& ev);
  // When the line that ends at rt.line_end arrived, on the trial host's clocks, if known.
  [[nodiscard]] std::optional<exec::HostTime> arrival_of_line(Runtime& rt);
  void on_line(trial::Trial& t, Runtime& rt, std::string_view line);
  void on_exit(const std::string& id, const exec::ExitInfo& info);
  // How an attempt that ended is taken: the driver's doing (resumed from its latest
  // checkpoint), or a failure (`why`; `lost_why` for kStdinLost): retried per failure_config,
  // else ERROR.
  void attempt_interrupted(trial::Trial& t, const exec::ExitInfo& info);
  void attempt_failed(trial::Trial& t, const exec::ExitInfo& info, StopWhy why,
                      const std::string& lost_why);
  // A step-mode attempt its commands cannot reach: stopped at once, a failure (step.cpp).
  void on_stdin_lost(const exec::StdinLostEvent& ev);
  void record_result(trial::Trial& t, Runtime& rt, nlohmann::json result);
  [[nodiscard]] bool should_stop(const nlohmann::json& result) const;
  void register_checkpoint(trial::Trial& t, Runtime& rt, int64_t seq, const nlohmann::json& result);
  // Adds a checkpoint whose dir is in place, in seq order, and applies retention.
  void add_checkpoint(trial::Trial& t, Runtime& rt, trial::Checkpoint c);
  [[nodiscard]] static nlohmann::json checkpoint_metrics(const nlohmann::json& result);
  // A checkpoint dir the trial reported with `result` (which gets checkpoint_dir_name): moved
  // in at once if it lies in the trial's dir, else copied in on the file worker (files.cpp).
  void take_checkpoint(trial::Trial& t, Runtime& rt, const std::string& reported,
                       nlohmann::json& result);
  // Brings the checkpoint the trial reported at `reported` in as `c` (numbered already): at
  // once, or on the file worker (then it is registered when done). An error if it cannot be
  // taken at all.
  [[nodiscard]] Result<void> adopt_reported(trial::Trial& t, Runtime& rt,
                                            const std::string& reported, trial::Checkpoint c);
  // Runs an executor's adopt_task (it waits on a host's link) on the file worker; `c` is
  // registered when it is done, and the trial's exit waits for it.
  void adopt_off_loop(trial::Trial& t, Runtime& rt, std::function<Result<void>()> task,
                      trial::Checkpoint c, const std::string& reported);
  // A file-worker job that brings `c` in: tracked until done, and named in the state meanwhile
  // (t.adopting) so that a crash before it is done does not lose it.
  void track_adoption(trial::Trial& t, Runtime& rt, uint64_t job, trial::Checkpoint c,
                      const std::string& reported);
  // The newest checkpoint of the trial still being adopted or copied in, if any.
  [[nodiscard]] const trial::Checkpoint* arriving_checkpoint(const std::string& trial) const;
  // Registers the checkpoints whose copies finished; runs exits that waited for them.
  void on_file_jobs_done();
  // Renames dir/name out of the way now and deletes it on the file worker.
  void delete_later(const fs::path& dir, const std::string& name);
  // Resume: removes what a finished trial's dir holds that its state does not name (worker).
  void clean_finished(const trial::Trial& t);
  void apply_retention(trial::Trial& t, bool can_run);
  void step_next(trial::Trial& t, Runtime& rt, const nlohmann::json& result);
  void step_save(trial::Trial& t, Runtime& rt, bool then_stop);
  void step_saved(trial::Trial& t, Runtime& rt, const nlohmann::json& reply);
  void step_send(trial::Trial& t, Runtime& rt, StepOp op);

  // Scheduling (scheduling.cpp): what the scheduler sees of a result (nullopt without the
  // metric or time_attr), its decision on one, carried out; decisions on paused trials.
  [[nodiscard]] std::optional<sched::Observation> observe(const trial::Trial& t,
                                                          const nlohmann::json& result) const;
  // A finished trial's metric for the searcher, oriented so that lower is better.
  [[nodiscard]] std::optional<double> value_of(const trial::Trial& t) const;
  // Says once a run that a result lacked the scheduler's time_attr or metric (as a number).
  void say_unobserved(const trial::Trial& t, const nlohmann::json& result);
  // Asks the scheduler about a result about to be recorded; notes the decision in `result`.
  void consult_scheduler(trial::Trial& t, Runtime& rt, nlohmann::json& result);
  // Function mode: carries out rt.decision at once (step mode: step_next does).
  void act_on_decision(trial::Trial& t, Runtime& rt);
  // A function-mode stop or pause decided on `t` (t.reason says which): journalled, then
  // signalled at once; the state records it at its next periodic write. A driver killed in
  // between carries it out on resume (the journal says so) instead of restarting the trial.
  void stop_decided(trial::Trial& t, Runtime& rt);
  [[nodiscard]] state::JournalledDecision journalled(const trial::Trial& t) const;
  // Resume: applies rt.replay once the result just recorded reaches its iteration (whatever
  // the scheduler, restored from an older state, decided on it this time).
  void replay_decision(trial::Trial& t, Runtime& rt, nlohmann::json& result);
  // Journals again the decisions still waiting in a resumed attempt's rt.replay (after the
  // journal was emptied by a state write that does not record them yet).
  void journal_replays();
  void apply_verdicts();
  // A trial the scheduler paused has ended its attempt: PAUSED, waiting or queued to resume.
  void paused(trial::Trial& t);
  // Tells the scheduler a trial ended (TERMINATED or ERROR).
  void scheduler_complete(const trial::Trial& t);
  // The search space is exhausted: tells the scheduler once.
  void maybe_no_more_trials();
  // Paused trials the scheduler never released while nothing else can run: resumed anyway.
  void release_stuck_paused();

  // PBT's exploits (exploit.cpp). What the scheduler may ask about the trials:
  [[nodiscard]] const nlohmann::json* config(const std::string& trial) const override;
  [[nodiscard]] bool has_checkpoint(const std::string& trial) const override;
  [[nodiscard]] bool trials_waiting() const override;
  // The scheduler decided an exploit of t (rt.decision): recorded as t's pending exploit (the
  // donor's latest checkpoint is pinned from now on); false if it cannot be carried out.
  bool plan_exploit(trial::Trial& t, const sched::Decision& d);
  // The scheduler skipped an exploit as `donor` has no checkpoint: logged; a function-mode
  // experiment with no checkpoint at all stops with an error.
  void exploit_skipped(const trial::Trial& t, const std::string& donor);
  // t's attempt ended with an exploit pending: the donor's checkpoint becomes t's latest, its
  // rows past it move aside, its config changes, and pbt_policy.jsonl gets a line. Idempotent
  // after a crash at any instant (the state still names the exploit until it is done).
  // (Not while the step-mode save it copies is still on its way: then t waits, pending.)
  void carry_out_exploit(trial::Trial& t);
  // Whether t's pending exploit waits for its donor's save to come in.
  [[nodiscard]] bool exploit_waits(const trial::Trial& t) const;
  // The checkpoints of `donor` that pending exploits will copy (retention keeps them).
  [[nodiscard]] std::vector<int64_t> pinned_checkpoints(const trial::Trial& donor) const;
  // Resume: pbt_policy.jsonl back to the length the state knows (lines of exploits the state
  // does not record as done are written again when they are carried out).
  void trim_policy_log();
  // The scheduler's log (control/scheduler_log.cpp): its new lines appended before a state
  // write; read back (bytes past the state's count cut off) before the scheduler is restored.
  void append_scheduler_log(bool durable);
  [[nodiscard]] Result<void> restore_scheduler_log();

  void request_stop(trial::Trial& t, Runtime& rt, StopWhy why);
  // `tune stop --trial` (user_stop.cpp): acts on the requests found in the experiment dir ...
  void check_stop_requests();
  // ... each stopping one trial: TERMINATED (reason stopped, cause user), the others run on.
  void stop_by_user(trial::Trial& t);
  void stop_all(StopWhy why, bool now);
  void on_interrupt();
  void check_deadlines(double now);
  void finish(trial::Trial& t, trial::Status status, const std::string& error);
  // The driver ended the trial's attempt (not a stop criterion): PENDING, reason interrupted.
  void interrupt(trial::Trial& t);
  // Queues a failed trial for its next attempt after a back-off, logging repeats sparingly.
  void schedule_retry(trial::Trial& t, const std::string& why_text);
  static constexpr double kMaxRetryDelay = 60;

  // How long the loop may sleep before a timer is due.
  [[nodiscard]] double wait_timeout(double now) const;
  void dispatch(exec::Event& ev);
  // The loop overslept by `overslept` s, or a turn of it took that long (in_turn): the
  // driver was stopped, suspended or held up, and leases lapsed meanwhile.
  void notice_gap(double overslept, bool in_turn);
  // Notices (once a second) that the experiment dir was deleted or replaced under the driver.
  void check_experiment_dir(double now);
  // Stops (as a failure, retried) attempts whose trial dir was deleted or replaced: what they
  // write there from then on would be lost without a word.
  void check_trial_dirs();
  // True (said once, as an error; stop_why kDirLost) if the attempt's dir is not the one it
  // started in. Also asked at its exit: a trial that crashed because its dir went fails for that.
  bool trial_dir_lost(const trial::Trial& t, Runtime& rt, bool ended);
  // Remembers which dir the attempt works in, once it exists (at its first output at the latest).
  void note_trial_dir(const trial::Trial& t, Runtime& rt);
  // After the dir was lost: stops what runs and throws the one-line error (exit 1).
  [[noreturn]] void lost_exit();
  // Waits for the file worker's jobs (copies, deletions) at the end of a run.
  void finish_file_work();

  void mark_dirty() { state_dirty_ = true; }
  // Puts a trial back in the launch queue.
  void set_pending(trial::Trial& t);
  // Returns false if a due write failed (the previous state stays intact). Flushes the result
  // logs first.
  bool maybe_save_state(bool force, bool durable);
  // Writes the buffered result rows of running trials (failures warned every 30 s per trial).
  void flush_result_logs(double now);
  void run_deletions();
  void draw(bool force);
  // Tells the observer about one trial's event.
  void notify(TrialEvent kind, const trial::Trial& t,
              const nlohmann::json& detail = nlohmann::json()) {
    if (observer_) observer_->on_trial_event(kind, t, detail);
  }
  void restore(state::ExperimentState resume);
  void prepare_run(bool resuming);
  void run_loop();
  [[nodiscard]] int wind_down();
  // The last mirror to upload_dir at the end of a run (Ctrl-C cancels it).
  void final_upload();
  // One more mirror once the running one (if any) ends; false if Ctrl-C cancelled it.
  bool mirror_once(sync::Uploader& up);
  [[nodiscard]] int exit_code() const;

  spec::Experiment exp_;
  exec::Executor& ex_;
  ControllerOptions opts_;
  RunObserver* observer_;
  ResourcePool pool_;
  checkpoint::Policy policy_;
  state::ExperimentState state_;
  state::Journal journal_;
  state::StateWriter writer_;
  std::unordered_map<std::string, size_t> index_;
  std::unordered_map<std::string, Runtime> running_;
  std::set<uint64_t> pending_;  // indexes of PENDING trials not running, oldest first
  std::set<uint64_t> paused_;   // PAUSED trials the scheduler holds back
  std::unique_ptr<sched::TrialScheduler> sched_;
  std::unique_ptr<search::Searcher> searcher_;
  std::optional<std::string> searcher_failed_;  // the error that ends the run (exit 1)
  std::optional<double> idle_wait_since_;       // the searcher says "wait" while no trial runs
  std::vector<search::Completion> warm_;        // search_alg.restore_from's finished trials
  bool told_no_more_ = false;
  // Resume: decisions journalled after the last state write, by trial (resume_running).
  std::map<std::string, state::JournalledDecision> journalled_;
  // Resume: re-attached attempts whose output read again is still to be dispatched in order,
  // front first (resume.cpp); those found ended; events of the others held meanwhile.
  std::deque<std::string> catch_up_;
  std::set<std::string> caught_ended_;
  std::map<std::string, std::vector<exec::Event>> held_;
  double catch_up_deadline_ = 0;
  std::map<uint64_t, double> retry_at_;  // pending trials backing off: index -> monotonic time
  struct Deletion {
    fs::path dir;      // the trial dir on the head
    std::string name;  // checkpoint_N
    std::string host;  // the SSH host that holds it too ("" = only here)
  };
  std::vector<Deletion> pending_deletions_;
  util::FileWorker worker_;
  struct Adoption {
    std::string trial_id;
    trial::Checkpoint checkpoint;
  };
  std::map<uint64_t, Adoption> adoptions_;  // file-worker job -> the checkpoint it brings in
  double longest_stall_ = 0;                // longest loop turn (s), logged at the end
  double longest_overrun_ = 0;  // longest wait past its timeout (s): the executor blocked
  // State writes of this run (count, total and longest cost in s), logged at the end.
  long state_writes_ = 0;
  double state_write_s_ = 0, longest_state_write_ = 0;
  double lease_period_ = 10;
  double next_dir_check_ = 0;
  std::pair<dev_t, ino_t> dir_identity_{0, 0};  // the experiment dir this run works in
  bool lost_ = false;                           // ... was deleted or replaced under us
  double last_turn_ = 0;                        // monotonic time the last loop turn ended

  std::string fatal_;      // a run-ending error (pbt without checkpoints), said at the end
  bool stopping_ = false;  // no more launches
  bool interrupted_ = false;
  int interrupts_ = 0;
  bool budget_spent_ = false;
  double run_started_ = 0;     // monotonic, this run
  double elapsed_before_ = 0;  // earlier runs (resume)
  bool state_dirty_ = true;
  bool last_write_failed_ = false;  // back off launches until a write succeeds
  bool sched_log_failed_ = false;   // the scheduler's log could not be appended to (said once)
  bool said_unobserved_ = false;    // a result the scheduler could not see (said once a run)
  double next_state_write_ = 0;
  double next_write_error_ = 0;  // write errors are logged at most every 30 s
  double next_lease_ = 0;
  std::string host_name_;
};

}  // namespace tune::control
