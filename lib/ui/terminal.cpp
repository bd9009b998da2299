#include "ui/terminal.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>

namespace tune::ui {

namespace {

volatile std::sig_atomic_t g_resized = 0;

extern "C" void on_winch(int) {
  g_resized = 1;
}

}  // namespace

std::optional<size_t> terminal_columns(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c && *c) {
    char* end = nullptr;
    long v = std::strtol(c, &end, 10);
    if (end && *end == '\0' && v > 0 && v < 100000) return static_cast<size_t>(v);
  }
  return std::nullopt;
}

size_t output_width(int fd) {
  return terminal_columns(fd).value_or(100000);
}

bool stderr_can_redraw() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) != 0 && !(term && std::strcmp(term, "dumb") == 0);
}

void watch_resizes() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = on_winch;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGWINCH, &sa, nullptr);
}

bool resize_pending() {
  return g_resized != 0;
}

std::optional<size_t> terminal_rows(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) return ws.ws_row;
  if (const char* c = std::getenv("LINES"); c && *c) {
    char* end = nullptr;
    long v = std::strtol(c, &end, 10);
    if (end && *end == '\0' && v > 0 && v < 100000) return static_cast<size_t>(v);
  }
  return std::nullopt;
}

bool take_resize() {
  if (!g_resized) return false;
  g_resized = 0;
  return true;
}

}  // namespace tune::ui
