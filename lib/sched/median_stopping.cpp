#include "sched/median_stopping.hpp"

#include <algorithm>

namespace tune::sched {

void MedianStopping::on_trial_add(const std::string& trial, uint64_t index) {
  (void)trial;
  (void)index;
}

double MedianStopping::running_mean(const History& h, double t) const {
  auto from = std::lower_bound(h.time.begin(), h.time.end(), spec_.grace_period);
  auto to = std::upper_bound(h.time.begin(), h.time.end(), t);
  if (from >= to) return std::nan("");
  double sum = 0;
  for (auto i = from; i != to; ++i) sum += h.score[static_cast<size_t>(i - h.time.begin())];
  return sum / static_cast<double>(to - from);
}

Decision MedianStopping::on_result(const Observation& r) {
  History& h = trials_[r.trial];
  if (!h.time.empty() && r.time < h.time.back()) return Decision::go();  // time must grow
  h.time.push_back(r.time);
  h.score.push_back(r.score);
  if (!std::isnan(r.score)) h.best = std::max(h.best, r.score);
  if (r.time < spec_.grace_period) return Decision::go();
  std::vector<double> means;
  for (const auto& [id, other] : trials_)
    if (id != r.trial && !other.time.empty() && other.time.back() >= r.time)
      means.push_back(running_mean(other, r.time));
  if (means.size() < static_cast<size_t>(spec_.min_samples_required)) return Decision::go();
  // numpy's median: NaN if any mean is NaN (a trial with no result in the window), which
  // stops nobody.
  if (std::any_of(means.begin(), means.end(), [](double m) { return std::isnan(m); }))
    return Decision::go();
  std::sort(means.begin(), means.end());
  size_t n = means.size();
  double median = n % 2 ? means[n / 2] : (means[n / 2 - 1] + means[n / 2]) / 2;
  if (h.best < median) return {Action::kStop, Why::kMedian, r.time};
  return Decision::go();
}

void MedianStopping::on_complete(const std::string& trial, const std::optional<Observation>& last) {
  (void)trial;
  (void)last;  // its results were all seen by on_result; a finished trial still counts
}

json MedianStopping::save() const {
  json trials = json::object();
  for (const auto& [id, h] : trials_) trials[id] = {{"time", h.time}, {"score", h.score}};
  return {{"type", "median_stopping"}, {"trials", std::move(trials)}};
}

Result<void> MedianStopping::restore(const json& state) {
  auto bad = [](const std::string& what) {
    return std::unexpected(Error{"scheduler state (median_stopping): " + what});
  };
  if (!state.is_object() || state.value("type", "") != "median_stopping")
    return bad("not a median_stopping state");
  const auto& t = state.find("trials");
  if (t == state.end() || !t->is_object()) return bad("'trials' is not a mapping");
  trials_.clear();
  for (auto it = t->begin(); it != t->end(); ++it) {
    const json& time = it->is_object() ? it->value("time", json()) : json();
    const json& score = it->is_object() ? it->value("score", json()) : json();
    if (!time.is_array() || !score.is_array() || time.size() != score.size())
      return bad("trial " + it.key() + ": 'time' and 'score' must be lists of one length");
    History h;
    for (size_t i = 0; i < time.size(); ++i) {
      if (!time[i].is_number() || !score[i].is_number()) return bad("a value is not a number");
      double tm = time[i].get<double>(), sc = score[i].get<double>();
      if (!h.time.empty() && tm < h.time.back()) return bad("times must not decrease");
      h.time.push_back(tm);
      h.score.push_back(sc);
      if (!std::isnan(sc)) h.best = std::max(h.best, sc);
    }
    trials_[it.key()] = std::move(h);
  }
  return {};
}

}  // namespace tune::sched
