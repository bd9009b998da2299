#include "sched/budgets.hpp"

#include <algorithm>
#include <cmath>

#include "sched/asha.hpp"
#include "sched/hyperband.hpp"

namespace tune::sched {

std::vector<double> budgets(const spec::SchedulerSpec& spec) {
  std::vector<double> out;
  if (spec.kind == spec::SchedulerKind::kAsha) {
    Asha a(spec, 0);
    for (int b = 0; b < spec.brackets; ++b)
      for (double m : a.milestones(static_cast<size_t>(b)))
        if (m < spec.max_t) out.push_back(m);
    out.push_back(spec.max_t);
  } else if (spec.kind == spec::SchedulerKind::kHyperBand) {
    HyperBand h(spec);
    for (int s = 0; s <= h.s_max(); ++s) {
      double r = h.r0(s);
      if (!(r > 0)) continue;  // a bracket hyperband skips
      for (; r < spec.max_t; r *= spec.reduction_factor) out.push_back(r);
    }
    out.push_back(spec.max_t);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tune::sched
