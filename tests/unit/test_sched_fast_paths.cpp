// The incremental bookkeeping of asha (sorted rungs) and median stopping (kept windows) must
// decide exactly as the rules computed from scratch. References here are the rules written
// naively; the schedulers are driven with seeded random results that include NaN, repeated
// times and times that are asked once, and must agree on every decision, before and after a
// save/restore.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>

#include "sched/asha.hpp"
#include "sched/median_stopping.hpp"
#include "util/json_ext.hpp"

using namespace tune;
using sched::Action;
using sched::Observation;

namespace {

// Median stopping from scratch: every decision computes every other trial's running mean.
class NaiveMedian {
 public:
  NaiveMedian(double grace, int min_samples) : grace_(grace), min_(min_samples) {}
  Action on_result(const Observation& r) {
    auto& h = trials_[r.trial];
    if (!h.empty() && r.time < h.back().first) return Action::kContinue;
    h.emplace_back(r.time, r.score);
    if (r.time < grace_) return Action::kContinue;
    double best = -INFINITY;
    for (auto& [t, s] : h)
      if (!std::isnan(s)) best = std::max(best, s);
    std::vector<double> means;
    for (auto& [id, o] : trials_) {
      if (id == r.trial || o.back().first < r.time) continue;
      double sum = 0;
      int n = 0;
      for (auto& [t, s] : o)
        if (t >= grace_ && t <= r.time) sum += s, ++n;
      means.push_back(n ? sum / n : std::nan(""));
    }
    if (means.size() < static_cast<size_t>(min_)) return Action::kContinue;
    for (double m : means)
      if (std::isnan(m)) return Action::kContinue;
    std::sort(means.begin(), means.end());
    size_t n = means.size();
    double median = n % 2 ? means[n / 2] : (means[n / 2 - 1] + means[n / 2]) / 2;
    return best < median ? Action::kStop : Action::kContinue;
  }

 private:
  double grace_;
  int min_;
  std::map<std::string, std::vector<std::pair<double, double>>> trials_;
};

// A round of results: trials report in a random interleaving, times growing by 0 (a repeated
// time), 1 (iterations) or a fraction (seconds, times asked once).
std::vector<Observation> script(uint64_t seed, int trials, int steps) {
  std::mt19937_64 rng(seed);
  std::vector<double> now(trials, 0);
  std::vector<Observation> out;
  for (int i = 0; i < trials * steps; ++i) {
    int k = static_cast<int>(rng() % static_cast<uint64_t>(trials));
    uint64_t kind = rng() % 10;
    now[k] += kind == 0 ? 0.0 : kind == 1 ? 0.25 * static_cast<double>(rng() % 4) : 1.0;
    double score = static_cast<double>(rng() % 1000) / 100.0;
    if (rng() % 200 == 0) score = std::nan("");
    out.push_back({"t" + std::to_string(k), now[k], score});
  }
  return out;
}

}  // namespace

TEST_CASE("median stopping decides as the rule computed from scratch", "[sched]") {
  int stops = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    spec::SchedulerSpec s;
    s.kind = spec::SchedulerKind::kMedianStopping;
    s.grace_period = static_cast<double>(seed % 3);
    s.min_samples_required = 1 + static_cast<int>(seed % 4);
    sched::MedianStopping fast(s);
    NaiveMedian ref(s.grace_period, s.min_samples_required);
    auto rs = script(seed, 12, 15);
    for (size_t i = 0; i < rs.size(); ++i) {
      if (i == rs.size() / 2) {  // halfway: through the state file's JSON, windows rebuilt
        sched::MedianStopping again(s);
        REQUIRE(again.restore(util::parse_json_ext(util::dump_json_ext(fast.save()))));
        fast = std::move(again);
      }
      Action want = ref.on_result(rs[i]);
      INFO("seed " << seed << ", result " << i << ": " << rs[i].trial << " at " << rs[i].time);
      REQUIRE(fast.on_result(rs[i]).action == want);
      stops += want == Action::kStop;
    }
  }
  CHECK(stops >= 20);  // the scripts do exercise stopping
}

TEST_CASE("asha's sorted rungs give the cutoffs of nan_percentile", "[sched]") {
  int stops = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    spec::SchedulerSpec s;
    s.kind = spec::SchedulerKind::kAsha;
    s.max_t = 1000;  // no trial reaches it
    s.grace_period = 1;
    s.reduction_factor = 2 + static_cast<double>(seed % 3);
    sched::Asha fast(s, seed);
    // The reference: every rung's values kept as given, the cutoff by nan_percentile.
    std::map<double, std::map<std::string, double>> rungs;
    std::vector<double> milestones = fast.milestones(0);
    auto rs = script(seed, 30, 12);
    for (size_t i = 0; i < rs.size(); ++i) {
      const auto& r = rs[i];
      if (i == 0 || rs[i - 1].trial != r.trial) fast.on_trial_add(r.trial, i);
      if (i == rs.size() / 2) {
        sched::Asha again(s, seed);
        REQUIRE(again.restore(util::parse_json_ext(util::dump_json_ext(fast.save()))));
        fast = std::move(again);
      }
      bool want = false;
      for (double m : milestones) {  // highest first
        auto& rung = rungs[m];
        if (r.time < m || rung.count(r.trial)) continue;
        std::vector<double> others;
        for (auto& [id, v] : rung) others.push_back(v);
        double cutoff = sched::nan_percentile(others, (1 - 1 / s.reduction_factor) * 100);
        want = !std::isnan(cutoff) && r.score < cutoff;
        rung[r.trial] = r.score;
        break;
      }
      INFO("seed " << seed << ", result " << i);
      REQUIRE((fast.on_result(r).action == Action::kStop) == want);
      stops += want;
    }
  }
  CHECK(stops >= 20);
}

TEST_CASE("median stopping restored from its log plus its state decides as from scratch",
          "[sched]") {
  int stops = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    spec::SchedulerSpec s;
    s.kind = spec::SchedulerKind::kMedianStopping;
    s.grace_period = static_cast<double>(seed % 3);
    s.min_samples_required = 1 + static_cast<int>(seed % 4);
    sched::MedianStopping fast(s);
    NaiveMedian ref(s.grace_period, s.min_samples_required);
    auto rs = script(seed, 12, 15);
    std::string log;  // what the controller appended to the scheduler's log
    for (size_t i = 0; i < rs.size(); ++i) {
      if (i % 37 == 36) {  // a state write: the new results go to the log, the state sheds them
        log += fast.log_tail();
        fast.log_written();
        CHECK(fast.log_tail().empty());
        CHECK(fast.save()["trials"].empty());
      }
      if (i == rs.size() / 2 || i == rs.size() * 3 / 4) {  // a resume: log, then the state
        std::string state = util::dump_json_ext(fast.save());
        sched::MedianStopping again(s);
        REQUIRE(again.restore_log(log, "scheduler.log"));
        REQUIRE(again.restore(util::parse_json_ext(state)));
        CHECK(util::dump_json_ext(again.save()) == state);
        fast = std::move(again);
      }
      Action want = ref.on_result(rs[i]);
      INFO("seed " << seed << ", result " << i << ": " << rs[i].trial << " at " << rs[i].time);
      REQUIRE(fast.on_result(rs[i]).action == want);
      stops += want == Action::kStop;
    }
    // The whole history, as an old state holds it (no log): loads and decides the same.
    sched::MedianStopping whole(s), old(s);
    for (const auto& r : rs) (void)whole.on_result(r);
    REQUIRE(old.restore(util::parse_json_ext(util::dump_json_ext(whole.save()))));
    for (int k = 0; k < 12; ++k) {
      Observation next{"t" + std::to_string(k), 1000, 5.0};
      REQUIRE(old.on_result(next).action == whole.on_result(next).action);
    }
  }
  CHECK(stops >= 10);
}

TEST_CASE("median stopping refuses a damaged or cut log, naming the line", "[sched]") {
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kMedianStopping;
  sched::MedianStopping m(s);
  (void)m.on_result({"a", 1, 0.5});
  (void)m.on_result({"b", 1, 0.25});
  std::string log = m.log_tail();
  REQUIRE(std::count(log.begin(), log.end(), '\n') == 2);
  sched::MedianStopping r(s);
  REQUIRE(r.restore_log(log, "x.log"));
  REQUIRE(r.restore(m.save()));
  CHECK(r.save() == m.save());
  auto cut = r.restore_log(log.substr(0, log.size() - 5), "x.log");
  REQUIRE(!cut);
  CHECK(cut.error().message == "x.log:2: the last line is cut short");
  std::string flipped = log;
  flipped[flipped.find("0.25")] = '9';  // still JSON, but not what was written
  auto bad = r.restore_log(flipped, "x.log");
  REQUIRE(!bad);
  CHECK(bad.error().message == "x.log:2: damaged line (its checksum does not match)");
}
