#include "sched/pbt.hpp"

#include <algorithm>
#include <cmath>

namespace tune::sched {

void Pbt::on_trial_add(const std::string& trial, uint64_t index) {
  if (!trials_.count(trial)) trials_[trial].index = index;
}

std::pair<std::vector<std::string>, std::vector<std::string>> Pbt::quantiles() const {
  std::vector<std::pair<const std::string*, const State*>> ranked;
  for (const auto& [id, s] : trials_)
    if (s.score) ranked.emplace_back(&id, &s);
  // Worst first; NaN ranks last of all (worst); ties: the earlier trial ranks lower (as Ray's
  // stable sort of trials in creation order).
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    double x = *a.second->score, y = *b.second->score;
    bool xn = std::isnan(x), yn = std::isnan(y);
    if (xn != yn) return xn;
    if (!xn && x != y) return x < y;
    return a.second->index < b.second->index;
  });
  size_t n = ranked.size();
  if (n <= 1) return {};
  auto k = static_cast<size_t>(std::ceil(static_cast<double>(n) * spec_.quantile_fraction));
  k = std::min(k, n / 2);
  std::vector<std::string> lower, upper;
  for (size_t i = 0; i < k; ++i) lower.push_back(*ranked[i].first);
  for (size_t i = n - k; i < n; ++i) upper.push_back(*ranked[i].first);
  return {lower, upper};
}

Decision Pbt::on_result(const Observation& r) {
  auto it = trials_.find(r.trial);
  if (it == trials_.end()) return Decision::go();
  State& s = it->second;
  if (r.time < spec_.burn_in_period) return Decision::go();
  if (r.time - s.last_check < spec_.perturbation_interval) return Decision::go();
  s.last_check = r.time;
  s.score = r.score;
  auto [lower, upper] = quantiles();
  Decision d = Decision::go();
  d.at = r.time;
  if (std::find(upper.begin(), upper.end(), r.trial) != upper.end()) {
    d.save = true;
  } else if (std::find(lower.begin(), lower.end(), r.trial) != lower.end()) {
    search::Rng rng(search::mix_seed(seed_ ^ 0x9b7a'1c3d'5e6f'0000ULL, draws_++));
    const std::string& donor = upper[rng.below(upper.size())];
    if (!population_ || !population_->has_checkpoint(donor)) {
      d.donor = donor;  // skipped: the controller logs it
    } else if (const json* cfg = population_->config(donor)) {
      d.action = Action::kExploit;
      d.why = Why::kExploit;
      d.donor = donor;
      d.config = explore(spec_, *cfg, rng);
      // As Ray: the trial takes over the donor's clock of checks.
      s.last_check = trials_.at(donor).last_check;
      return d;
    }
  }
  if (population_ && population_->trials_waiting()) {
    d.action = Action::kPause;
    d.why = Why::kTurn;
    d.save = true;
  }
  return d;
}

void Pbt::on_complete(const std::string& trial, const std::optional<Observation>& last) {
  (void)last;
  trials_.erase(trial);
}

double Pbt::priority(const std::string& trial) const {
  auto it = trials_.find(trial);
  return it == trials_.end() ? 0 : it->second.last_check;
}

json Pbt::save() const {
  json trials = json::object();
  for (const auto& [id, s] : trials_) {
    json t = {{"index", s.index}, {"last_check", s.last_check}};
    if (s.score) t["score"] = *s.score;  // NaN stays NaN in the state file
    trials[id] = std::move(t);
  }
  return {{"type", "pbt"}, {"draws", draws_}, {"trials", std::move(trials)}};
}

Result<void> Pbt::restore(const json& state) {
  auto bad = [](const std::string& what) {
    return std::unexpected(Error{"scheduler state (pbt): " + what});
  };
  if (!state.is_object() || state.value("type", "") != "pbt") return bad("not a pbt state");
  auto d = state.find("draws");
  if (d == state.end() || !d->is_number_unsigned()) return bad("'draws' is not a count");
  auto t = state.find("trials");
  if (t == state.end() || !t->is_object()) return bad("'trials' is not a mapping");
  std::map<std::string, State> trials;
  for (auto it = t->begin(); it != t->end(); ++it) {
    const json& v = *it;
    if (!v.is_object() || !v.contains("index") || !v["index"].is_number_unsigned() ||
        !v.contains("last_check") || !v["last_check"].is_number() ||
        (v.contains("score") && !v["score"].is_number()))
      return bad("trial " + it.key() + ": needs 'index', 'last_check' and a numeric 'score'");
    State s;
    s.index = v["index"].get<uint64_t>();
    s.last_check = v["last_check"].get<double>();
    if (v.contains("score")) s.score = v["score"].get<double>();
    trials[it.key()] = s;
  }
  draws_ = d->get<uint64_t>();
  trials_ = std::move(trials);
  return {};
}

}  // namespace tune::sched
