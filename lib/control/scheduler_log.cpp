// The scheduler's append-only log (state::kSchedulerLog): a scheduler whose state grows with
// every result (median_stopping) hands its new results over at each state write, so that the
// state holds only what is not logged yet. The state records the log's length; bytes past it
// (a crash between the append and the state write) are cut off when the run resumes.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>

#include "control/controller.hpp"
#include "util/fs.hpp"

namespace tune::control {

void Controller::append_scheduler_log(bool durable) {
  std::string tail = sched_->log_tail();
  if (tail.empty()) return;
  fs::path file = exp_.dir() / state::kSchedulerLog;
  const uint64_t at = state_.scheduler_log_bytes;
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < tail.size();) {
    ssize_t n = ::pwrite(fd, tail.data() + done, tail.size() - done, static_cast<off_t>(at + done));
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  // Bytes past the end are from an append that failed earlier: never part of the log.
  ok = ok && ::ftruncate(fd, static_cast<off_t>(at + tail.size())) == 0 &&
       (!durable || ::fsync(fd) == 0);
  if (fd >= 0) ::close(fd);
  if (!ok) {
    // The results stay in the scheduler's part of the state until an append succeeds.
    if (!sched_log_failed_)
      spdlog::warn("cannot append to {}: the scheduler's results stay in the state meanwhile",
                   file.string());
    sched_log_failed_ = true;
    return;
  }
  sched_log_failed_ = false;
  sched_->log_written();
  state_.scheduler_log_bytes = at + tail.size();
}

Result<void> Controller::restore_scheduler_log() {
  fs::path file = exp_.dir() / state::kSchedulerLog;
  const uint64_t want = state_.scheduler_log_bytes;
  uint64_t size = util::file_size_or_zero(file);
  if (size < want)
    return std::unexpected(Error{file.string() + ": " + std::to_string(size) +
                                 " bytes, but the experiment state counts " +
                                 std::to_string(want)});
  if (size > want) {  // appended after the last state write: the results are reported again
    std::error_code ec;
    fs::resize_file(file, want, ec);
    if (ec)
      return std::unexpected(Error{"cannot cut " + file.string() + " back to " +
                                   std::to_string(want) + " bytes: " + ec.message()});
  }
  if (want == 0) return sched_->restore_log("", file.string());
  auto text = util::read_file(file, want);
  if (!text) return std::unexpected(text.error());
  return sched_->restore_log(*text, file.string());
}

}  // namespace tune::control
