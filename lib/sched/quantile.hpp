// Percentiles as numpy computes them (linear interpolation), on values already sorted.
#pragma once

#include <vector>

namespace tune::sched {

// The q-th percentile (0..100) of `sorted` (ascending, no NaN); NaN when it is empty.
[[nodiscard]] double sorted_percentile(const std::vector<double>& sorted, double q);

}  // namespace tune::sched
