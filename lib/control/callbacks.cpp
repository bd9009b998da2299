#include "control/callbacks.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include "util/command_call.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::control {

namespace {

using spec::CallbackEvent;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

CallbackEvent callback_event(TrialEvent k) {
  switch (k) {
    case TrialEvent::kStart:
      return CallbackEvent::kTrialStart;
    case TrialEvent::kResult:
      return CallbackEvent::kTrialResult;
    case TrialEvent::kCheckpoint:
      return CallbackEvent::kCheckpoint;
    case TrialEvent::kComplete:
      return CallbackEvent::kTrialComplete;
    case TrialEvent::kError:
      return CallbackEvent::kTrialError;
  }
  return CallbackEvent::kTrialError;
}

// The first non-empty line of what a call wrote to stderr.
std::string first_line(const fs::path& file) {
  if (file.empty()) return "";
  auto text = util::read_file(file, 4096);
  if (!text) return "";
  size_t at = 0;
  while (at < text->size()) {
    size_t nl = text->find('\n', at);
    std::string_view line(text->data() + at, (nl == std::string::npos ? text->size() : nl) - at);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos)
      return util::printable(line, 200);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return "";
}

}  // namespace

CallbackRunner::CallbackRunner(const spec::Experiment& exp, CallbackOptions opts)
    : exp_name_(exp.name),
      exp_dir_(exp.dir()),
      cwd_(exp.trial.workdir),
      opts_(std::move(opts)),
      wanted_(std::size(spec::kAllCallbackEvents), false) {
  if (!opts_.log_dir.empty()) {
    std::error_code ec;
    fs::create_directories(opts_.log_dir, ec);
    if (ec) {
      spdlog::warn("callbacks: cannot create '{}': {} (their output is not kept)",
                   opts_.log_dir.string(), ec.message());
      opts_.log_dir.clear();
    }
  }
  // The worker threads take none of the driver's signals (the loop handles them).
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  int n = 0;
  for (const auto& spec : exp.callbacks) {
    auto cb = std::make_unique<Callback>();
    cb->spec = spec;
    cb->index = ++n;
    cb->label = "callback " + std::to_string(n) + " (" +
                util::printable(fs::path(spec.command[0]).filename().string(), 60) + ")";
    for (auto e : spec.on) wanted_[static_cast<size_t>(e)] = true;
    Callback& ref = *cb;
    cb->thread = std::thread([this, &ref] { loop(ref); });
    callbacks_.push_back(std::move(cb));
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

CallbackRunner::~CallbackRunner() {
  finish(0);
}

json CallbackRunner::header(CallbackEvent kind) const {
  return {{"event", spec::callback_event_name(kind)},
          {"experiment", exp_name_},
          {"experiment_dir", exp_dir_.string()},
          {"time", static_cast<double>(std::time(nullptr))}};
}

void CallbackRunner::on_trial_event(TrialEvent k, const trial::Trial& t, const json& detail) {
  CallbackEvent kind = callback_event(k);
  if (!wanted_[static_cast<size_t>(kind)]) return;
  json j;
  if (kind == CallbackEvent::kTrialResult) {  // one item of a batch
    j = {{"trial_id", t.id}, {"trial_name", t.name}, {"result", detail}};
  } else {
    j = header(kind);
    j["trial_id"] = t.id;
    j["trial_name"] = t.name;
    j["trial_dir"] = (exp_dir_ / t.name).string();
    j["status"] = trial::status_name(t.status);
    j["attempt"] = t.attempt;
    j["host"] = t.host;
    j["config"] = t.config;
    j["iteration"] = t.iteration;
    if (kind == CallbackEvent::kCheckpoint) {
      std::string name = detail.value("checkpoint", "");
      j["checkpoint"] = name;
      j["checkpoint_path"] = (exp_dir_ / t.name / name).string();
      j["iteration"] = detail.value("iteration", t.iteration);
    }
    if (kind == CallbackEvent::kTrialComplete || kind == CallbackEvent::kTrialError)
      j["last_result"] = t.last_result;
    if (kind == CallbackEvent::kTrialError) j["error"] = t.error;
  }
  queue(kind, t.id, std::make_shared<const std::string>(dump(j)));
  flush_log();
}

void CallbackRunner::on_run_end(const RunSnapshot& snap) {
  flush_log();
  if (!wanted_[static_cast<size_t>(CallbackEvent::kExperimentEnd)]) return;
  json j = header(CallbackEvent::kExperimentEnd);
  std::map<std::string, int> counts;
  for (const auto& t : snap.state.trials) ++counts[trial::status_name(t.status)];
  j["trials"] = counts;
  queue(CallbackEvent::kExperimentEnd, "", std::make_shared<const std::string>(dump(j)));
}

double CallbackRunner::seconds_until_due(double) const {
  return log_waiting_ ? 0.2 : 3600;
}

void CallbackRunner::queue(CallbackEvent kind, const std::string& trial_id,
                           const std::shared_ptr<const std::string>& text) {
  for (auto& cb : callbacks_) {
    if (std::find(cb->spec.on.begin(), cb->spec.on.end(), kind) == cb->spec.on.end()) continue;
    std::lock_guard lk(cb->mu);
    if (cb->closing) continue;
    if (cb->queue.size() >= opts_.max_queued ||
        cb->queued_bytes + text->size() > opts_.max_queued_bytes) {
      ++cb->dropped;
      if (!cb->warned_full) {
        cb->warned_full = true;
        note(cb->label + ": " + std::to_string(cb->queue.size()) +
                 " events wait for it (it is slower than the run): further events are dropped "
                 "while its queue is full",
             false);
      }
      continue;
    }
    cb->queued_bytes += text->size();
    cb->queue.push_back({kind, trial_id, text});
    cb->wake.notify_one();
  }
}

std::string CallbackRunner::next_call(Callback& cb, std::unique_lock<std::mutex>& lk,
                                      std::string& event) {
  Pending& head = cb.queue.front();
  event = spec::callback_event_name(head.kind);
  if (head.kind != CallbackEvent::kTrialResult) {
    std::string input = *head.text;
    cb.queued_bytes -= head.text->size();
    cb.queue.pop_front();
    return input;
  }
  cb.wake.wait_until(lk, cb.next_results, [&] { return cb.cancel.load(); });
  if (cb.cancel) return "";
  // Every queued result that no earlier event of its trial (or experiment_end) precedes.
  std::set<std::string> blocked;
  bool all_blocked = false;
  std::deque<Pending> rest;
  std::string items;
  for (auto& p : cb.queue) {
    if (p.kind == CallbackEvent::kTrialResult && !all_blocked && !blocked.count(p.trial_id)) {
      if (!items.empty()) items += ',';
      items += *p.text;
      cb.queued_bytes -= p.text->size();
      continue;
    }
    if (p.kind == CallbackEvent::kExperimentEnd) all_blocked = true;
    if (p.kind != CallbackEvent::kTrialResult) blocked.insert(p.trial_id);
    rest.push_back(std::move(p));
  }
  cb.queue.swap(rest);
  cb.next_results = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(opts_.result_interval_s));
  std::string batch = dump(header(CallbackEvent::kTrialResult));
  batch.pop_back();  // the closing brace
  return batch + ",\"results\":[" + items + "]}";
}

void CallbackRunner::loop(Callback& cb) {
  std::unique_lock lk(cb.mu);
  while (true) {
    cb.wake.wait(lk, [&] { return cb.cancel || !cb.queue.empty() || cb.closing; });
    if (cb.cancel || cb.queue.empty()) break;  // (empty: closing, all delivered)
    std::string event;
    std::string input = next_call(cb, lk, event);
    if (input.empty()) continue;
    cb.busy = true;
    lk.unlock();
    deliver(cb, input, event);
    lk.lock();
    cb.busy = false;
    if (cb.queue.empty()) cb.idle.notify_all();
  }
  size_t left = cb.queue.size();
  cb.queue.clear();
  cb.queued_bytes = 0;
  cb.idle.notify_all();
  if (left > 0)
    note(cb.label + ": " + std::to_string(left) +
             " events were not delivered: it was still busy when the run ended",
         false);
}

void CallbackRunner::deliver(Callback& cb, const std::string& input, const std::string& event) {
  util::CommandCall call;
  call.argv = cb.spec.command;
  call.cwd = cwd_;
  call.env = {{"TUNE_EXPERIMENT_NAME", exp_name_},
              {"TUNE_EXPERIMENT_DIR", exp_dir_.string()},
              {"TUNE_CALLBACK_EVENT", event}};
  call.input = input + "\n";
  if (!opts_.log_dir.empty()) {
    call.stdout_file = opts_.log_dir / (std::to_string(cb.index) + ".stdout");
    call.stderr_file = opts_.log_dir / (std::to_string(cb.index) + ".stderr");
  }
  call.timeout_s = opts_.call_timeout_s;
  auto out = util::run_command_call(call, cb.cancel);
  using Kind = util::CallOutcome::Kind;
  if (out.kind == Kind::kOk || out.kind == Kind::kCancelled) return;
  std::string text;
  if (out.kind == Kind::kTimedOut) {
    text = cb.label + " ran longer than " + util::format_double(opts_.call_timeout_s) + " s on " +
           event + ": killed";
  } else if (out.kind == Kind::kNotStarted) {
    text = cb.label + " could not start on " + event + ": '" +
           util::printable(cb.spec.command[0], 100) + "': " + out.detail;
  } else {
    text = cb.label + " failed on " + event + " (" + out.detail + ")";
    if (auto line = first_line(call.stderr_file); !line.empty()) text += ": " + line;
  }
  // A callback that fails on every call is said at most every 30 s.
  auto now = Clock::now();
  std::lock_guard lk(cb.mu);
  if (now < cb.next_failure_log) {
    ++cb.failures_unsaid;
    return;
  }
  if (cb.failures_unsaid > 0)
    text += " (and " + std::to_string(cb.failures_unsaid) + " earlier failures not shown)";
  cb.failures_unsaid = 0;
  cb.next_failure_log = now + std::chrono::seconds(30);
  note(text + " [callbacks are never fatal; the run goes on]", true);
}

void CallbackRunner::note(std::string line, bool error) {
  std::lock_guard lk(log_mu_);
  log_.emplace_back(error, std::move(line));
  log_waiting_ = true;
}

void CallbackRunner::flush_log() {
  if (!log_waiting_) return;
  std::vector<std::pair<bool, std::string>> lines;
  {
    std::lock_guard lk(log_mu_);
    lines.swap(log_);
    log_waiting_ = false;
  }
  for (const auto& [error, line] : lines) {
    if (error)
      spdlog::error("{}", line);
    else
      spdlog::warn("{}", line);
  }
}

void CallbackRunner::finish(double timeout_s) {
  if (finished_) return;
  finished_ = true;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(std::max(0.0, timeout_s)));
  for (auto& cb : callbacks_) {
    std::lock_guard lk(cb->mu);
    cb->closing = true;
    cb->wake.notify_all();
  }
  for (auto& cb : callbacks_) {
    std::unique_lock lk(cb->mu);
    if ((!cb->queue.empty() || cb->busy) && timeout_s > 0)
      spdlog::info("{}: delivering its last {} event(s) (waiting up to {} s)", cb->label,
                   cb->queue.size() + (cb->busy ? 1 : 0), util::format_double(timeout_s));
    if (!cb->idle.wait_until(lk, deadline, [&] { return cb->queue.empty() && !cb->busy; })) {
      cb->cancel = true;
      cb->wake.notify_all();
    }
  }
  for (auto& cb : callbacks_) {
    {
      std::lock_guard lk(cb->mu);
      cb->cancel = true;  // (idle by now, or told to stop)
      cb->wake.notify_all();
    }
    if (cb->thread.joinable()) cb->thread.join();
    if (cb->dropped > 0)
      note(cb->label + ": " + std::to_string(cb->dropped) +
               " events were dropped in all while its queue was full",
           false);
  }
  flush_log();
}

}  // namespace tune::control
