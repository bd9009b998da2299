#include <algorithm>
#include <cmath>

#include "sched/quantile.hpp"
#include "sched/scheduler.hpp"

namespace tune::sched {

double nan_percentile(std::vector<double> values, double q) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  std::sort(values.begin(), values.end());
  return sorted_percentile(values, q);
}

double sorted_percentile(const std::vector<double>& values, double q) {
  if (values.empty()) return std::nan("");
  double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  auto lo = static_cast<size_t>(std::floor(rank));
  auto hi = static_cast<size_t>(std::ceil(rank));
  double frac = rank - static_cast<double>(lo);
  if (lo == hi) return values[lo];
  return values[lo] + (values[hi] - values[lo]) * frac;
}

}  // namespace tune::sched
