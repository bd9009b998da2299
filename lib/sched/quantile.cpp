#include <algorithm>
#include <cmath>

#include "sched/scheduler.hpp"

namespace tune::sched {

double nan_percentile(std::vector<double> values, double q) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  auto lo = static_cast<size_t>(std::floor(rank));
  auto hi = static_cast<size_t>(std::ceil(rank));
  double frac = rank - static_cast<double>(lo);
  if (lo == hi) return values[lo];
  return values[lo] + (values[hi] - values[lo]) * frac;
}

}  // namespace tune::sched
