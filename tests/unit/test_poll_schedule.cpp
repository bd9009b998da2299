// A remote host's poll schedule (exec/poll_schedule.hpp): fast only after a start or a command
// and for the answer's end, a floor while a trial merely prints, doubling up to idle when quiet.
#include <catch2/catch.hpp>

#include "exec/poll_schedule.hpp"

using tune::exec::PollSchedule;

namespace {
constexpr double kFast = PollSchedule::kFast;
constexpr double kFloor = PollSchedule::kOutputFloor;
constexpr double kIdle = PollSchedule::kIdle;
}  // namespace

TEST_CASE("poll schedule: a quiet host is polled ever less often, up to idle", "[poll_schedule]") {
  PollSchedule s;
  CHECK(s.gap() == kIdle);
  CHECK(s.after_poll(false) == kIdle);
  CHECK(s.expect_answer() == kFast);
  double gap = kFast;
  for (int i = 0; i < 10; ++i) {
    double next = s.after_poll(false);
    CHECK(next == std::min(gap * 2, kIdle));
    gap = next;
  }
  CHECK(gap == kIdle);
}

TEST_CASE("poll schedule: an answer to a command gets one more fast poll, then it doubles",
          "[poll_schedule]") {
  PollSchedule s;
  s.expect_answer();
  CHECK(s.after_poll(false) == 2 * kFast);  // nothing yet
  CHECK(s.awaiting());
  CHECK(s.after_poll(true) == kFast);  // the answer: its end (or the exit) is looked for soon
  CHECK_FALSE(s.awaiting());
  CHECK(s.after_poll(false) == 2 * kFast);
  CHECK(s.after_poll(false) == 4 * kFast);
  // A step-mode trial: every command brings the fast poll back.
  CHECK(s.expect_answer() == kFast);
  CHECK(s.after_poll(true) == kFast);
}

TEST_CASE("poll schedule: a trial that prints steadily is never polled faster than the floor",
          "[poll_schedule]") {
  PollSchedule s;
  s.expect_answer();                   // its start
  CHECK(s.after_poll(true) == kFast);  // its first output answers the start
  // Output at every poll from then on (a trial printing without pause): the floor, for ever.
  for (int i = 0; i < 1000; ++i) REQUIRE(s.after_poll(true) == kFloor);
  // Output now and then: the floor after each, doubling in between.
  CHECK(s.after_poll(false) == 2 * kFloor);
  CHECK(s.after_poll(true) == kFloor);
  CHECK(s.after_poll(false) == 2 * kFloor);
  CHECK(s.after_poll(false) == kIdle);
  CHECK(s.after_poll(true) == kFloor);  // output after a quiet spell: polled sooner again
  CHECK(kFloor >= 10 * kFast);          // (the point of the floor)
}
