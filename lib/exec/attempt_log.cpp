#include "exec/attempt_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "util/fs.hpp"
#include "util/process.hpp"

namespace tune::exec {

namespace {

constexpr size_t kMaxLine = 64 * 1024;  // a longer line is not the supervisor's

std::string key(std::string_view name, int attempt) {
  return std::string(name) + '\0' + std::to_string(attempt);
}

}  // namespace

bool process_alive(int pid, uint64_t ticks) {
  if (pid <= 0 || ticks == 0) return false;
  auto text = util::read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text) return false;
  auto close = text->rfind(')');
  if (close == std::string::npos || close + 2 >= text->size()) return false;
  char state = (*text)[close + 2];
  if (state == 'Z' || state == 'X') return false;  // ended, not reaped yet
  return util::process_start_ticks(pid) == ticks;
}

void AttemptLog::refresh() {
  int fd = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
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
  auto j = nlohmann::json::parse(line, nullptr, false);
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
    if (pid) {
      a.pid = static_cast<int>(*pid);
      a.started = num("started").value_or(0);
    }
  } else if (*event == "exit") {
    by_attempt_[key(trial->get<std::string>(), attempt->get<int>())].exit = std::string(line);
  }
}

const LoggedAttempt* AttemptLog::find(std::string_view trial_name, int attempt) const {
  auto it = by_attempt_.find(key(trial_name, attempt));
  return it == by_attempt_.end() ? nullptr : &it->second;
}

std::unordered_map<std::string, int> AttemptLog::live() const {
  std::unordered_map<std::string, int> out;
  for (const auto& [k, a] : by_attempt_)
    if (a.supervisor && process_alive(*a.supervisor, a.supervisor_started)) out[k] = *a.supervisor;
  return out;
}

}  // namespace tune::exec
