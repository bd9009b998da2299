// `tune stop`: stops a running experiment through its driver, or its detached trials when no
// driver runs, or one trial (--trial: through the running driver, which stops it as a
// scheduler would, or by ending its detached attempt; TERMINATED either way, and a resume keeps
// it so); what stopped otherwise resumes with `tune run ... --resume=auto`.
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <thread>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "control/stop_requests.hpp"
#include "exec/attempt_log.hpp"
#include "exec/local_executor.hpp"
#include "state/state.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::cli {

namespace {

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// Polls `done` every 50 ms until it holds or `timeout_s` passed; returns whether it held.
template <typename Pred>
bool wait_until(Pred done, double timeout_s) {
  double end = now_s() + timeout_s;
  while (!done()) {
    if (now_s() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

bool pid_alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

// The trial named by id or name; throws naming the experiment if there is none.
const trial::Trial& find_trial(const state::ExperimentState& state, const std::string& which) {
  auto t = std::find_if(state.trials.begin(), state.trials.end(),
                        [&](const trial::Trial& x) { return x.id == which || x.name == which; });
  if (t == state.trials.end())
    throw Fatal("no trial '" + util::printable(which, 80) + "' in experiment '" + state.name + "'");
  return *t;
}

}  // namespace

int StopCommand::stop_one_trial(const fs::path& dir, const std::string& driver_pid) {
  auto state = load_state_or_throw(dir);
  const trial::Trial& t = find_trial(state, *trial_);
  if (t.finished()) {
    std::cout << "trial " << t.name << " has ended already (" << trial::status_name(t.status)
              << ")\n";
    return kExitOk;
  }
  // The driver looks for the request once a second and removes it once it acted on it.
  if (auto r = control::write_stop_request(dir, t.id); !r) throw Fatal(r.error().message);
  std::cerr << "tune: asking the driver of '" << dir.filename().string() << "' (pid " << driver_pid
            << ") to stop trial " << t.name << "\n";
  std::string id = t.id, name = t.name;
  auto ended = [&] {
    if (control::stop_requested(dir, id)) return false;
    auto now = state::load(dir);
    if (!now) return false;
    auto it = std::find_if(now->trials.begin(), now->trials.end(),
                           [&](const trial::Trial& x) { return x.id == id; });
    return it == now->trials.end() || it->finished();
  };
  if (!wait_until([&] { return ended() || !probe_driver(dir).alive; }, timeout_s_))
    throw Fatal("trial " + name + " still runs after " + util::format_double(timeout_s_) +
                    " s (the driver stops it after the command in flight, or its grace period)",
                kExitTrialError);
  if (!ended()) {
    std::cout << "the driver ended before trial " << name
              << " was stopped: it is stopped (TERMINATED) when the experiment resumes: "
              << resume_command(dir) << "\n";
    return kExitOk;
  }
  std::cout << "stopped trial " << name << " (TERMINATED); the other trials run on\n";
  return kExitOk;
}

void StopCommand::add_options(CLI::App& app) {
  add_experiment_options(app, experiment_, storage_);
  app.add_option("--trial", trial_,
                 "only this trial (id or name): it ends TERMINATED, the others run on");
  app.add_option("--timeout", timeout_s_, "seconds to wait for it to stop (default 60)")
      ->check(CLI::PositiveNumber);
}

int StopCommand::execute() {
  fs::path dir = resolve_experiment(experiment_, storage_);
  auto driver = probe_driver(dir);
  if (driver.alive) {
    if (trial_) return stop_one_trial(dir, driver.pid);
    if (driver.host != util::host_name())
      throw Fatal("the driver of '" + dir.string() + "' (pid " + driver.pid + ") runs on host " +
                  driver.host + ": run tune stop there");
    char* end = nullptr;
    long pid = std::strtol(driver.pid.c_str(), &end, 10);
    if (end == driver.pid.c_str() || *end || pid <= 1)
      throw Fatal("cannot tell the driver's pid from '" + (dir / ".tune" / "lock").string() + "'");
    // What Ctrl-C does: stop launching, stop the trials, save the state, exit 130.
    if (::kill(static_cast<pid_t>(pid), SIGINT) != 0)
      throw Fatal("cannot signal the driver (pid " + driver.pid + "): " + std::strerror(errno));
    std::cerr << "tune: stopping the driver of '" << dir.filename().string() << "' (pid " << pid
              << ")\n";
    if (!wait_until([&] { return !probe_driver(dir).alive; }, timeout_s_))
      throw Fatal("the driver (pid " + driver.pid + ") still runs after " +
                      util::format_double(timeout_s_) + " s (it may be waiting for trials to end)",
                  kExitTrialError);
  } else {
    auto state = load_state_or_throw(dir);
    std::vector<std::pair<std::string, pid_t>> targets;  // trial name, supervisor pid
    for (const auto& [key, pid] : exec::live_supervisors(dir)) {
      std::string name = key.substr(0, key.find('\0'));
      if (trial_) {
        auto t = std::find_if(state.trials.begin(), state.trials.end(),
                              [&](const trial::Trial& x) { return x.name == name; });
        if (t == state.trials.end() || (t->id != *trial_ && t->name != *trial_)) continue;
      }
      targets.emplace_back(name, pid);
    }
    if (trial_) {  // TERMINATED when the experiment resumes, not restarted
      const trial::Trial& t = find_trial(state, *trial_);
      if (t.finished()) {
        std::cout << "trial " << t.name << " has ended already (" << trial::status_name(t.status)
                  << ")\n";
        return kExitOk;
      }
      if (auto r = control::write_stop_request(dir, t.id); !r) throw Fatal(r.error().message);
    }
    if (targets.empty()) {
      if (trial_)
        std::cout << "trial " << *trial_ << " does not run: it is TERMINATED when the experiment "
                  << "resumes: " << resume_command(dir) << "\n";
      else
        std::cout << "nothing of '" << state.name << "' runs on this machine\n";
      return kExitOk;
    }
    // A supervisor stops its trial's process group (SIGTERM, then SIGKILL after its grace)
    // and records the exit as asked for: a resume continues the trial from its checkpoint.
    for (const auto& [name, pid] : targets) {
      std::cerr << "tune: stopping " << name << " (supervisor pid " << pid << ")\n";
      exec::signal_supervisor(pid, false);  // (SIGTERM, and SIGCONT if it was stopped)
    }
    bool gone = wait_until(
        [&] {
          return std::none_of(targets.begin(), targets.end(),
                              [](const auto& t) { return pid_alive(t.second); });
        },
        timeout_s_);
    if (!gone)
      throw Fatal("some trials still run after " + util::format_double(timeout_s_) + " s",
                  kExitTrialError);
  }
  std::cout << "stopped; resume with: " << resume_command(dir) << "\n";
  return kExitOk;
}

}  // namespace tune::cli
