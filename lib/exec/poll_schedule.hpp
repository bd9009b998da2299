// When a remote host's attempts are looked at next (their output, exit records, syncs): soon
// after a command that answers at once, less often while a trial merely prints, rarely when
// the host is quiet. One per host, used only on its I/O thread.
//
// - A start or a line to a trial's stdin (a step-mode command) expects an answer within
//   milliseconds: polls kFast after it, the gap doubling while nothing comes.
// - The first output after such a command is its answer: one more poll kFast after it, for
//   the rest of the answer or the trial's exit (a one-result trial ends within a few ms of
//   printing), the gap then doubling again.
// - Any other output keeps the gap at kOutputFloor at most, never below it: a trial that
//   prints steadily is polled ~20 times a second, not 200 (a poll is a few SFTP round trips,
//   which cost CPU on both ends).
// - Nothing read: the gap doubles up to kIdle (the I/O thread's own period).
#pragma once

#include <algorithm>

namespace tune::exec {

class PollSchedule {
 public:
  static constexpr double kFast = 0.005;        // s, after a start or a command
  static constexpr double kOutputFloor = 0.05;  // s, the shortest gap after other output
  static constexpr double kIdle = 0.2;          // s, the longest gap

  // A command that answers soon was sent: the gap until the next poll (kFast).
  double expect_answer() {
    awaiting_ = true;
    gap_ = kFast;
    return gap_;
  }

  // After a poll that read output or not: the gap until the next one.
  double after_poll(bool read_output) {
    if (read_output && awaiting_) {
      awaiting_ = false;
      gap_ = kFast;
    } else if (read_output) {
      gap_ = kOutputFloor;
    } else {
      gap_ = std::min(gap_ * 2, kIdle);
    }
    return gap_;
  }

  [[nodiscard]] double gap() const { return gap_; }
  [[nodiscard]] bool awaiting() const { return awaiting_; }

 private:
  double gap_ = kIdle;
  bool awaiting_ = false;
};

}  // namespace tune::exec
