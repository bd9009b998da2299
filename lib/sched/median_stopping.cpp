#include "sched/median_stopping.hpp"

#include <algorithm>
#include <cstdint>

#include "state/seal.hpp"
#include "util/json_ext.hpp"

namespace tune::sched {

void MedianStopping::on_trial_add(const std::string& trial, uint64_t index) {
  (void)trial;
  (void)index;
}

void MedianStopping::add(History& h, double time, double score) {
  h.time.push_back(time);
  h.score.push_back(score);
  // Summed left to right from the first result in the window, as a plain loop would: the same
  // bits as the naive mean.
  if (time >= spec_.grace_period) h.sum.push_back((h.sum.empty() ? 0.0 : h.sum.back()) + score);
  if (!std::isnan(score)) h.best = std::max(h.best, score);
}

double MedianStopping::running_mean(const History& h, double t, bool drop_last) const {
  size_t first = h.time.size() - h.sum.size();  // results before grace_period are not summed
  size_t to =
      static_cast<size_t>(std::upper_bound(h.time.begin(), h.time.end(), t) - h.time.begin());
  if (drop_last) to = std::min(to, h.time.size() - 1);
  if (to <= first) return std::nan("");
  return h.sum[to - first - 1] / static_cast<double>(to - first);
}

namespace {

void insert_mean(std::vector<double>& sorted, size_t& nans, double m) {
  if (std::isnan(m))
    ++nans;
  else
    sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), m), m);
}

void erase_mean(std::vector<double>& sorted, size_t& nans, double m) {
  if (std::isnan(m)) {
    if (nans) --nans;
    return;
  }
  auto it = std::lower_bound(sorted.begin(), sorted.end(), m);
  if (it != sorted.end() && *it == m) sorted.erase(it);
}

}  // namespace

void MedianStopping::update_windows(const History& h, std::optional<double> last, double time) {
  if (windows_.empty()) return;
  if (last && *last == time) {  // a second result at the same time: its mean there changes
    if (auto w = windows_.find(time); w != windows_.end()) {
      erase_mean(w->second.sorted, w->second.nans, running_mean(h, time, true));
      insert_mean(w->second.sorted, w->second.nans, running_mean(h, time));
    }
    return;
  }
  // It now reaches every time in (last, time]: its mean there joins those windows.
  auto from = last ? windows_.upper_bound(*last) : windows_.begin();
  for (auto w = from; w != windows_.end() && w->first <= time; ++w)
    insert_mean(w->second.sorted, w->second.nans, running_mean(h, w->first));
}

double MedianStopping::median_of_others(const History& own, const Observation& r) {
  const double t = r.time;
  auto w = windows_.find(t);
  if (w == windows_.end() && windows_.size() < kMaxWindows && ++asked_[t] >= 2) {
    asked_.erase(t);  // asked again: worth keeping
    Window fresh;
    for (const auto& [id, other] : trials_)
      if (!other.time.empty() && other.time.back() >= t)
        insert_mean(fresh.sorted, fresh.nans, running_mean(other, t));
    w = windows_.emplace(t, std::move(fresh)).first;
  }
  std::vector<double> naive;
  const std::vector<double>* sorted = nullptr;
  size_t skip = SIZE_MAX;  // the index in *sorted of the trial's own mean, left out
  size_t nans = 0;
  if (w != windows_.end()) {
    sorted = &w->second.sorted;
    nans = w->second.nans;
    double mine = running_mean(own, t);  // the trial itself is in the window: leave it out
    if (std::isnan(mine))
      --nans;
    else
      skip = static_cast<size_t>(std::lower_bound(sorted->begin(), sorted->end(), mine) -
                                 sorted->begin());
  } else {
    if (asked_.size() > 100'000) asked_.clear();  // times that never repeat
    for (const auto& [id, other] : trials_)
      if (id != r.trial && !other.time.empty() && other.time.back() >= t)
        insert_mean(naive, nans, running_mean(other, t));
    sorted = &naive;
  }
  size_t n = sorted->size() - (skip == SIZE_MAX ? 0 : 1);
  if (n + nans < static_cast<size_t>(spec_.min_samples_required)) return std::nan("");
  // numpy's median: NaN if any mean is NaN (a trial with no result in the window), which stops
  // nobody.
  if (nans) return std::nan("");
  auto at = [&](size_t k) { return (*sorted)[k < skip ? k : k + 1]; };
  return n % 2 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

Decision MedianStopping::on_result(const Observation& r) {
  History& h = trials_[r.trial];
  std::optional<double> last;
  if (!h.time.empty()) last = h.time.back();
  if (last && r.time < *last) return Decision::go();  // time must grow
  add(h, r.time, r.score);
  update_windows(h, last, r.time);
  if (r.time < spec_.grace_period) return Decision::go();
  double median = median_of_others(h, r);
  if (h.best < median) return {Action::kStop, Why::kMedian, r.time};  // false for NaN
  return Decision::go();
}

void MedianStopping::on_complete(const std::string& trial, const std::optional<Observation>& last) {
  (void)trial;
  (void)last;  // its results were all seen by on_result; a finished trial still counts
}

namespace {

// {"time": [..], "score": [..]} of results [from, end) of a history.
json slice(const std::vector<double>& time, const std::vector<double>& score, size_t from) {
  return {
      {"time", std::vector<double>(time.begin() + static_cast<std::ptrdiff_t>(from), time.end())},
      {"score",
       std::vector<double>(score.begin() + static_cast<std::ptrdiff_t>(from), score.end())}};
}

}  // namespace

json MedianStopping::save() const {
  json trials = json::object();
  for (const auto& [id, h] : trials_)
    if (h.logged < h.time.size()) trials[id] = slice(h.time, h.score, h.logged);
  return {{"type", "median_stopping"}, {"trials", std::move(trials)}};
}

std::string MedianStopping::log_tail() const {
  std::string out;
  for (const auto& [id, h] : trials_) {
    if (h.logged == h.time.size()) continue;
    json line = slice(h.time, h.score, h.logged);
    line["trial"] = id;
    out += state::seal_object(util::dump_json_ext(line));  // NaN stays NaN
    out += '\n';
  }
  return out;
}

void MedianStopping::log_written() {
  for (auto& [id, h] : trials_) h.logged = h.time.size();
}

Result<void> MedianStopping::add_saved(History& h, const json& saved, const std::string& trial) {
  const json& time = saved.is_object() ? saved.value("time", json()) : json();
  const json& score = saved.is_object() ? saved.value("score", json()) : json();
  if (!time.is_array() || !score.is_array() || time.size() != score.size())
    return std::unexpected(
        Error{"trial " + trial + ": 'time' and 'score' must be lists of one length"});
  for (size_t i = 0; i < time.size(); ++i) {
    // A NaN score was saved as null by older states (JSON has no NaN).
    if (!time[i].is_number() || !(score[i].is_number() || score[i].is_null()))
      return std::unexpected(Error{"trial " + trial + ": a value is not a number"});
    double tm = time[i].get<double>();
    double sc = score[i].is_null() ? std::nan("") : score[i].get<double>();
    if (!h.time.empty() && tm < h.time.back())
      return std::unexpected(Error{"trial " + trial + ": times must not decrease"});
    add(h, tm, sc);
  }
  return {};
}

Result<void> MedianStopping::restore_log(std::string_view text, const std::string& where) {
  from_log_.clear();
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t nl = text.find('\n', start);
    ++line_no;
    auto bad = [&](const std::string& what) {
      from_log_.clear();
      return std::unexpected(Error{where + ":" + std::to_string(line_no) + ": " + what});
    };
    if (nl == std::string_view::npos) return bad("the last line is cut short");
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    if (state::check_object(line) != state::SealCheck::kValid)
      return bad("damaged line (its checksum does not match)");
    json j = util::parse_json_ext(line);
    if (j.is_discarded() || !j.is_object() || !j.contains("trial") || !j["trial"].is_string())
      return bad("not a line of the median_stopping log");
    std::string id = j["trial"].get<std::string>();
    History& h = from_log_[id];
    if (auto r = add_saved(h, j, id); !r) return bad(r.error().message);
    h.logged = h.time.size();
  }
  return {};
}

Result<void> MedianStopping::restore(const json& state) {
  auto bad = [this](const std::string& what) {
    from_log_.clear();
    return std::unexpected(Error{"scheduler state (median_stopping): " + what});
  };
  if (!state.is_object() || state.value("type", "") != "median_stopping")
    return bad("not a median_stopping state");
  const auto& t = state.find("trials");
  if (t == state.end() || !t->is_object()) return bad("'trials' is not a mapping");
  // The log's results first (restore_log), then the state's: those written since.
  trials_ = std::move(from_log_);
  from_log_.clear();
  windows_.clear();
  asked_.clear();
  for (auto it = t->begin(); it != t->end(); ++it)
    if (auto r = add_saved(trials_[it.key()], *it, it.key()); !r) return bad(r.error().message);
  return {};
}

}  // namespace tune::sched
