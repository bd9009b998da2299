#include "events.hpp"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

namespace tune::agent_app {

using nlohmann::json;

int64_t monotonic_ms() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void emit(const std::string& line) {
  std::string out = line + "\n";
  // (one write for a short line; a remote agent's output event, up to ~180 KB, may take more,
  // which is fine: only that agent writes to its channel, its supervisors' lines come through
  // its relay)
  for (size_t done = 0; done < out.size();) {
    ssize_t n = ::write(1, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void emit(const json& event) {
  emit(event.dump(-1, ' ', false, json::error_handler_t::replace));
}

void emit_error(const std::string& message, const std::string& op, const std::string& id) {
  json e{{"event", "error"}, {"message", message}};
  if (!op.empty()) e["op"] = op;
  if (!id.empty()) e["id"] = id;
  emit(e);
}

std::vector<Child> reap_children(std::unordered_map<pid_t, Child>& children,
                                 const std::function<void()>& before_gone) {
  std::vector<Child> reaped;
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = children.find(pid);
    if (it == children.end()) continue;
    if (before_gone) before_gone();
    emit(json{{"event", "gone"},
              {"id", it->second.id},
              {"attempt", it->second.attempt},
              {"supervisor", pid},
              {"status", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)}});
    reaped.push_back(std::move(it->second));
    children.erase(it);
  }
  return reaped;
}

}  // namespace tune::agent_app
