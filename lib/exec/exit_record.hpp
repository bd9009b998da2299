// The supervisor's exit record, and how the driver tells it from one a trial wrote: each attempt
// gets a nonce (a keyed hash of the trial dir's name and the attempt number under a per-
// experiment key) that reaches its supervisor on stdin and never the trial; the supervisor writes
// it into its record, under the experiment's .tune dir, with its own pid and the trial's pid and
// start time, and the driver believes a record only if all of these match what it knows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "exec/executor.hpp"
#include "util/error.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

// The experiment's record key in `file` (hex), made with fresh random bytes if the file is
// missing or not a key. Fails only if it can be neither read nor written.
[[nodiscard]] Result<std::string> load_record_key(const fs::path& file);

// The nonce of attempt `attempt` of the trial whose dir is named `trial_name` (32 hex digits).
[[nodiscard]] std::string attempt_nonce(std::string_view key, std::string_view trial_name,
                                        int attempt);

// Where the supervisor of a trial records its exit, relative to the experiment dir.
[[nodiscard]] std::string record_path(std::string_view trial_name);

// What the driver knows of an attempt, to check a record against.
struct AttemptIdentity {
  std::string nonce;
  std::optional<int> supervisor;    // the supervisor's pid, when known
  std::optional<int> pid;           // the trial process's pid, when seen
  std::optional<uint64_t> started;  // and its start time (clock ticks since boot)
};

// What the record file held.
enum class RecordCheck {
  kAbsent,   // no file, or no record for this attempt yet
  kGenuine,  // this attempt's supervisor wrote it
  kForged,   // a record for this attempt that its supervisor did not write: ignore it
};

// Checks the text of a record file (nullopt: no file) against `id`; fills `info` if genuine.
[[nodiscard]] RecordCheck check_exit_record(const std::optional<std::string>& text, int attempt,
                                            const AttemptIdentity& id, ExitInfo& info);

}  // namespace tune::exec
