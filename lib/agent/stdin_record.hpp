// DIR/stdin.sent on a step-mode attempt's host: which line went last into its stdin.fifo, so
// that a line sent again (its "written" lost with a cut link, and sent anew through another
// agent or the host's shell) is not written twice. Lines are named by the driver's run (hex
// digits, new for each driver) and a number rising within it. The file is one line, "RUN N",
// padded with spaces to kStdinRecordSize bytes with its newline, overwritten in place; its
// writers hold an flock on it (the agent: stdin_lines.cpp; the shell: ssh_executor.cpp).
// Header-only, libc and the standard library.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace tune::agent {

inline constexpr size_t kStdinRecordSize = 64;
inline constexpr const char* kStdinRecordName = "stdin.sent";

// A run name the record and the shell can carry as it is: 1 to 32 lowercase hex digits.
[[nodiscard]] inline bool valid_stdin_run(std::string_view run) {
  if (run.empty() || run.size() > 32) return false;
  for (char c : run)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

struct StdinRecord {
  std::string run;
  uint64_t n = 0;
};

// The record's text, kStdinRecordSize bytes.
[[nodiscard]] inline std::string stdin_record_text(const StdinRecord& r) {
  std::string s = r.run + " " + std::to_string(r.n);
  s.resize(kStdinRecordSize - 1, ' ');
  return s + "\n";
}

// The record in `fd` (nullopt: empty, or not a record: as if none).
[[nodiscard]] inline std::optional<StdinRecord> read_stdin_record(int fd) {
  char buf[kStdinRecordSize + 1] = {};
  ssize_t got = ::pread(fd, buf, kStdinRecordSize, 0);
  if (got <= 0) return std::nullopt;
  std::string_view s(buf, static_cast<size_t>(got));
  size_t sp = s.find(' ');
  if (sp == std::string_view::npos || !valid_stdin_run(s.substr(0, sp))) return std::nullopt;
  StdinRecord r{std::string(s.substr(0, sp)), 0};
  size_t i = sp + 1, digits = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9' && digits < 19; ++i, ++digits)
    r.n = r.n * 10 + static_cast<uint64_t>(s[i] - '0');
  if (digits == 0) return std::nullopt;
  return r;
}

// Whether line `n` of `run` went already, as `r` says.
[[nodiscard]] inline bool stdin_record_covers(const std::optional<StdinRecord>& r,
                                              std::string_view run, uint64_t n) {
  return r && r->run == run && r->n >= n;
}

}  // namespace tune::agent
