#include "relay.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "events.hpp"

namespace tune::agent_app {

namespace {
// A supervisor's event is one line of at most a few KB (supervise.cpp); more without a newline
// is not one of theirs, and is dropped.
constexpr size_t kMaxLine = 64u << 10;

// Only a supervisor's own kinds of event are passed on: a line that says anything else (an
// "output" with another trial's bytes, say) is not a supervisor's.
bool relayable(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  auto kind = j.find("event");
  return kind != j.end() && (*kind == "start" || *kind == "exit");
}
}  // namespace

EventRelay::EventRelay() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
  read_fd_ = fds[0];
  write_fd_ = fds[1];
}

EventRelay::~EventRelay() {
  if (read_fd_ >= 0) ::close(read_fd_);
  if (write_fd_ >= 0) ::close(write_fd_);
}

void EventRelay::add_fd(std::vector<pollfd>& fds) const {
  fds.push_back({read_fd_, POLLIN, 0});  // (a negative fd is skipped by poll)
}

void EventRelay::drain(const std::function<void(const std::string&, int)>& before_exit) {
  if (read_fd_ < 0) return;
  char chunk[16384];
  for (;;) {
    ssize_t n = ::read(read_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: all read (no EOF: this process holds the write end)
    buf_.append(chunk, static_cast<size_t>(n));
  }
  size_t from = 0;
  for (size_t nl; (nl = buf_.find('\n', from)) != std::string::npos; from = nl + 1) {
    std::string line = buf_.substr(from, nl - from);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!relayable(j)) continue;
    auto id = j.find("id"), attempt = j.find("attempt");
    if (before_exit && j["event"] == "exit" && id != j.end() && id->is_string() &&
        attempt != j.end() && attempt->is_number_integer())
      before_exit(id->get<std::string>(), attempt->get<int>());
    emit(line);
  }
  buf_.erase(0, from);
  if (buf_.size() > kMaxLine) buf_.clear();
}

}  // namespace tune::agent_app
