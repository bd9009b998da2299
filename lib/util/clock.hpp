// Clock readings as seconds in a double, for deadlines and durations (CLOCK_MONOTONIC) and for
// times written down (CLOCK_REALTIME).
#pragma once

#include <time.h>

namespace tune::util {

inline double clock_s(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Seconds on the monotonic clock: never jumps with the wall clock.
inline double mono() {
  return clock_s(CLOCK_MONOTONIC);
}

}  // namespace tune::util
