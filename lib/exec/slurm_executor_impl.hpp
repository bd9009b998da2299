// The Slurm executor's insides, shared by slurm_executor.cpp (submitting, polling, reading the
// trials' files), slurm_resume.cpp (which jobs are this experiment's: cancels, re-attaching
// after a crash, the jobs a resume finds) and slurm_steps.cpp (use_allocation: job steps). Not
// part of the interface: include only from those.
#pragma once

#include <time.h>
#include <unistd.h>
#include <cstdlib>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "exec/exit_record.hpp"
#include "exec/slurm_executor.hpp"
#include "util/clock.hpp"

namespace tune::exec {

namespace slurm_detail {

using util::mono;

// This machine's name (where a step's srun runs: only there can a resume watch it). The tests
// make a resume look like one on another machine with TUNE_TEST_SLURM_HOST (read once).
inline std::string this_host() {
  static const char* test_host = std::getenv("TUNE_TEST_SLURM_HOST");
  if (test_host && *test_host) return test_host;
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  std::string h = buf;
  return h.empty() || h.find_first_of(" \n") != std::string::npos ? "?" : h;
}

inline fs::path job_file_path(const fs::path& exp_dir, const std::string& trial_name) {
  return exp_dir / kSlurmDir / (trial_name + ".job");
}

// use_allocation: `HANDLE ATTEMPT HOST`, the srun of the trial's latest step (start_step's
// handle) and where it runs, written as soon as srun started.
inline fs::path step_file_path(const fs::path& exp_dir, const std::string& trial_name) {
  return exp_dir / kSlurmDir / (trial_name + ".step");
}
// use_allocation: an attempt's files: `.launch` (written before its srun starts), `.run` (the
// launch file once the step claimed it), `.void` (once a resume gave the attempt up),
// `.stepid` (`JOBID.STEPID`, written by the step itself as it starts, before its claim).
inline fs::path attempt_file(const fs::path& exp_dir, const std::string& trial_name, int attempt,
                             const char* ext) {
  return exp_dir / kSlurmDir / (trial_name + ".a" + std::to_string(attempt) + ext);
}
inline fs::path step_id_path(const fs::path& exp_dir, const std::string& trial_name, int attempt) {
  return attempt_file(exp_dir, trial_name, attempt, ".stepid");
}

// One submission for the worker thread: files to write, then sbatch.
struct Submit {
  std::string trial_id;
  uint64_t gen = 0;
  Launch launch;
  fs::path stub, launch_file, job_file;
  std::string stub_text, launch_text;
  std::vector<std::string> args;
  std::vector<std::string> command;  // a step: what srun runs (step_command)
};

struct Submitted {
  std::string trial_id;
  uint64_t gen = 0;
  Result<std::string> job;
};

enum class Phase { kWaiting, kDeciding, kSubmitting, kSubmitted, kDone };

}  // namespace slurm_detail

using namespace slurm_detail;

struct SlurmExecutor::Impl {
  SlurmOptions o;
  std::unique_ptr<SlurmClient> client;
  fs::path slurm_dir;

  // --- shared with the worker thread (under m) ---
  std::mutex m;
  std::condition_variable cv;
  bool quit = false;
  std::deque<Submit> submits;
  std::vector<std::string> cancel_term, cancel_kill;
  std::vector<Submitted> answers;
  std::optional<std::vector<JobInfo>> snapshot;  // the latest squeue answer not yet taken
  uint64_t snapshot_seq = 0;                     // squeue answers so far
  std::vector<std::string> worker_errors;        // messages for the loop to log
  bool poll_now = false;
  uint64_t queue_calls = 0;
  // sacct: asked about jobs gone from squeue without a record, where the cluster keeps
  // accounting (found out by the first call: off for good once sacct says it is disabled).
  enum class Acct { kUnknown, kOn, kOff };
  Acct acct_mode = Acct::kUnknown;
  std::vector<std::string> acct_ask;
  std::vector<std::string> acct_answered;  // asked, and answered (found or not)
  std::vector<JobInfo> acct_answers;
  uint64_t acct_calls = 0;
  // use_allocation: the steps whose srun runs (the worker's), signals for them, and those that
  // ended (for the loop).
  std::vector<std::string> live_steps;
  std::vector<std::pair<std::string, int>> step_signals;
  std::vector<std::string> steps_ended;
  std::thread worker;

  // --- the loop's own ---
  struct Run {
    std::string trial_id, trial_name;
    int attempt = 0;
    int first_attempt = 0;  // the attempt the job ran first (attempt - first: SLURM_RESTART_COUNT)
    fs::path dir;
    std::string nonce;  // known once the job is: derived from its id and the run's count
    Phase phase = Phase::kWaiting;
    uint64_t gen = 0;
    std::optional<Submit> pending;  // waiting for room under max_jobs
    std::string job_id;             // a step: its srun's handle (start_step's)
    std::string step_id;            // a step: JOBID.STEPID, once the step wrote it
    uint64_t judged_after = 0;      // only squeue answers after this one speak for the job
    JobState state = JobState::kUnknown;
    bool seen_running = false, grew = false;
    int missing = 0;
    double ended_at = -1;  // when squeue (a step: its srun) first said it ended, no record
    uint64_t offset = 0;
    uint64_t cut_at = UINT64_MAX;  // its output ends here (a rerun of its job wrote on after it)
    bool stop_asked = false;
    double kill_at = -1;
    double deciding_since = 0;
    int submit_failures = 0;
    double retry_at = 0;
    std::optional<ExitInfo> exit;  // decided; reported after the output
    ArrivalReader times{0};        // stdout.times: when the output arrived, on the node's clocks
  };
  std::map<std::string, Run> runs;
  std::deque<std::string> waiting;  // trial ids in submission order
  // The job of a trial's previous attempt (and the attempt it ran first), if Slurm may have
  // requeued it.
  std::unordered_map<std::string, std::pair<std::string, int>> maybe_requeued;
  std::unordered_map<std::string, int> slurm_ends;  // Slurm's ends since the last checkpoint
  std::unordered_map<std::string, JobInfo> last_seen;
  uint64_t seen_seq = 0;
  double next_scan = 0;
  std::unordered_map<std::string, double> acct_asked;  // job -> when asked (the loop's)
  std::set<std::string> acct_done;                     // answered
  std::unordered_map<std::string, JobInfo> acct;       // sacct's records
  std::set<std::string> logged;                        // messages logged once
  // Job ids known to be this experiment's: answers of our own sbatch, and ids read back (state,
  // .job files) once squeue lists them under the trial's job name. Only these are cancelled.
  std::set<std::string> ours;
  struct Held {
    std::string job, trial_name;
    bool term = false;
    uint64_t after = 0;  // decided by the first squeue answer after this one
  };
  std::vector<Held> held;  // cancels of ids not known to be ours yet
  std::vector<std::pair<std::string, std::string>> new_jobs;  // (trial id, job id) for the state
  std::optional<std::vector<JobInfo>> resume_queue;           // one squeue for a resume's attaches

  void log_once(const std::string& msg) {
    if (logged.insert(msg).second) spdlog::error("{}", msg);
  }

  // A fresh run of attempt l.attempt (its generation bumped: answers for the old one are stale).
  Run& fresh_run(const Launch& l);
  // use_allocation: picks up the step id the step wrote (for the state and `tune status`).
  void note_step_id(Run& r);
  std::vector<LiveAttempt> live_steps_found();
  // use_allocation: a resume gives up attempt `attempt` of trial `name`, which no srun of this
  // machine runs: its launch file is voided so that no step starts it any more.
  void give_up_step(const std::string& name, int attempt);
  bool kill_after_srun = false;  // tests: the driver dies right after starting an srun
  void end_steps(const std::vector<LiveAttempt>& which, double grace_s);

  void worker_main();
  void do_submit(Submit& s, Submitted& out);
  void steps_worker_turn(std::unique_lock<std::mutex>& lk, std::deque<Submit>& todo, bool poll,
                         double& next_poll);
  Submit make_submit(const Launch& l, uint64_t gen);
  // The launch file of attempt l run by a job first run as attempt `first`.
  // first_run: the job's own first run, which its stub may also rerun on its own.
  std::string launch_text(const Launch& l, int first, bool first_run) const;
  bool prepare_rerun(Run& r, const std::string& job, int first, int k);
  void adopt_rerun(Run& r, const std::string& job, int first, const SelfRerun& self, bool running);
  bool superseded(Run& r);
  std::optional<SelfRerun> self_rerun(const Run& r, const std::string& job, int k);
  // r's attempt runs in `job`, first run as attempt `first`: its nonce follows.
  void set_job(Run& r, const std::string& job, int first) {
    r.job_id = job;
    r.first_attempt = first;
    r.nonce = o.use_allocation
                  ? attempt_nonce(o.record_key, r.trial_name, r.attempt)  // a step: no requeue
                  : slurm_attempt_nonce(o.record_key, r.trial_name, first, job, r.attempt);
  }
  void hand_over();
  void take_answers(std::vector<Event>& out, double now);
  void judge(Run& r, double now);
  void scan(Run& r, std::vector<Event>& out);
  void end_run(Run& r, ExitInfo info);
  void decide_requeued(Run& r, double now);
  ExitInfo ended_without_record(const Run& r, const JobInfo& j, const char* source);
  bool ask_accounting(const Run& r, double now);
  int in_slurm() const;
  void cancel(const std::string& job, const std::string& trial_name, bool term_only);
  void release_held(uint64_t seq);
  void verify_runs();
  // use_allocation: a step whose srun ended without the supervisor's record ends its attempt
  // (after record_wait_s: the record may lag).
  void judge_steps(const std::vector<std::string>& ended, double now);
  // With the worker gone: the cancels it had not made yet, jobs sbatch answered for attempts
  // stopped meanwhile, and held cancels squeue confirms. A driver that ends never leaves a job
  // it was asked to stop.
  void cancel_at_exit();
  // Whether squeue lists `j` as a job of this experiment's trial `trial_name`: under the trial's
  // job name (with squeue --me, as this user's) and with one of its attempts' marks in the
  // comment. A name alone is not enough: any job of the user's may be named tune-<exp>-<trial>,
  // but only tune can make the mark (job_mark).
  bool listed_ours(const JobInfo& j, const std::string& trial_name) const {
    return j.name == job_name(o.exp_name, trial_name) &&
           marked_attempt(o.record_key, trial_name, j.comment).has_value();
  }
  // How squeue lists a job that is not trial_name's, for the log.
  std::string not_ours(const JobInfo& j, const std::string& trial_name) const {
    std::string want = job_name(o.exp_name, trial_name);
    if (j.name != want) return "squeue lists it as '" + j.name + "', not as " + want;
    return "squeue lists it as " + want + " without this experiment's mark (comment '" +
           j.comment.substr(0, 60) + "')";
  }
  void got_job(const Run& r) { new_jobs.emplace_back(r.trial_id, r.job_id); }
};

}  // namespace tune::exec
