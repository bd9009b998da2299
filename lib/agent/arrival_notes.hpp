// The writing side of stdout.times (exec/arrivals.hpp has the format and the reader): the
// supervisor notes when each piece of the trial's stdout arrived, on this host's clocks.
// libc only, like the supervisor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tune::agent {

class ArrivalNotes {
 public:
  // `dir`: the trial dir; the file is made at the first note (a trial that prints nothing
  // costs no file). Call started() once the trial process runs.
  ArrivalNotes(std::string dir, std::string attempt)
      : dir_(std::move(dir)), attempt_(std::move(attempt)) {}
  ~ArrivalNotes();
  ArrivalNotes(const ArrivalNotes&) = delete;
  ArrivalNotes& operator=(const ArrivalNotes&) = delete;

  void started();
  // To call before appending `data` to the log, which is `log_size` bytes now (O_APPEND, this
  // process its only writer): notes that the bytes up to its size + data's have arrived now,
  // if `data` ends a line (only line ends are noted: a trial that prints byte by byte does
  // not make a note per byte).
  void before_write(uint64_t log_size, const char* data, size_t n);

 private:
  void write_line(const std::string& line);

  std::string dir_, attempt_;
  std::string start_line_;
  int fd_ = -1;
  bool failed_ = false;
};

}  // namespace tune::agent
