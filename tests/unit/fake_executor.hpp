// A scripted Executor for controller tests: no processes, a fake clock, real files only where
// the controller itself writes them. Each launch gets a FakeProcess that reacts to start,
// stdin lines, stop requests and the passage of time.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/executor.hpp"

namespace tune::testing {

class FakeExecutor;

// What a scripted trial can do through its context.
struct FakeContext {
  FakeExecutor* ex;
  exec::Launch launch;
  bool alive = true;
  void print(const std::string& line);       // one stdout line
  void print_raw(const std::string& bytes);  // arbitrary stdout bytes
  // Stdout bytes with the host's notes of when they arrived (exec/arrivals.hpp).
  void print_noted(const std::string& bytes, std::vector<exec::Arrival> arrivals,
                   std::optional<exec::HostTime> started = std::nullopt);
  void exit(int code, const std::string& error = "",
            exec::ExitReason reason = exec::ExitReason::kExited);
  void killed(int signal);
  // A real directory inside the trial dir, e.g. for a function-mode checkpoint.
  std::string make_dir(const std::string& name) const;
  const std::string& env(const std::string& key) const { return launch.env.at(key); }
  bool has_env(const std::string& key) const { return launch.env.count(key) != 0; }
};

class FakeProcess {
 public:
  virtual ~FakeProcess() = default;
  virtual void on_start(FakeContext&) {}
  virtual void on_stdin(FakeContext&, const std::string& line) { (void)line; }
  // Default: SIGTERM ends the process (signal 15), kill-now with 9.
  virtual void on_stop(FakeContext& c, bool now) { c.killed(now ? 9 : 15); }
  virtual void on_tick(FakeContext&, double now) { (void)now; }
  // Re-attached by a new driver (the process was created by the factory for `launch`).
  virtual void on_attach(FakeContext&) {}
};

using ProcessFactory = std::function<std::unique_ptr<FakeProcess>(const exec::Launch&)>;

class FakeExecutor final : public exec::Executor {
 public:
  explicit FakeExecutor(ProcessFactory factory) : factory_(std::move(factory)) {}

  Result<void> start(const exec::Launch& l) override {
    if (auto made = exec::prepare_trial_dir(l); !made) return made;
    clock_ += start_cost;  // what starting a process costs the loop (default: nothing)
    launches.push_back(l);
    auto& slot = procs_[l.trial_id];
    slot.ctx = std::make_unique<FakeContext>(FakeContext{this, l});
    slot.proc = factory_(l);
    slot.proc->on_start(*slot.ctx);
    return {};
  }
  // What attach() finds; default: nothing (kGone).
  std::function<exec::Attached(const exec::Launch&)> on_attach;
  Result<exec::Attached> attach(const exec::Launch& l) override {
    attaches.push_back(l);
    auto found = on_attach ? on_attach(l) : exec::Attached::kGone;
    if (found != exec::Attached::kGone) {
      auto& slot = procs_[l.trial_id];
      slot.ctx = std::make_unique<FakeContext>(FakeContext{this, l});
      slot.proc = factory_(l);
      slot.proc->on_attach(*slot.ctx);
    }
    return found;
  }
  void send(const std::string& id, std::string_view line) override {
    stdin_log[id].push_back(std::string(line));
    auto it = procs_.find(id);
    if (it != procs_.end() && it->second.ctx->alive)
      it->second.proc->on_stdin(*it->second.ctx, std::string(line));
  }
  void stop(const std::string& id, bool now) override {
    stops.push_back({id, now});
    auto it = procs_.find(id);
    if (it != procs_.end() && it->second.ctx->alive) it->second.proc->on_stop(*it->second.ctx, now);
  }
  std::vector<exec::Event> wait(double timeout) override {
    if (queue_.empty()) {
      // Nothing pending: time passes, then scripted processes and interrupts get their tick.
      clock_ += std::max(timeout, 0.001);
      for (auto& [id, p] : procs_)
        if (p.ctx->alive) p.proc->on_tick(*p.ctx, clock_);
      for (auto it = interrupts_.begin(); it != interrupts_.end();) {
        if (*it <= clock_) {
          std::vector<exec::Event> first;  // interrupts go first, as the real executor returns them
          first.emplace_back(std::in_place_type<exec::InterruptEvent>, exec::InterruptEvent{2});
          for (auto& e : queue_) first.push_back(std::move(e));
          queue_ = std::move(first);
          it = interrupts_.erase(it);
        } else {
          ++it;
        }
      }
    }
    ++waits;
    launches_at_wait.push_back(launches.size());
    return std::exchange(queue_, {});
  }
  std::optional<int> pid(const std::string&) override { return 4242; }
  double now() override { return clock_; }
  double wall_time() override { return 1.7e9 + clock_; }
  std::string host_name() override { return "fakehost"; }
  void renew_lease() override { ++lease_renewals; }
  // What adopt_task() returns: a task the controller runs on its file worker, as for a remote
  // host. Default: none, and the controller calls adopt() on the loop.
  std::function<std::function<Result<void>()>(
      const std::string& reported, const std::filesystem::path& cwd,
      const std::filesystem::path& head_trial_dir, const std::string& dest)>
      on_adopt_task;
  std::function<Result<void>()> adopt_task(const std::string&, const std::string& reported,
                                           const std::filesystem::path& cwd,
                                           const std::filesystem::path& head_trial_dir,
                                           const std::string& dest) override {
    if (!on_adopt_task) return {};
    return on_adopt_task(reported, cwd, head_trial_dir, dest);
  }

  void interrupt_at(double t) { interrupts_.push_back(t); }
  // Constructs the event in place (a by-value variant here trips a GCC 12 false warning).
  template <typename E>
  void push(E&& e) {
    queue_.emplace_back(std::forward<E>(e));
  }

  std::vector<exec::Launch> launches;
  std::vector<exec::Launch> attaches;
  std::vector<std::pair<std::string, bool>> stops;
  std::map<std::string, std::vector<std::string>> stdin_log;
  int waits = 0;
  int lease_renewals = 0;
  double start_cost = 0;                 // fake seconds each start() takes
  std::vector<size_t> launches_at_wait;  // launches made before each wait()

 private:
  struct Slot {
    std::unique_ptr<FakeContext> ctx;
    std::unique_ptr<FakeProcess> proc;
  };
  ProcessFactory factory_;
  std::map<std::string, Slot> procs_;
  std::vector<exec::Event> queue_;
  std::vector<double> interrupts_;
  double clock_ = 1000;
};

inline void FakeContext::print(const std::string& line) {
  print_raw(line + "\n");
}
inline void FakeContext::print_raw(const std::string& bytes) {
  if (alive) ex->push(exec::OutputEvent(launch.trial_id, bytes));
}
inline void FakeContext::print_noted(const std::string& bytes, std::vector<exec::Arrival> arrivals,
                                     std::optional<exec::HostTime> started) {
  if (!alive) return;
  exec::OutputEvent ev(launch.trial_id, bytes);
  ev.arrivals = std::move(arrivals);
  ev.started = started;
  ex->push(std::move(ev));
}
inline void FakeContext::exit(int code, const std::string& error, exec::ExitReason reason) {
  if (!alive) return;
  alive = false;
  exec::ExitInfo info;
  info.attempt = launch.attempt;
  info.exit_code = code;
  info.reason = reason;
  info.error = error;
  ex->push(exec::ExitEvent{launch.trial_id, info});
}
inline void FakeContext::killed(int signal) {
  if (!alive) return;
  alive = false;
  exec::ExitInfo info;
  info.attempt = launch.attempt;
  info.signal = signal;
  info.reason = exec::ExitReason::kDriverStop;
  ex->push(exec::ExitEvent{launch.trial_id, info});
}
inline std::string FakeContext::make_dir(const std::string& name) const {
  auto p = launch.trial_dir / name;
  std::filesystem::create_directories(p);
  std::ofstream(p / "state.txt") << name;
  return p.string();
}

// A scratch directory per test case, removed afterwards.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    char tmpl[] = "/tmp/tune-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace tune::testing
