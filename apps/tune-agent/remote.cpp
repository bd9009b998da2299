#include "remote.hpp"

#include "agent/dir_changes.hpp"
#include "events.hpp"
#include "fork_supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace tune::agent_app {

using nlohmann::json;

namespace {

// How long a launch waits for the attempt log's lock.
constexpr int kLockWaitMs = 10000;

// mkdir -p: 0 or the errno of the first part that could not be made.
int make_dirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at < dir.size() && dir[at] != '/') continue;
    std::string part = dir.substr(0, at);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) return errno;  // (the umask's)
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// This process's environment with `extra` ("K=V") added, a K of extra replacing its own.
std::vector<std::string> merged_environment(const std::vector<std::string>& extra) {
  std::set<std::string> keys;
  for (const auto& e : extra) keys.insert(e.substr(0, e.find('=')));
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    if (!keys.count(entry.substr(0, entry.find('=')))) out.push_back(std::move(entry));
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

}  // namespace

void RemoteLauncher::handle(const std::string& line) {
  auto req = json::parse(line, nullptr, false);
  auto found = req.is_object() ? req.find("op") : req.end();
  std::string op = found != req.end() && found->is_string() ? found->get<std::string>() : "";
  if (op == "launch") return launch(req);
  if (op == "watch") return watch(req);
  if (op == "adopt" || op == "rm") return file_ops_.request(req);
  if (op == "signal") return signal(req);
  if (op == "stdin") return stdin_.request(req);
  emit_error("not a request: " + line.substr(0, 200), op);
}

void RemoteLauncher::watch(const json& req) {
  std::string id, dir;
  int attempt = 0, supervisor = 0;
  uint64_t started = 0;
  Watches::Read read;
  try {
    id = req.at("id").get<std::string>();
    attempt = req.at("attempt").get<int>();
    dir = req.at("dir").get<std::string>();
    supervisor = req.at("supervisor").get<int>();
    if (req.contains("supervisor_started")) started = req.at("supervisor_started").get<uint64_t>();
    // (where the driver has read its files to: its output events carry the bytes after)
    if (req.contains("offset")) read.output = req.at("offset").get<int64_t>();
    if (req.contains("times_offset")) read.times = req.at("times_offset").get<int64_t>();
  } catch (const std::exception& e) {
    return emit_error(std::string("bad watch request: ") + e.what(), "watch", id);
  }
  if (supervisor <= 0 || dir.empty() || dir[0] != '/')
    return emit_error("bad watch request: no supervisor, or a trial dir that is not absolute",
                      "watch", id);
  bool gone = false;
  if (read.output < 0 || read.times < 0) read = {};
  std::string why = watches_.watch(id, attempt, dir, supervisor, started, gone, read);
  if (gone)
    emit(json{{"event", "gone"},
              {"id", id},
              {"attempt", attempt},
              {"supervisor", supervisor},
              {"status", -1}});
  else if (!why.empty())
    emit(json{{"event", "unwatched"}, {"id", id}, {"attempt", attempt}, {"error", why}});
  else
    emit(json{{"event", "watching"}, {"id", id}, {"attempt", attempt}});
}

void RemoteLauncher::signal(const json& req) {
  std::string id;
  int attempt = 0, supervisor = 0;
  bool now = false;
  try {
    id = req.at("id").get<std::string>();
    attempt = req.at("attempt").get<int>();
    supervisor = req.at("supervisor").get<int>();
    now = req.at("now").get<bool>();
  } catch (const std::exception& e) {
    return emit_error(std::string("bad signal request: ") + e.what(), "signal", id, attempt);
  }
  int sig = now ? SIGUSR1 : SIGTERM;  // (supervise.hpp: USR1 kills the trial at once)
  // A child of this agent: its pid is not reused before it is reaped here.
  if (auto c = children_.find(supervisor); supervisor > 0 && c != children_.end() &&
                                           c->second.id == id && c->second.attempt == attempt) {
    ::kill(supervisor, sig);
    ::kill(supervisor, SIGCONT);  // (a stopped one takes it too)
    return;
  }
  if (supervisor > 0 && watches_.signal(id, attempt, supervisor, sig)) {
    (void)watches_.signal(id, attempt, supervisor, SIGCONT);
    return;
  }
  emit_error("no supervisor " + std::to_string(supervisor) + " of attempt " +
                 std::to_string(attempt) + " here",
             "signal", id, attempt);
}

// The request's fields into `l`; false after saying what is wrong.
bool RemoteLauncher::parse(const json& req, Request& l) {
  try {
    l.id = req.at("id").get<std::string>();
    l.attempt = req.at("attempt").get<int>();
    l.a.dir = req.at("dir").get<std::string>();
    l.record = req.at("record").get<std::string>();
    l.a.nonce = req.at("nonce").get<std::string>();
    l.a.lease = req.at("lease").get<std::string>();
    l.a.orphan_timeout = req.at("orphan_timeout").get<double>();
    l.a.grace = req.at("grace").get<double>();
    l.a.cwd = req.at("cwd").get<std::string>();
    l.a.use_fifo = req.at("fifo").get<bool>();
    l.args = req.at("argv").get<std::vector<std::string>>();
    l.env = req.at("env").get<std::vector<std::string>>();
    if (auto p = req.find("params"); p != req.end()) l.params = p->get<std::string>();
    if (auto c = req.find("changes_at_exit"); c != req.end()) l.changes_at_exit = c->get<bool>();
    if (l.args.empty()) throw std::runtime_error("empty argv");
    if (l.attempt < 1) throw std::runtime_error("attempt " + std::to_string(l.attempt));
    // (a nonce nobody could check would make its exit record one nobody believes)
    if (l.a.nonce.empty() || l.a.nonce.size() > 64 ||
        l.a.nonce.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw std::runtime_error("the nonce is not 1 to 64 hex digits");
  } catch (const std::exception& e) {
    emit_error(std::string("bad launch request: ") + e.what(), "launch", l.id);
    return false;
  }
  l.a.id = l.id;
  l.a.attempt = std::to_string(l.attempt);
  l.a.params_json = l.params ? &*l.params : nullptr;
  return true;
}

// The attempt log's lock, for one launch: "" once taken (or on a file system without flock,
// where the launch goes on all the same), else why not. A resume's read holds it for a moment;
// an agent of another connection of the driver for one launch.
std::string RemoteLauncher::lock_log(bool& locked) {
  auto got = wait_for_flock(lock_fd_, kLockWaitMs);
  locked = got == FlockWait::kLocked;
  if (got != FlockWait::kHeld) return "";
  return "another process" + flock_holder_text(lock_path_) + " has held " + lock_path_ + " for " +
         std::to_string(kLockWaitMs / 1000) + " s";
}

void RemoteLauncher::launch(const json& req) {
  Request l;
  if (!parse(req, l)) return;
  // Not started; `transient`: the supervisor could not be started now (fork, the log's lock),
  // as opposed to a trial dir that cannot be made.
  auto gone = [&](const std::string& why, bool transient = false) {
    emit(json{{"event", "gone"},
              {"id", l.id},
              {"attempt", l.attempt},
              {"supervisor", nullptr},
              {"status", -1},
              {"transient", transient},
              {"error", why}});
  };
  // Held from here until the supervisor is in the log (by the child, if this agent is killed
  // meanwhile): a resume that reads the log under it never misses this launch.
  bool locked = false;
  if (auto why = lock_log(locked); !why.empty()) return gone(why, true);
  struct Unlock {
    int fd;
    bool locked;
    ~Unlock() {
      if (locked) ::flock(fd, LOCK_UN);
    }
  } unlock{lock_fd_, locked};
  // A driver that is gone (its channel closed) wants nothing started: a request it sent before
  // it went must not start a supervisor that nobody watches.
  pollfd in_fd{0, POLLIN, 0};
  if (::poll(&in_fd, 1, 0) > 0 && (in_fd.revents & (POLLHUP | POLLERR)))
    return gone("the driver is gone: not started", true);
  const std::string& dir = l.a.dir;
  if (dir.empty() || dir[0] != '/') return gone("not an absolute trial dir: " + dir);
  if (int e = make_dirs(dir)) return gone("cannot make " + dir + ": " + std::strerror(e));
  if (::unlink(l.record.c_str()) != 0 && errno != ENOENT)
    return gone("cannot remove " + l.record + ": " + std::strerror(errno));
  struct stat st;
  int64_t offset = ::stat((dir + "/stdout.log").c_str(), &st) == 0 ? st.st_size : 0;
  // (its supervisor's notes start after those of the trial's earlier attempts)
  int64_t times_offset = ::stat((dir + "/stdout.times").c_str(), &st) == 0 ? st.st_size : 0;

  std::vector<std::string> envs = merged_environment(l.env);
  std::vector<char*> argv, envp;
  for (auto& w : l.args) argv.push_back(w.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  l.a.prog = argv.data();
  l.a.envp = envp.data();
  // Its output is watched from before it starts: none goes unsaid.
  bool ignored = false;
  bool watched =
      watches_.watch(l.id, l.attempt, dir, -1, 0, ignored, {offset, times_offset}).empty();
  std::string error;
  pid_t pid =
      fork_supervisor(l.a, log_fd_, relay_.write_fd(), error, l.record, locked ? lock_fd_ : -1);
  if (pid < 0) {
    watches_.unwatch(l.id, l.attempt);
    return gone(error, true);
  }
  children_[pid] = Child{l.id, l.attempt};
  if (l.changes_at_exit) look_at_exit_[{l.id, l.attempt}] = {dir, pid};
  emit(json{{"event", "launched"},
            {"id", l.id},
            {"attempt", l.attempt},
            {"supervisor", pid},
            {"offset", offset},
            {"times_offset", times_offset},
            {"watched", watched}});
}

int RemoteLauncher::timeout_ms() const {
  int64_t alive = std::max<int64_t>(0, next_alive_ms_ - monotonic_ms());
  int wait = static_cast<int>(alive);
  for (int t : {watches_.timeout_ms(), file_ops_.timeout_ms(), stdin_.timeout_ms()})
    if (t >= 0) wait = std::min(wait, t);
  return wait;
}

void RemoteLauncher::after_wait(const std::vector<pollfd>& fds, size_t first) {
  // (starts before output: the first output handed on carries its trial's pid; an attempt's
  // last output goes before its exit all the same, flush_)
  if (fds[first].revents) relay_.drain(flush_);
  watches_.after_wait(fds, first + 1);
  file_ops_.after_wait(fds);
  stdin_.after_wait(fds);
  if (int64_t now = monotonic_ms(); now >= next_alive_ms_) {
    emit(json{{"event", "alive"}});
    next_alive_ms_ = now + kAliveMs;
  }
}

void RemoteLauncher::before_exit(const std::string& id, int attempt) {
  watches_.flush(id, attempt);
  auto look = look_at_exit_.find({id, attempt});
  if (look == look_at_exit_.end()) return;
  auto [dir, supervisor] = look->second;
  look_at_exit_.erase(look);  // (once: an exit line said again is relayed alone)
  emit(json{{"event", "changes"},
            {"id", id},
            {"attempt", attempt},
            {"supervisor", supervisor},
            {"answer", tune::agent::dir_changes(dir)}});
}

void RemoteLauncher::reap() {
  // (a supervisor's exit event before its "gone": the pipe is read after it was reaped)
  auto other = [this](pid_t pid, int status) { file_ops_.reaped(pid, status); };
  for (const auto& c : reap_children(
           children_, [this] { relay_.drain(flush_); }, other)) {
    watches_.unwatch(c.id, c.attempt);
    stdin_.forget(c.id, c.attempt);
    look_at_exit_.erase({c.id, c.attempt});
  }
}

}  // namespace tune::agent_app
