// Names of the controller's own entries in a trial dir (files.cpp, checkpoints.cpp).
#pragma once

#include <cstdint>
#include <string_view>

namespace tune::control {

// A hidden name for a tree on its way out, so its own name is free at once.
inline constexpr std::string_view kTrashPrefix = ".deleting_";

// Prefixes of dirs that only ever hold unfinished work of an attempt.
inline bool is_leftover(std::string_view name, bool keep_staged) {
  if (name.starts_with(kTrashPrefix) || name.starts_with(".copying_")) return true;
  // Staged dirs are reported by lines not read yet when re-attaching: those may stay.
  return !keep_staged &&
         (name.starts_with(".pending_checkpoint_") || name.starts_with(".staged_checkpoint_"));
}

// N of "checkpoint_N", or -1 for any other name.
inline int64_t checkpoint_seq_of(std::string_view name) {
  if (!name.starts_with("checkpoint_") || name.size() == 11) return -1;
  int64_t seq = 0;
  for (char c : name.substr(11)) {
    if (c < '0' || c > '9' || seq > (INT64_MAX - 9) / 10) return -1;
    seq = seq * 10 + (c - '0');
  }
  return seq;
}

}  // namespace tune::control
