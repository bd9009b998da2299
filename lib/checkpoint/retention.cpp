#include "checkpoint/retention.hpp"

#include <algorithm>
#include <cmath>

namespace tune::checkpoint {

namespace {
std::optional<double> score_of(const trial::Checkpoint& c, const std::optional<std::string>& attr) {
  if (!attr) return static_cast<double>(c.iteration * 1'000'000 + c.seq);  // recency
  auto it = c.metrics.find(*attr);
  if (it == c.metrics.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;  // NaN/Infinity (diverged) rank last, as missing
  return v;
}
}  // namespace

std::vector<const trial::Checkpoint*> rank(const std::vector<trial::Checkpoint>& ckpts,
                                           const std::optional<std::string>& metric,
                                           spec::Order order) {
  std::vector<std::pair<std::optional<double>, const trial::Checkpoint*>> scored;
  for (const auto& c : ckpts) scored.emplace_back(score_of(c, metric), &c);
  std::stable_sort(scored.begin(), scored.end(), [&](const auto& a, const auto& b) {
    if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
    if (a.first && *a.first != *b.first)
      return order == spec::Order::kMin ? (*a.first < *b.first) : (*a.first > *b.first);
    return a.second->seq < b.second->seq;  // tie: the older wins
  });
  std::vector<const trial::Checkpoint*> out;
  for (auto& [s, c] : scored) out.push_back(c);
  return out;
}

std::vector<int64_t> select_for_deletion(const std::vector<trial::Checkpoint>& ckpts,
                                         const Policy& policy, bool trial_can_run,
                                         std::vector<std::string>* warnings) {
  std::vector<int64_t> doomed;
  if (!policy.num_to_keep || ckpts.empty()) return doomed;
  if (warnings && policy.score_attribute) {
    for (const auto& c : ckpts)
      if (!score_of(c, policy.score_attribute))
        warnings->push_back(c.dir_name() + " has no numeric '" + *policy.score_attribute +
                            "' in its result: it ranks worst");
  }
  auto ranked = rank(ckpts, policy.score_attribute,
                     policy.score_attribute ? policy.order : spec::Order::kMax);
  int64_t latest = ckpts.back().seq;
  for (size_t i = static_cast<size_t>(*policy.num_to_keep); i < ranked.size(); ++i) {
    if (trial_can_run && ranked[i]->seq == latest) continue;
    doomed.push_back(ranked[i]->seq);
  }
  std::sort(doomed.begin(), doomed.end());
  return doomed;
}

}  // namespace tune::checkpoint
