// The scheduler's decisions about each trial, as marks on its learning curve: stopped (by the
// scheduler, or at max_t), paused, exploited from a donor (pbt). Read from the experiment dir
// alone: the state's end reasons and pending exploits, and pbt_policy.jsonl for the exploits
// carried out (up to the length the state knows; a malformed line is skipped).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "state/state.hpp"

namespace tune::report {

enum class MarkKind { kStopped, kMaxT, kPaused, kExploited };

// "stopped", "max_t", "paused", "exploited": the page's name for each kind.
[[nodiscard]] const char* mark_kind_name(MarkKind k);

// One decision: where on the curve (the training_iteration it was taken at: the trial's last
// row for a stop or a pause, the restored checkpoint's for an exploit), what, and a sentence for
// people in the scheduler's own time_attr ("stopped by asha at 9", "exploited
// trial_00003_lr=0.1 at 12").
struct Mark {
  double x = 0;
  MarkKind kind = MarkKind::kStopped;
  std::string text;
};

// Every trial's marks by trial id, in x order.
[[nodiscard]] std::map<std::string, std::vector<Mark>> read_decisions(
    const state::ExperimentState& s, const std::filesystem::path& exp_dir);

}  // namespace tune::report
