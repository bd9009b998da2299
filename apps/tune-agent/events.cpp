#include "events.hpp"

#include <fcntl.h>
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

namespace {
bool g_queued = false;
std::string g_out;  // queued for stdout
size_t g_out_from = 0;
// A driver that reads nothing for so long that this much is queued is stuck or gone: what
// comes then is dropped (exits are in the record files too), not kept without bound.
constexpr size_t kMaxQueued = 64u << 20;
}  // namespace

void queue_output() {
  g_queued = true;
  ::fcntl(1, F_SETFL, ::fcntl(1, F_GETFL) | O_NONBLOCK);
}

size_t flush_output() {
  while (g_out_from < g_out.size()) {
    ssize_t n = ::write(1, g_out.data() + g_out_from, g_out.size() - g_out_from);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: the rest when stdout is writable again (or EPIPE: gone)
    g_out_from += static_cast<size_t>(n);
  }
  // (what was written is dropped once it is half of the queue: each byte moved about once)
  if (g_out_from == g_out.size() || g_out_from > g_out.size() / 2) {
    g_out.erase(0, g_out_from);
    g_out_from = 0;
  }
  return g_out.size() - g_out_from;
}

size_t queued_output() {
  return g_out.size() - g_out_from;
}

void emit(const std::string& line) {
  if (g_queued) {
    if (queued_output() + line.size() >= kMaxQueued) return;
    g_out += line;
    g_out += '\n';
    flush_output();
    return;
  }
  // One write (a line of the driver's machine's agent is short: whole, never interleaved with
  // its supervisors' lines to the same stdout).
  std::string out = line + "\n";
  while (::write(1, out.data(), out.size()) < 0 && errno == EINTR) {
  }
}

void emit(const json& event) {
  emit(event.dump(-1, ' ', false, json::error_handler_t::replace));
}

void emit_error(const std::string& message, const std::string& op, const std::string& id,
                int attempt) {
  json e{{"event", "error"}, {"message", message}};
  if (!op.empty()) e["op"] = op;
  if (!id.empty()) e["id"] = id;
  if (attempt > 0) e["attempt"] = attempt;
  emit(e);
}

std::vector<Child> reap_children(std::unordered_map<pid_t, Child>& children,
                                 const std::function<void()>& before_gone,
                                 const std::function<void(pid_t, int)>& other) {
  std::vector<Child> reaped;
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = children.find(pid);
    if (it == children.end()) {
      if (other) other(pid, status);
      continue;
    }
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
