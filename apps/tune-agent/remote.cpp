#include "remote.hpp"

#include "events.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

extern char** environ;

namespace tune::agent_app {

using nlohmann::json;

namespace {

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

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
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
  std::string id, dir, record, nonce;
  int attempt = 0;
  std::vector<std::string> args, env;
  try {
    id = req.at("id").get<std::string>();
    attempt = req.at("attempt").get<int>();
    dir = req.at("dir").get<std::string>();
    record = req.at("record").get<std::string>();
    nonce = req.at("nonce").get<std::string>();
    args = req.at("argv").get<std::vector<std::string>>();
    env = req.at("env").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    emit_error(std::string("bad launch request: ") + e.what(), "launch", id);
    return;
  }
  // Not started; `transient`: the supervisor could not be started now (fork, exec), as
  // opposed to a trial dir that cannot be made.
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
  if (dir.empty() || dir[0] != '/') return gone("not an absolute trial dir: " + dir);
  if (int e = make_dirs(dir)) return gone("cannot make " + dir + ": " + std::strerror(e));
  if (::unlink(record.c_str()) != 0 && errno != ENOENT)
    return gone("cannot remove " + record + ": " + std::strerror(errno));
  struct stat st;
  uint64_t offset = ::stat((dir + "/stdout.log").c_str(), &st) == 0 ? st.st_size : 0;

  std::vector<std::string> envs = merged_environment(env);
  std::vector<char*> argv{supervisor_.data()}, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  int in[2], failed[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return gone(std::string("pipe: ") + std::strerror(errno), true);
  if (::pipe2(failed, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    return gone(std::string("pipe: ") + std::strerror(errno), true);
  }
  // Its output is watched from before it starts: none goes unsaid.
  bool ignored = false;
  bool watched = watches_.watch(id, attempt, dir, -1, ignored).empty();
  pid_t pid = ::fork();
  if (pid == 0) {
    // The supervisor: its own session (it also makes one), the nonce on stdin, no output here
    // (the channel is the agent's), no signal blocked or ignored.
    ::setsid();
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(in[0], 0);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    if (null_fd > 2) ::close(null_fd);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!::write(failed[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(failed[1]);
  if (pid < 0) {
    int e = errno;
    ::close(in[1]), ::close(failed[0]);
    watches_.unwatch(id, attempt);
    return gone(std::string("fork failed: ") + std::strerror(e), true);
  }
  write_all(in[1], nonce + "\n");
  ::close(in[1]);
  int e = 0;
  ssize_t n;
  while ((n = ::read(failed[0], &e, sizeof e)) < 0 && errno == EINTR) {
  }
  ::close(failed[0]);
  if (n == static_cast<ssize_t>(sizeof e)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    watches_.unwatch(id, attempt);
    return gone("cannot run " + supervisor_ + ": " + std::strerror(e), true);
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
