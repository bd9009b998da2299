#include "sched/asha.hpp"

#include <algorithm>
#include <cmath>

#include "sched/quantile.hpp"
#include "search/rng.hpp"

namespace tune::sched {

Asha::Asha(const spec::SchedulerSpec& spec, uint64_t seed) : spec_(spec), seed_(seed) {
  double rf = spec_.reduction_factor;
  for (int s = 0; s < spec_.brackets; ++s) {
    // Ray's count: int(log(max_t / grace) / log(rf) - s + 1) rungs, at grace · rf^(k + s).
    double n = std::log(spec_.max_t / spec_.grace_period) / std::log(rf) - s + 1;
    int rungs = n > 0 ? static_cast<int>(n) : 0;
    std::vector<Rung> b;
    for (int k = rungs - 1; k >= 0; --k)
      b.push_back({spec_.grace_period * std::pow(rf, k + s), {}, {}});
    brackets_.push_back(std::move(b));
  }
}

std::vector<double> Asha::milestones(size_t bracket) const {
  std::vector<double> out;
  for (const auto& r : brackets_.at(bracket)) out.push_back(r.milestone);
  return out;
}

std::optional<size_t> Asha::bracket_of(const std::string& trial) const {
  auto it = bracket_.find(trial);
  if (it == bracket_.end()) return std::nullopt;
  return it->second;
}

void Asha::on_trial_add(const std::string& trial, uint64_t index) {
  if (bracket_.count(trial)) return;
  if (brackets_.size() == 1) {
    bracket_[trial] = 0;
    return;
  }
  // P(bracket) ∝ e^(its rungs - the most rungs), drawn from the trial's own seeded stream.
  size_t most = 0;
  for (const auto& b : brackets_) most = std::max(most, b.size());
  std::vector<double> w;
  double total = 0;
  for (const auto& b : brackets_)
    total += w.emplace_back(std::exp(static_cast<double>(b.size()) - static_cast<double>(most)));
  search::Rng rng(search::mix_seed(seed_ ^ 0xa5a5'0000'5a5aULL, index));
  double u = rng.unit() * total;
  size_t pick = 0;
  for (; pick + 1 < w.size() && u >= w[pick]; ++pick) u -= w[pick];
  bracket_[trial] = pick;
}

bool Asha::record(const Observation& r) {
  auto it = bracket_.find(r.trial);
  if (it == bracket_.end()) return false;
  for (auto& rung : brackets_[it->second]) {
    if (r.time < rung.milestone || rung.recorded.count(r.trial)) continue;
    // The rung's values are kept sorted, so a decision costs O(log n) plus one insertion rather
    // than a sort of every value (10,000 trials: see bench/schedulers/overhead.py).
    double cutoff = sorted_percentile(rung.sorted, (1 - 1 / spec_.reduction_factor) * 100);
    bool below = !std::isnan(cutoff) && r.score < cutoff;  // NaN < x is false
    rung.recorded[r.trial] = r.score;
    if (!std::isnan(r.score))
      rung.sorted.insert(std::upper_bound(rung.sorted.begin(), rung.sorted.end(), r.score),
                         r.score);
    return below;
  }
  return false;
}

Decision Asha::on_result(const Observation& r) {
  if (r.time >= spec_.max_t) return {Action::kStop, Why::kMaxT, r.time};
  if (record(r)) return {Action::kStop, Why::kCutoff, r.time};
  return Decision::go();
}

void Asha::on_complete(const std::string& trial, const std::optional<Observation>& last) {
  if (last) (void)record(*last);
  bracket_.erase(trial);
}

json Asha::save() const {
  json brackets = json::array();
  for (const auto& b : brackets_) {
    json rungs = json::array();
    for (const auto& r : b) rungs.push_back({{"milestone", r.milestone}, {"recorded", r.recorded}});
    brackets.push_back(std::move(rungs));
  }
  return {{"type", "asha"}, {"brackets", std::move(brackets)}, {"trials", bracket_}};
}

Result<void> Asha::restore(const json& state) {
  auto bad = [](const std::string& what) {
    return std::unexpected(Error{"scheduler state (asha): " + what});
  };
  if (!state.is_object() || state.value("type", "") != "asha") return bad("not an asha state");
  const auto& b = state.find("brackets");
  if (b == state.end() || !b->is_array() || b->size() != brackets_.size())
    return bad("'brackets' does not match the scheduler's settings");
  for (size_t i = 0; i < brackets_.size(); ++i) {
    const auto& rungs = (*b)[i];
    if (!rungs.is_array() || rungs.size() != brackets_[i].size())
      return bad("bracket " + std::to_string(i) + " does not match the scheduler's settings");
    for (size_t k = 0; k < rungs.size(); ++k) {
      const auto& rec = rungs[k].is_object() ? rungs[k].value("recorded", json()) : json();
      if (!rec.is_object()) return bad("a rung's 'recorded' is not a mapping");
      Rung& rung = brackets_[i][k];
      rung.recorded.clear();
      rung.sorted.clear();
      for (auto it = rec.begin(); it != rec.end(); ++it) {
        // A NaN value was saved as null (JSON has no NaN).
        if (!it->is_number() && !it->is_null()) return bad("a recorded value is not a number");
        double v = it->is_null() ? std::nan("") : it->get<double>();
        rung.recorded[it.key()] = v;
        if (!std::isnan(v)) rung.sorted.push_back(v);
      }
      std::sort(rung.sorted.begin(), rung.sorted.end());
    }
  }
  bracket_.clear();
  const auto& t = state.find("trials");
  if (t == state.end() || !t->is_object()) return bad("'trials' is not a mapping");
  for (auto it = t->begin(); it != t->end(); ++it) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() >= brackets_.size())
      return bad("trial " + it.key() + " names no bracket");
    bracket_[it.key()] = it->get<size_t>();
  }
  return {};
}

}  // namespace tune::sched
