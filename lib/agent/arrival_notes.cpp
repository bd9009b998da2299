#include "agent/arrival_notes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tune::agent {

namespace {

std::string now_ns(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return std::to_string(static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull +
                        static_cast<unsigned long long>(ts.tv_nsec));
}

std::string stamp() {
  return now_ns(CLOCK_REALTIME) + " " + now_ns(CLOCK_MONOTONIC);
}

}  // namespace

ArrivalNotes::~ArrivalNotes() {
  if (fd_ >= 0) ::close(fd_);
}

void ArrivalNotes::started() {
  start_line_ = "start " + attempt_ + " " + stamp() + "\n";
}

void ArrivalNotes::write_line(const std::string& line) {
  if (failed_) return;
  if (fd_ < 0) {
    fd_ = ::open((dir_ + "/stdout.times").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      failed_ = true;  // the driver then times the output itself, as it reads it
      return;
    }
    std::string first =
        start_line_.empty() ? "start " + attempt_ + " " + stamp() + "\n" : start_line_;
    first += line;
    while (::write(fd_, first.data(), first.size()) < 0 && errno == EINTR) {
    }
    return;
  }
  while (::write(fd_, line.data(), line.size()) < 0 && errno == EINTR) {
  }
}

void ArrivalNotes::before_write(uint64_t log_size, const char* data, size_t n) {
  if (!std::memchr(data, '\n', n)) return;
  write_line(std::to_string(log_size + n) + " " + stamp() + "\n");
}

}  // namespace tune::agent
