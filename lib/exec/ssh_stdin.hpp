// Step-mode lines to a trial's stdin.fifo on an SSH host through the host's shell, when its
// agent cannot write them (apps/tune-agent/stdin_lines.hpp does it the same way otherwise).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tune::exec {

// One shell command that writes `lines` (number, text) to DIR/stdin.fifo in order, each unless
// DIR/stdin.sent (agent/stdin_record.hpp) names it or a later one of `run`, and records each.
// `issued`: the last number the driver gave (a record naming a later one was forged). Exit
// status 0: done; 3: no FIFO to write to; 4: the record is not a plain file of its own; 5: it
// stays locked; 6: it names a line the driver never sent.
[[nodiscard]] std::string stdin_shell_command(
    const std::string& dir, const std::string& run, uint64_t issued,
    const std::vector<std::pair<uint64_t, std::string>>& lines);

}  // namespace tune::exec
