// The budgets a scheduler gives trials: its rung milestones in time_attr units (for bohb).
#pragma once

#include <vector>

#include "spec/experiment.hpp"

namespace tune::sched {

// asha: every bracket's milestones and max_t; hyperband: every bracket's r0 · rf^k, capped at
// max_t; other schedulers: none. Ascending, distinct.
[[nodiscard]] std::vector<double> budgets(const spec::SchedulerSpec& spec);

}  // namespace tune::sched
