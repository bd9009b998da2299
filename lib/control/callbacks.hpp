// callbacks: commands told about the run's events (trial_start, trial_result, trial_complete,
// trial_error, checkpoint, experiment_end), as Ray Tune's Callback hooks but out of process.
// Each call gets one JSON object on stdin. The loop only queues events: each callback has its
// own worker thread that runs its command, one call at a time, in the order of the events per
// trial. trial_result events are batched: at most one call per `result_interval_s`, carrying
// every result queued since. A call running longer than `call_timeout_s` is killed; a failing
// call is logged (with the first line of its stderr), never fatal. A full queue drops events,
// with one warning per callback, so memory stays bounded.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "control/events.hpp"

namespace tune::control {

namespace fs = std::filesystem;

struct CallbackOptions {
  double call_timeout_s = 60;
  double result_interval_s = 1;
  size_t max_queued = 10000;           // events waiting, per callback
  size_t max_queued_bytes = 64 << 20;  // their JSON, per callback
  fs::path log_dir;                    // each callback's last stdout/stderr: <N>.stdout, <N>.stderr
};

class CallbackRunner final : public RunObserver {
 public:
  // Starts one worker thread per callback of `exp` (none without callbacks).
  CallbackRunner(const spec::Experiment& exp, CallbackOptions opts);
  ~CallbackRunner() override;  // finish(0) unless done
  CallbackRunner(const CallbackRunner&) = delete;
  CallbackRunner& operator=(const CallbackRunner&) = delete;

  void on_progress(const RunSnapshot&, bool) override { flush_log(); }
  // Queues experiment_end (with the trials' counts by status).
  void on_run_end(const RunSnapshot& snap) override;
  [[nodiscard]] double seconds_until_due(double) const override;
  void on_trial_event(TrialEvent kind, const trial::Trial& t,
                      const nlohmann::json& detail) override;

  // Waits up to `timeout_s` for every queued event to be delivered; then stops what still runs
  // (said in the log, with the number of events left undelivered) and joins the threads.
  void finish(double timeout_s);
  // Logs what the worker threads noted (failures, drops); the loop's thread only.
  void flush_log();

 private:
  struct Pending {
    spec::CallbackEvent kind;
    std::string trial_id;  // "" for experiment_end
    std::shared_ptr<const std::string> text;
  };
  struct Callback {
    spec::CallbackSpec spec;
    std::string label;  // "callback 1 (notify.sh)"
    int index = 0;
    std::mutex mu;
    std::condition_variable wake, idle;
    std::deque<Pending> queue;
    size_t queued_bytes = 0;
    bool busy = false, closing = false, warned_full = false;
    std::atomic<bool> cancel{false};
    size_t dropped = 0;
    std::chrono::steady_clock::time_point next_results{};  // rate limit of trial_result calls
    std::chrono::steady_clock::time_point next_failure_log{};
    int failures_unsaid = 0;
    std::thread thread;
  };

  void queue(spec::CallbackEvent kind, const std::string& trial_id,
             const std::shared_ptr<const std::string>& text);
  void loop(Callback& cb);
  // The next call's stdin: the head event, or a batch of queued results (none of a trial
  // whose earlier non-result event is still queued); empty while a batch must wait.
  std::string next_call(Callback& cb, std::unique_lock<std::mutex>& lk, std::string& event);
  void deliver(Callback& cb, const std::string& input, const std::string& event);
  void note(std::string line, bool error);
  [[nodiscard]] nlohmann::json header(spec::CallbackEvent kind) const;

  std::string exp_name_;
  fs::path exp_dir_, cwd_;
  CallbackOptions opts_;
  std::vector<std::unique_ptr<Callback>> callbacks_;
  std::vector<bool> wanted_;  // by CallbackEvent: some callback takes it
  std::mutex log_mu_;
  std::vector<std::pair<bool, std::string>> log_;  // (error?, line), for the loop to log
  std::atomic<bool> log_waiting_{false};
  bool finished_ = false;
};

}  // namespace tune::control
