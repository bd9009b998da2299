#include "sched/hyperband.hpp"

#include <algorithm>
#include <cmath>

namespace tune::sched {

HyperBand::HyperBand(const spec::SchedulerSpec& spec) : spec_(spec) {
  s_max_ = std::max(
      0, static_cast<int>(std::lround(std::log(spec_.max_t) / std::log(spec_.reduction_factor))));
}

int64_t HyperBand::n0(int s) const {
  return static_cast<int64_t>(
      std::ceil((s_max_ + 1.0) / (s + 1.0) * std::pow(spec_.reduction_factor, s) - 1e-9));
}

double HyperBand::r0(int s) const {
  return std::floor(spec_.max_t * std::pow(spec_.reduction_factor, -s) + 1e-9);
}

HyperBand::Bracket& HyperBand::open_bracket() {
  if (!brackets_.empty() && brackets_.back().members.size() < size_t(brackets_.back().n0))
    return brackets_.back();
  int s = brackets_.empty() || brackets_.back().s == 0 ? s_max_ : brackets_.back().s - 1;
  while (s > 0 && r0(s) < 1) --s;  // a bracket whose first budget rounds to 0 is skipped
  Bracket b;
  b.s = s;
  b.n0 = b.n = n0(s);
  b.milestone = s == 0 ? spec_.max_t : r0(s);
  brackets_.push_back(std::move(b));
  return brackets_.back();
}

HyperBand::Member* HyperBand::find(const std::string& trial, Bracket** in) {
  auto it = at_.find(trial);
  if (it == at_.end()) return nullptr;
  Bracket& b = brackets_[it->second];
  if (in) *in = &b;
  for (auto& m : b.members)
    if (m.trial == trial) return &m;
  return nullptr;
}

void HyperBand::on_trial_add(const std::string& trial, uint64_t index) {
  (void)index;
  if (at_.count(trial)) return;
  Bracket& b = open_bracket();
  b.members.push_back({trial});
  at_[trial] = brackets_.size() - 1;
}

std::optional<Decision> HyperBand::settle(Bracket& b, const std::string& reporting) {
  if (!full(b)) return std::nullopt;
  std::vector<Member*> live;
  for (auto& m : b.members) {
    if (!m.live) continue;
    if (m.time < b.milestone) return std::nullopt;  // someone has not reached the rung yet
    live.push_back(&m);
  }
  if (live.empty()) return std::nullopt;
  // The best ceil(n / rf) go on; NaN ranks last; ties keep the order trials joined in.
  b.n = static_cast<int64_t>(std::ceil(double(b.n) / spec_.reduction_factor - 1e-9));
  std::stable_sort(live.begin(), live.end(), [](const Member* x, const Member* y) {
    if (std::isnan(y->score)) return !std::isnan(x->score);
    return !std::isnan(x->score) && x->score > y->score;
  });
  double reached = b.milestone;
  b.milestone = std::min(b.milestone * spec_.reduction_factor, spec_.max_t);
  std::optional<Decision> own;
  for (size_t i = 0; i < live.size(); ++i) {
    Member& m = *live[i];
    bool good = static_cast<int64_t>(i) < b.n;
    if (!good) m.live = false;
    Action a = good ? Action::kContinue : Action::kStop;
    Why why = good ? Why::kNone : Why::kCutoff;
    if (m.trial == reporting)
      own = Decision{a, why, m.time};
    else
      verdicts_.push_back({m.trial, a, why, reached});
  }
  return own;
}

Decision HyperBand::on_result(const Observation& r) {
  Bracket* b = nullptr;
  Member* m = find(r.trial, &b);
  if (r.time >= spec_.max_t) {
    if (m) {
      m->live = false;
      m->time = r.time;
      m->score = r.score;
      (void)settle(*b, "");  // the others may have been waiting for it
    }
    return {Action::kStop, Why::kMaxT, r.time};
  }
  if (!m) return Decision::go();
  m->time = r.time;
  if (r.time < b->milestone) return Decision::go();
  m->score = r.score;
  if (auto d = settle(*b, r.trial)) return *d;
  return {Action::kPause, Why::kRung, r.time};
}

void HyperBand::on_complete(const std::string& trial, const std::optional<Observation>& last) {
  (void)last;
  Bracket* b = nullptr;
  Member* m = find(trial, &b);
  if (!m || !m->live) return;
  m->live = false;
  (void)settle(*b, "");
}

void HyperBand::on_no_more_trials() {
  if (no_more_) return;
  no_more_ = true;
  for (auto& b : brackets_) (void)settle(b, "");
}

std::vector<Verdict> HyperBand::take_verdicts() {
  std::vector<Verdict> out;
  out.swap(verdicts_);
  return out;
}

bool HyperBand::may_resume(const std::string& trial) const {
  auto it = at_.find(trial);
  if (it == at_.end()) return true;
  const Bracket& b = brackets_[it->second];
  for (const auto& m : b.members)
    if (m.trial == trial) return m.live && m.time < b.milestone;
  return true;
}

json HyperBand::save() const {
  json brackets = json::array();
  for (const auto& b : brackets_) {
    json members = json::array();
    for (const auto& m : b.members)
      members.push_back(
          {{"trial", m.trial}, {"time", m.time}, {"score", m.score}, {"live", m.live}});
    brackets.push_back({{"s", b.s},
                        {"n0", b.n0},
                        {"n", b.n},
                        {"milestone", b.milestone},
                        {"members", std::move(members)}});
  }
  return {{"type", "hyperband"}, {"brackets", std::move(brackets)}, {"no_more", no_more_}};
}

Result<void> HyperBand::restore(const json& state) {
  auto bad = [](const std::string& what) {
    return std::unexpected(Error{"scheduler state (hyperband): " + what});
  };
  if (!state.is_object() || state.value("type", "") != "hyperband")
    return bad("not a hyperband state");
  auto bs = state.find("brackets");
  if (bs == state.end() || !bs->is_array()) return bad("'brackets' is not a list");
  std::vector<Bracket> brackets;
  std::map<std::string, size_t> at;
  for (const auto& bj : *bs) {
    if (!bj.is_object()) return bad("a bracket is not a mapping");
    Bracket b;
    auto num = [&](const char* k) -> std::optional<double> {
      auto it = bj.find(k);
      if (it == bj.end() || !it->is_number()) return std::nullopt;
      return it->get<double>();
    };
    auto s = num("s"), n0v = num("n0"), n = num("n"), ms = num("milestone");
    if (!s || !n0v || !n || !ms || *s < 0 || *s > s_max_ || *n0v < 1 || *n0v > 1e12 || *n < 0 ||
        *n > *n0v || !(*ms > 0))
      return bad("a bracket's s, n0, n or milestone is missing or out of range");
    b.s = static_cast<int>(*s);
    b.n0 = static_cast<int64_t>(*n0v);
    b.n = static_cast<int64_t>(*n);
    b.milestone = *ms;
    auto members = bj.find("members");
    if (members == bj.end() || !members->is_array()) return bad("'members' is not a list");
    for (const auto& mj : *members) {
      if (!mj.is_object() || !mj.value("trial", json()).is_string() ||
          !mj.value("time", json()).is_number() || !mj.value("score", json()).is_number() ||
          !mj.value("live", json()).is_boolean())
        return bad("a member needs trial, time, score and live");
      Member m{mj["trial"].get<std::string>(), mj["time"].get<double>(), mj["score"].get<double>(),
               mj["live"].get<bool>()};
      if (!at.emplace(m.trial, brackets.size()).second)
        return bad("trial " + m.trial + " is in two brackets");
      b.members.push_back(std::move(m));
    }
    brackets.push_back(std::move(b));
  }
  brackets_ = std::move(brackets);
  at_ = std::move(at);
  no_more_ = state.value("no_more", false);
  verdicts_.clear();
  return {};
}

}  // namespace tune::sched
