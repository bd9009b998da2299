// When a trial's output arrived, on the clocks of the host it runs on. The supervisor notes it
// in `stdout.times` beside `stdout.log`, so that results read late (after a driver crash, or
// from a host whose link was down) get the trial's times, not the reading driver's.
//
// The file is text, one note per line, written by the attempt's supervisor only:
//   start ATTEMPT WALL_NS MONO_NS   the attempt's trial process started then
//   END WALL_NS MONO_NS             every byte of stdout.log before offset END had arrived then
// An END note is written before the bytes it covers, so whatever a reader finds in stdout.log
// is covered by a note it can already read. WALL is CLOCK_REALTIME, MONO CLOCK_MONOTONIC, both
// of the trial's host: only differences of MONO values from one attempt are ever taken.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tune::exec {

struct HostTime {
  double wall = 0;  // seconds since the epoch
  double mono = 0;  // seconds, the host's monotonic clock
};

struct Arrival {
  uint64_t end = 0;  // bytes of stdout.log before this offset had arrived...
  HostTime at;       // ...by this time
};

// Reads stdout.times incrementally for one attempt: notes before that attempt's start line
// belong to earlier attempts and are skipped. The file is untrusted (any process of the user
// can write it): a line that is not a well-formed note is skipped, and memory stays bounded.
class ArrivalReader {
 public:
  // (from `offset`, where the attempt's notes start: the file's size before it started)
  explicit ArrivalReader(int attempt, uint64_t offset = 0) : attempt_(attempt), offset_(offset) {}

  // Feeds the next bytes of the file; appends the notes they complete to `out`, and sets
  // `started` when they hold the attempt's start line.
  void feed(std::string_view bytes, std::vector<Arrival>& out, std::optional<HostTime>& started);
  // Bytes fed so far (where to read next).
  [[nodiscard]] uint64_t offset() const { return offset_; }

 private:
  void line(std::string_view s, std::vector<Arrival>& out, std::optional<HostTime>& started);

  int attempt_;
  bool in_attempt_ = false;
  uint64_t offset_ = 0;
  uint64_t last_end_ = 0;
  std::string partial_;
  bool skipping_ = false;  // inside a line too long to be a note
};

}  // namespace tune::exec
