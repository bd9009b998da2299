// Schedulers as pure units: scripted results in, the exact decisions out.
#include <catch2/catch.hpp>
#include <cmath>

#include "sched/asha.hpp"
#include "sched/hyperband.hpp"
#include "sched/median_stopping.hpp"

using namespace tune;
using sched::Action;
using sched::Observation;
using sched::Why;

namespace {

spec::SchedulerSpec asha_spec(double max_t, double grace, double rf, int brackets = 1) {
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kAsha;
  s.max_t = max_t;
  s.grace_period = grace;
  s.reduction_factor = rf;
  s.brackets = brackets;
  return s;
}

Observation obs(const std::string& id, double t, double score) {
  return {id, t, score};
}

}  // namespace

TEST_CASE("nan_percentile interpolates linearly as numpy and ignores NaN", "[sched]") {
  CHECK(sched::nan_percentile({1, 2, 3, 4}, 75) == Approx(3.25));
  CHECK(sched::nan_percentile({4, NAN, 1, 3, 2}, 75) == Approx(3.25));
  CHECK(sched::nan_percentile({0.5, 1.0}, 100.0 * 2 / 3) == Approx(0.5 + 0.5 * 2 / 3));
  CHECK(sched::nan_percentile({7}, 30) == 7);
  CHECK(std::isnan(sched::nan_percentile({}, 50)));
  CHECK(std::isnan(sched::nan_percentile({NAN}, 50)));
}

TEST_CASE("asha rungs sit at grace * rf^k per bracket, as Ray counts them", "[sched]") {
  sched::Asha one(asha_spec(81, 1, 3), 0);
  CHECK(one.milestones(0) == std::vector<double>{81, 27, 9, 3, 1});
  sched::Asha two(asha_spec(81, 1, 3, 2), 0);
  CHECK(two.milestones(1) == std::vector<double>{81, 27, 9, 3});
  sched::Asha g(asha_spec(100, 2, 4), 0);  // log4(50) = 2.8: 3 rungs
  CHECK(g.milestones(0) == std::vector<double>{32, 8, 2});
}

TEST_CASE("asha stops a trial strictly below the (1-1/rf) quantile of the others at its rung",
          "[sched]") {
  sched::Asha a(asha_spec(81, 1, 3), 0);
  for (std::string id : {"A", "B", "C", "D", "E"}) a.on_trial_add(id, 0);
  // An empty rung never stops.
  CHECK(a.on_result(obs("A", 1, 1.0)).action == Action::kContinue);
  // Others: {1.0}: cutoff 1.0.
  auto b = a.on_result(obs("B", 1, 0.5));
  CHECK(b.action == Action::kStop);
  CHECK(b.why == Why::kCutoff);
  CHECK(b.at == 1);
  // Others {1.0, 0.5}: cutoff 0.8333: 2.0 goes on.
  CHECK(a.on_result(obs("C", 1, 2.0)).action == Action::kContinue);
  // Others {0.5, 1, 2}: cutoff 1.3333: 0.9 stops, 1.3333 exactly does not (strictly below).
  CHECK(a.on_result(obs("D", 1, 0.9)).action == Action::kStop);
  CHECK(a.on_result(obs("E", 1, 4.0 / 3.0 + 1e-12)).action == Action::kContinue);
  // Each rung is checked once: A's later results before 3 change nothing, even bad ones.
  CHECK(a.on_result(obs("A", 2, -100)).action == Action::kContinue);
}

TEST_CASE("asha checks only the highest rung not yet recorded, and stops at max_t", "[sched]") {
  sched::Asha a(asha_spec(27, 1, 3), 0);
  a.on_trial_add("A", 0);
  a.on_trial_add("B", 1);
  CHECK(a.on_result(obs("A", 1, 5)).action == Action::kContinue);
  CHECK(a.on_result(obs("A", 9, 5)).action == Action::kContinue);  // recorded at 9, not 3
  CHECK(a.on_result(obs("B", 1, 1)).action == Action::kStop);      // below A at rung 1
  a.on_trial_add("C", 2);
  // C jumps to t=5: rung 3 is checked; nobody recorded there (A skipped it): continue.
  CHECK(a.on_result(obs("C", 5, -1)).action == Action::kContinue);
  // A NaN value is recorded but never stops; it does not move the cutoff either.
  a.on_trial_add("D", 3);
  CHECK(a.on_result(obs("D", 9, NAN)).action == Action::kContinue);
  a.on_trial_add("E", 4);
  CHECK(a.on_result(obs("E", 9, 4)).action == Action::kStop);  // others {5, NaN}: cutoff 5
  auto end = a.on_result(obs("A", 27, 0));
  CHECK(end.action == Action::kStop);
  CHECK(end.why == Why::kMaxT);
}

TEST_CASE("asha state saved and restored decides as the original", "[sched]") {
  auto spec = asha_spec(81, 1, 3, 3);
  sched::Asha a(spec, 7), b(spec, 7);
  std::vector<Observation> script;
  for (int i = 0; i < 40; ++i) {
    std::string id = "t" + std::to_string(i);
    a.on_trial_add(id, i);
    for (int t = 1; t <= 9; ++t) script.push_back(obs(id, t, std::sin(i * 1.7 + t)));
  }
  for (size_t i = 0; i < script.size() / 2; ++i) (void)a.on_result(script[i]);
  REQUIRE(b.restore(a.save()));
  for (size_t i = script.size() / 2; i < script.size(); ++i) {
    auto x = a.on_result(script[i]), y = b.on_result(script[i]);
    CHECK(x.action == y.action);
  }
  CHECK(a.save() == b.save());
  // A state of another kind or shape is refused with a message naming the scheduler.
  auto bad = b.restore(nlohmann::json{{"type", "asha"}, {"brackets", nlohmann::json::array()}});
  REQUIRE(!bad);
  CHECK(bad.error().message.find("asha") != std::string::npos);
}

TEST_CASE("asha draws brackets with probability proportional to e^(rungs - most rungs)",
          "[sched]") {
  sched::Asha a(asha_spec(81, 1, 3, 2), 42), again(asha_spec(81, 1, 3, 2), 42);
  int first = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string id = std::to_string(i);
    a.on_trial_add(id, i);
    again.on_trial_add(id, i);
    CHECK(a.bracket_of(id) == again.bracket_of(id));  // seeded per trial: reproducible
    first += *a.bracket_of(id) == 0;
  }
  // 5 rungs against 4: p = 1 / (1 + e^-1) = 0.731.
  CHECK(first / 4000.0 == Approx(0.731).margin(0.025));
}

TEST_CASE("median stopping compares a trial's best with the median of running means", "[sched]") {
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kMedianStopping;
  s.grace_period = 2;
  s.min_samples_required = 2;
  sched::MedianStopping m(s);
  // A: 1, 2, 3, 4; B: 3, 3, 3, 3 (scores, larger is better).
  for (int t = 1; t <= 4; ++t) {
    CHECK(m.on_result(obs("A", t, t)).action == Action::kContinue);
    CHECK(m.on_result(obs("B", t, 3)).action == Action::kContinue);  // one other: too few
  }
  // C at t=1: before the grace period.
  CHECK(m.on_result(obs("C", 1, 0)).action == Action::kContinue);
  // C at t=3: A's mean over [2,3] = 2.5, B's 3: median 2.75; C's best 2.7 < 2.75: stops.
  auto d = m.on_result(obs("C", 3, 2.7));
  CHECK(d.action == Action::kStop);
  CHECK(d.why == Why::kMedian);
  // D at t=3 with best 2.75 (not strictly below) goes on; so does a best reached earlier.
  CHECK(m.on_result(obs("D", 3, 2.75)).action == Action::kContinue);
  CHECK(m.on_result(obs("E", 2, 9)).action == Action::kContinue);
  CHECK(m.on_result(obs("E", 4, 0)).action == Action::kContinue);  // best 9
  // Waits for enough trials at or past its time (unlike Ray, never pauses).
  CHECK(m.on_result(obs("F", 5, -50)).action == Action::kContinue);
  sched::MedianStopping r(s);
  REQUIRE(r.restore(m.save()));
  CHECK(r.save() == m.save());
}

TEST_CASE("hyperband: bracket sizes as the paper, filled most exploratory first", "[sched]") {
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kHyperBand;
  s.max_t = 81;
  s.reduction_factor = 3;
  sched::HyperBand h(s);
  CHECK(h.s_max() == 4);
  CHECK(h.n0(4) == 81);
  CHECK(h.r0(4) == 1);
  CHECK(h.n0(3) == 34);
  CHECK(h.r0(3) == 3);
  CHECK(h.n0(2) == 15);
  CHECK(h.r0(2) == 9);
  CHECK(h.n0(1) == 8);
  CHECK(h.r0(1) == 27);
  CHECK(h.n0(0) == 5);
  CHECK(h.r0(0) == 81);
}

TEST_CASE("hyperband pauses at the rung until the bracket reaches it, then keeps the best",
          "[sched]") {
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kHyperBand;
  s.max_t = 9;
  s.reduction_factor = 3;
  sched::HyperBand h(s);  // s_max 2: bracket 2 has 9 trials from budget 1
  for (int i = 1; i <= 9; ++i) h.on_trial_add("t" + std::to_string(i), i);
  for (int i = 1; i <= 8; ++i) {
    auto d = h.on_result(obs("t" + std::to_string(i), 1, i % 3 == 0 ? 5 : i));
    CHECK(d.action == Action::kPause);
    CHECK(d.why == Why::kRung);
    CHECK_FALSE(h.may_resume("t" + std::to_string(i)));
    CHECK(h.take_verdicts().empty());
  }
  // Scores: t1 1, t2 2, t3 5, t4 4, t5 5, t6 5, t7 7, t8 8, t9 0 — ceil(9/3) = 3 go on:
  // t8, t7 and the earliest of the 5s (t3).
  auto last = h.on_result(obs("t9", 1, 0));
  CHECK(last.action == Action::kStop);
  CHECK(last.why == Why::kCutoff);
  std::map<std::string, Action> v;
  for (const auto& x : h.take_verdicts()) v[x.trial] = x.action;
  CHECK(v.size() == 8);
  for (std::string id : {"t3", "t7", "t8"}) {
    CHECK(v[id] == Action::kContinue);
    CHECK(h.may_resume(id));
  }
  for (std::string id : {"t1", "t2", "t4", "t5", "t6"}) {
    CHECK(v[id] == Action::kStop);
    CHECK_FALSE(h.may_resume(id));
  }
  // Next rung at 3: one of three goes on, to max_t = 9, where it stops.
  CHECK(h.on_result(obs("t3", 2, 1)).action == Action::kContinue);
  CHECK(h.on_result(obs("t3", 3, 1)).action == Action::kPause);
  CHECK(h.on_result(obs("t7", 3, 2)).action == Action::kPause);
  CHECK(h.on_result(obs("t8", 3, 0.5)).action == Action::kStop);
  v.clear();
  for (const auto& x : h.take_verdicts()) v[x.trial] = x.action;
  REQUIRE(v.size() == 2);
  CHECK(v["t3"] == Action::kStop);
  CHECK(v["t7"] == Action::kContinue);
  auto end = h.on_result(obs("t7", 9, 3));
  CHECK(end.action == Action::kStop);
  CHECK(end.why == Why::kMaxT);
  // The 10th trial opens bracket 1 (n0 5, budget 3).
  h.on_trial_add("t10", 10);
  CHECK(h.on_result(obs("t10", 1, 0)).action == Action::kContinue);
  CHECK(h.on_result(obs("t10", 3, 0)).action == Action::kPause);
}

TEST_CASE("hyperband decides a partial bracket once no more trials come, and survives restore",
          "[sched]") {
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kHyperBand;
  s.max_t = 9;
  s.reduction_factor = 3;
  sched::HyperBand h(s);
  h.on_trial_add("a", 0);
  h.on_trial_add("b", 1);
  CHECK(h.on_result(obs("a", 1, 1)).action == Action::kPause);
  CHECK(h.on_result(obs("b", 1, 2)).action == Action::kPause);
  sched::HyperBand r(s);
  REQUIRE(r.restore(h.save()));
  for (auto* x : {&h, &r}) {
    x->on_no_more_trials();
    auto v = x->take_verdicts();
    // The nominal size decides: ceil(9/3) = 3 >= 2 live trials, so both go on.
    REQUIRE(v.size() == 2);
    CHECK(v[0].action == Action::kContinue);
    CHECK(v[1].action == Action::kContinue);
  }
  // A trial that ends by itself no longer holds its bracket back.
  sched::HyperBand e(s);
  for (int i = 0; i < 9; ++i) e.on_trial_add(std::to_string(i), i);
  for (int i = 0; i < 8; ++i)
    CHECK(e.on_result(obs(std::to_string(i), 1, i)).action == Action::kPause);
  e.on_complete("8", std::nullopt);
  auto v = e.take_verdicts();
  CHECK(v.size() == 8);
}
