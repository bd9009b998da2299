#include "exec/attempt_log.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/process.hpp"

namespace tune::exec {

namespace {

constexpr size_t kMaxLine = 64 * 1024;  // a longer line is not the supervisor's

std::string key(std::string_view name, int attempt) {
  return std::string(name) + '\0' + std::to_string(attempt);
}

}  // namespace

void signal_supervisor(int pid, bool now) {
  ::kill(pid, now ? SIGUSR1 : SIGTERM);
  // A supervisor somebody stopped (SIGSTOP, a debugger) acts on it only once continued: a stop
  // would otherwise wait for it for ever.
  ::kill(pid, SIGCONT);
}

bool stat_fits_supervisor(const util::ProcStat& st, int pid, uint64_t ticks) {
  return pid > 0 && ticks != 0 && st.state != 'Z' && st.state != 'X' &&  // (ended, not reaped)
         st.session == pid &&  // a supervisor leads its session
         st.start == ticks;    // (else the pid was reused)
}

bool supervisor_alive(int pid, uint64_t ticks) {
  if (pid <= 0 || ticks == 0) return false;
  auto st = util::proc_stat(pid);
  if (!st) return false;
  if (!stat_fits_supervisor(*st, pid, ticks)) return false;
  // and it is a tune-agent process (a line naming the user's editor is not believed): by its
  // executable where that can be read, else by its name. A supervisor is not dumpable (its
  // nonce), and the kernel lets only root read such a process's exe link, even to its own
  // user; its name (in stat, readable to all) is the agent's, which it forked from.
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).filename().string();
  if (!ec) return exe.starts_with("tune-agent");
  if (ec != std::errc::permission_denied && ec != std::errc::operation_not_permitted) return false;
  return st->comm == "tune-agent";
}

void AttemptLog::refresh() {
  int fd = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // (the driver refuses to run with one)
    ::close(fd);
    return;
  }
  std::string pending;
  char buf[65536];
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(offset_ + pending.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      if (nl - start <= kMaxLine) add(std::string_view(pending).substr(start, nl - start));
    offset_ += start;
    pending.erase(0, start);
    if (pending.size() > kMaxLine) {  // no newline for too long: skip what was read
      offset_ += pending.size();
      pending.clear();
    }
  }
  ::close(fd);
}

void AttemptLog::add(std::string_view line) {
  auto j = util::parse_json_ext(line);
  if (!j.is_object()) return;
  auto trial = j.find("trial");
  auto attempt = j.find("attempt");
  auto event = j.find("event");
  if (trial == j.end() || !trial->is_string() || attempt == j.end() ||
      !attempt->is_number_integer() || event == j.end() || !event->is_string())
    return;
  auto num = [&](const char* k) -> std::optional<uint64_t> {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<uint64_t>();
  };
  if (*event == "start" || *event == "supervising") {
    auto sup = num("supervisor"), pid = num("pid");
    if (!sup || *sup == 0 || *sup > INT32_MAX || (pid && *pid > INT32_MAX)) return;
    if (*event == "start" && !pid) return;
    auto& a = by_attempt_[key(trial->get<std::string>(), attempt->get<int>())];
    a.supervisor = static_cast<int>(*sup);
    a.supervisor_started = num("supervisor_started").value_or(0);
    if (*event == "supervising")
      a.stdout_from = num("stdout_from"), a.times_from = num("times_from");
    if (pid) {
      a.pid = static_cast<int>(*pid);
      a.started = num("started").value_or(0);
    }
  } else if (*event == "exit") {
    by_attempt_[key(trial->get<std::string>(), attempt->get<int>())].exit = std::string(line);
  }
}

void AttemptLog::add_lines(std::string_view text) {
  for (size_t start = 0, nl; (nl = text.find('\n', start)) != std::string_view::npos;
       start = nl + 1)
    if (nl - start <= kMaxLine) add(text.substr(start, nl - start));
}

const LoggedAttempt* AttemptLog::find(std::string_view trial_name, int attempt) const {
  auto it = by_attempt_.find(key(trial_name, attempt));
  return it == by_attempt_.end() ? nullptr : &it->second;
}

std::vector<LiveAttempt> live_attempts(const AttemptLog& log) {
  return live_attempts(log, supervisor_alive);
}

std::vector<LiveAttempt> live_attempts(const AttemptLog& log, const AttemptLog::Alive& alive) {
  std::vector<LiveAttempt> out;
  for (const auto& [key, pid] : log.live(alive)) {
    size_t nul = key.find('\0');
    if (nul == std::string::npos) continue;
    LiveAttempt a;
    a.trial_name = key.substr(0, nul);
    a.attempt = std::atoi(key.c_str() + nul + 1);
    const LoggedAttempt* logged = log.find(a.trial_name, a.attempt);
    if (!logged || a.attempt <= 0) continue;
    a.supervisor = pid;
    a.supervisor_started = logged->supervisor_started;
    a.stdout_from = logged->stdout_from;
    a.times_from = logged->times_from;
    out.push_back(std::move(a));
  }
  return out;
}

void end_local_attempts(const std::vector<LiveAttempt>& which, double grace_s) {
  auto running = [&] {
    size_t n = 0;
    for (const auto& a : which) n += supervisor_alive(a.supervisor, a.supervisor_started);
    return n;
  };
  auto signal_all = [&](int sig) {
    for (const auto& a : which)
      if (supervisor_alive(a.supervisor, a.supervisor_started))
        signal_supervisor(a.supervisor, sig == SIGUSR1);
  };
  auto wait_until = [&](double seconds) {
    for (double waited = 0; running() > 0 && waited < seconds; waited += 0.05) {
      timespec ts{0, 50'000'000};
      ::nanosleep(&ts, nullptr);
    }
  };
  signal_all(SIGTERM);
  wait_until(grace_s + 5);
  signal_all(SIGUSR1);  // the supervisor kills its trial at once
  wait_until(5);
  if (size_t left = running())
    spdlog::warn("{} attempt(s) of an earlier driver still run after SIGTERM and SIGUSR1", left);
}

std::unordered_map<std::string, int> AttemptLog::live() const {
  return live(supervisor_alive);
}

std::unordered_map<std::string, int> AttemptLog::live(const Alive& alive) const {
  std::unordered_map<std::string, int> out;
  for (const auto& [k, a] : by_attempt_)
    if (a.supervisor && alive(*a.supervisor, a.supervisor_started)) out[k] = *a.supervisor;
  return out;
}

}  // namespace tune::exec
