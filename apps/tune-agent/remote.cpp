#include "remote.hpp"

#include "agent/dir_lock.hpp"
#include "events.hpp"
#include "fork_supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
  emit_error("not a request: " + line.substr(0, 200), op);
}

void RemoteLauncher::watch(const json& req) {
  std::string id, dir;
  int attempt = 0, supervisor = 0;
  try {
    id = req.at("id").get<std::string>();
    attempt = req.at("attempt").get<int>();
    dir = req.at("dir").get<std::string>();
    supervisor = req.at("supervisor").get<int>();
  } catch (const std::exception& e) {
    return emit_error(std::string("bad watch request: ") + e.what(), "watch", id);
  }
  if (supervisor <= 0 || dir.empty() || dir[0] != '/')
    return emit_error("bad watch request: no supervisor, or a trial dir that is not absolute",
                      "watch", id);
  bool gone = false;
  std::string why = watches_.watch(id, attempt, dir, supervisor, gone);
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

void RemoteLauncher::launch(const json& req) {
  std::string id, record;
  int attempt = 0;
  tune::agent::Attempt a;
  std::vector<std::string> args, env;
  try {
    id = req.at("id").get<std::string>();
    attempt = req.at("attempt").get<int>();
    a.dir = req.at("dir").get<std::string>();
    record = req.at("record").get<std::string>();
    a.nonce = req.at("nonce").get<std::string>();
    a.lease = req.at("lease").get<std::string>();
    a.orphan_timeout = req.at("orphan_timeout").get<double>();
    a.grace = req.at("grace").get<double>();
    a.cwd = req.at("cwd").get<std::string>();
    a.use_fifo = req.at("fifo").get<bool>();
    args = req.at("argv").get<std::vector<std::string>>();
    env = req.at("env").get<std::vector<std::string>>();
    if (args.empty()) throw std::runtime_error("empty argv");
    if (attempt < 1) throw std::runtime_error("attempt " + std::to_string(attempt));
    // (a nonce nobody could check would make its exit record one nobody believes)
    if (a.nonce.empty() || a.nonce.size() > 64 ||
        a.nonce.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw std::runtime_error("the nonce is not 1 to 64 hex digits");
  } catch (const std::exception& e) {
    emit_error(std::string("bad launch request: ") + e.what(), "launch", id);
    return;
  }
  a.id = id;
  a.attempt = std::to_string(attempt);
  // Not started; `transient`: the supervisor could not be started now (fork), as opposed to
  // a trial dir that cannot be made.
  auto gone = [&](const std::string& why, bool transient = false) {
    emit(json{{"event", "gone"},
              {"id", id},
              {"attempt", attempt},
              {"supervisor", nullptr},
              {"status", -1},
              {"transient", transient},
              {"error", why}});
  };
  // A driver that is gone (its channel closed) wants nothing started: a request it sent before
  // it went must not start a supervisor that nobody watches.
  pollfd in_fd{0, POLLIN, 0};
  if (::poll(&in_fd, 1, 0) > 0 && (in_fd.revents & (POLLHUP | POLLERR)))
    return gone("the driver is gone: not started", true);
  const std::string& dir = a.dir;
  if (dir.empty() || dir[0] != '/') return gone("not an absolute trial dir: " + dir);
  if (int e = make_dirs(dir)) return gone("cannot make " + dir + ": " + std::strerror(e));
  if (::unlink(record.c_str()) != 0 && errno != ENOENT)
    return gone("cannot remove " + record + ": " + std::strerror(errno));
  struct stat st;
  uint64_t offset = ::stat((dir + "/stdout.log").c_str(), &st) == 0 ? st.st_size : 0;

  std::vector<std::string> envs = merged_environment(env);
  std::vector<char*> argv, envp;
  for (auto& w : args) argv.push_back(w.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  a.prog = argv.data();
  a.envp = envp.data();
  // Its output is watched from before it starts: none goes unsaid.
  bool ignored = false;
  bool watched = watches_.watch(id, attempt, dir, -1, ignored).empty();
  // (a reader holds it for a moment; an agent of another driver's connection for one launch)
  // (a file system without flock: launched all the same)
  bool locked = false, held = false;
  for (int waited_ms = 0; !locked && waited_ms <= kLockWaitMs; waited_ms += 10) {
    locked = ::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0;
    held = !locked && (errno == EWOULDBLOCK || errno == EINTR);
    if (!held) break;
    ::usleep(10000);
  }
  if (held) {
    watches_.unwatch(id, attempt);
    return gone("another process (pid " + std::to_string(tune::agent::flock_holder(lock_path_)) +
                    ") has held " + lock_path_ + " for " + std::to_string(kLockWaitMs / 1000) +
                    " s",
                true);
  }
  std::string error;
  pid_t pid = fork_supervisor(a, log_fd_, false, error, record);
  if (locked) ::flock(lock_fd_, LOCK_UN);
  if (pid < 0) {
    watches_.unwatch(id, attempt);
    return gone(error, true);
  }
  children_[pid] = Child{id, attempt};
  emit(json{{"event", "launched"},
            {"id", id},
            {"attempt", attempt},
            {"supervisor", pid},
            {"offset", offset},
            {"watched", watched}});
}

void RemoteLauncher::reap() {
  for (const auto& c : reap_children(children_)) watches_.unwatch(c.id, c.attempt);
}

}  // namespace tune::agent_app
