#include "util/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/fs.hpp"
#include "util/strings.hpp"

extern char** environ;

namespace tune::util {

void init_spawn_attrs(posix_spawnattr_t& attr, short flags) {
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(
      &attr, static_cast<short>(flags | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));
}

Result<pid_t> spawn_process(const std::vector<std::string>& args, const fs::path& log) {
  if (args.empty()) return fail("internal: empty command");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::string out = log.empty() ? "/dev/null" : log.string();
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  init_spawn_attrs(attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a terminal's Ctrl-C goes to the driver
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return fail("cannot run '", args[0], "': ", std::strerror(rc));
  return pid;
}

std::optional<int> try_wait(pid_t pid) {
  int status = 0;
  pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r < 0) return 255;  // not our child any more: treat as failed
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

Result<int> run_process(const std::vector<std::string>& argv, const fs::path& log) {
  auto pid = spawn_process(argv, log);
  if (!pid) return std::unexpected(pid.error());
  int status = 0;
  while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

void kill_and_reap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

std::string last_line(const fs::path& log) {
  auto size = file_size_or_zero(log);
  if (size == 0) return "";
  FILE* f = std::fopen(log.c_str(), "rb");
  if (!f) return "";
  long from = size > 4096 ? static_cast<long>(size - 4096) : 0;  // only the tail is read
  std::fseek(f, from, SEEK_SET);
  std::string s(4096, '\0');
  s.resize(std::fread(s.data(), 1, s.size(), f));
  std::fclose(f);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  auto nl = s.rfind('\n');
  return printable(nl == std::string::npos ? s : s.substr(nl + 1), 300);
}

uint64_t process_start_ticks(pid_t pid) {
  if (pid <= 0) return 0;
  auto text = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text) return 0;
  auto close = text->rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos) return 0;
  size_t pos = close + 2;  // field 3 starts here
  for (int field = 3; field < 22; ++field) {
    pos = text->find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  return std::strtoull(text->c_str() + pos, nullptr, 10);
}

}  // namespace tune::util
