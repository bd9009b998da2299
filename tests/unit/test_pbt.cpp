// PBT as a pure unit: scripted results and a scripted population in, the exact decisions out.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "sched/pbt.hpp"

using namespace tune;
using sched::Action;
using sched::Why;
using json = nlohmann::json;
using Kind = search::Domain::Kind;

namespace {

struct FakePopulation final : sched::Population {
  std::map<std::string, json> configs;
  std::set<std::string> with_checkpoint;
  bool waiting = false;
  const json* config(const std::string& t) const override {
    auto it = configs.find(t);
    return it == configs.end() ? nullptr : &it->second;
  }
  bool has_checkpoint(const std::string& t) const override { return with_checkpoint.count(t) > 0; }
  bool trials_waiting() const override { return waiting; }
};

search::Param param(std::vector<std::string> path, Kind k, std::vector<double> args) {
  search::Param p;
  p.path = std::move(path);
  p.domain.kind = k;
  p.domain.args = std::move(args);
  return p;
}

search::Param list(std::vector<std::string> path, json values) {
  search::Param p;
  p.path = std::move(path);
  p.domain.kind = Kind::kChoice;
  p.domain.values = std::move(values);
  return p;
}

spec::SchedulerSpec pbt_spec(double interval, double q = 0.25) {
  spec::SchedulerSpec s;
  s.kind = spec::SchedulerKind::kPbt;
  s.perturbation_interval = interval;
  s.quantile_fraction = q;
  s.resample_probability = 0;
  s.perturbation_factors = {2.0};
  s.mutations = {param({"lr"}, Kind::kUniform, {0.0, 1.0})};
  return s;
}

sched::Observation obs(const std::string& id, double t, double score) {
  return {id, t, score};
}

}  // namespace

TEST_CASE("pbt quantiles hold ceil(n*q) trials, at most floor(n/2); NaN ranks worst",
          "[sched][pbt]") {
  sched::Pbt p(pbt_spec(1), 7);
  for (std::string id : {"A", "B", "C", "D", "E"}) p.on_trial_add(id, id[0] - 'A');
  (void)p.on_result(obs("A", 1, 3));
  CHECK(p.quantiles().first.empty());  // one ranked trial: no quantiles
  (void)p.on_result(obs("B", 1, 1));
  (void)p.on_result(obs("C", 1, NAN));
  (void)p.on_result(obs("D", 1, 2));
  auto [lo, up] = p.quantiles();  // ceil(4 * 0.25) = 1
  CHECK(lo == std::vector<std::string>{"C"});
  CHECK(up == std::vector<std::string>{"A"});
  sched::Pbt h(pbt_spec(1, 0.5), 7);  // ceil(5 * 0.5) = 3, at most floor(5 / 2) = 2
  for (std::string id : {"A", "B", "C", "D", "E"}) {
    h.on_trial_add(id, id[0] - 'A');
    (void)h.on_result(obs(id, 1, id[0] - 'A'));
  }
  std::tie(lo, up) = h.quantiles();
  CHECK(lo == std::vector<std::string>{"A", "B"});
  CHECK(up == std::vector<std::string>{"D", "E"});
  // A finished trial is not ranked.
  h.on_complete("E", std::nullopt);
  std::tie(lo, up) = h.quantiles();
  CHECK(up == std::vector<std::string>{"C", "D"});
}

TEST_CASE(
    "pbt checks every perturbation_interval after burn-in: the top saves, the bottom "
    "exploits a top trial with an explored config",
    "[sched][pbt]") {
  auto spec = pbt_spec(4);
  spec.burn_in_period = 2;
  sched::Pbt p(spec, 1);
  FakePopulation pop;
  pop.configs = {{"A", {{"lr", 0.1}, {"x", 1}}}, {"B", {{"lr", 0.3}, {"x", 2}}}};
  pop.with_checkpoint = {"B"};
  p.attach(&pop);
  p.on_trial_add("A", 0);
  p.on_trial_add("B", 1);
  // Not yet an interval since the start (time 0).
  CHECK(p.on_result(obs("A", 3, 0.5)).action == Action::kContinue);
  auto a4 = p.on_result(obs("A", 4, 0.5));  // alone: no quantiles
  CHECK(a4.action == Action::kContinue);
  CHECK_FALSE(a4.save);
  auto b4 = p.on_result(obs("B", 4, 0.9));  // top of two
  CHECK(b4.action == Action::kContinue);
  CHECK(b4.save);
  CHECK(p.on_result(obs("A", 7, 0.4)).action == Action::kContinue);  // 7 - 4 < 4
  auto a8 = p.on_result(obs("A", 8, 0.4));
  REQUIRE(a8.action == Action::kExploit);
  CHECK(a8.why == Why::kExploit);
  CHECK(a8.donor == "B");
  CHECK(a8.at == 8);
  // B's config, lr perturbed by the only factor (2), x untouched.
  CHECK(a8.config == json{{"lr", 0.6}, {"x", 2}});
  // It took over B's clock of checks (4): its next check is at 8 again.
  CHECK(p.priority("A") == 4);
}

TEST_CASE("pbt burn_in_period delays the first check", "[sched][pbt]") {
  auto spec = pbt_spec(2);
  spec.burn_in_period = 5;
  sched::Pbt p(spec, 1);
  p.on_trial_add("A", 0);
  p.on_trial_add("B", 1);
  CHECK_FALSE(p.on_result(obs("B", 4, 1)).save);  // past the interval, not past burn-in
  CHECK(p.priority("B") == 0);
  (void)p.on_result(obs("A", 5, 0));
  CHECK(p.on_result(obs("B", 5, 1)).save);
  CHECK(p.priority("B") == 5);
}

TEST_CASE("pbt skips an exploit whose donor has no checkpoint, naming the donor", "[sched][pbt]") {
  sched::Pbt p(pbt_spec(1), 3);
  FakePopulation pop;
  pop.configs = {{"A", {{"lr", 0.1}}}, {"B", {{"lr", 0.2}}}};
  p.attach(&pop);
  p.on_trial_add("A", 0);
  p.on_trial_add("B", 1);
  (void)p.on_result(obs("B", 1, 5));
  auto a = p.on_result(obs("A", 1, 1));
  CHECK(a.action == Action::kContinue);
  CHECK(a.donor == "B");
}

TEST_CASE("pbt pauses a trial at its check while others wait; the least advanced runs first",
          "[sched][pbt]") {
  sched::Pbt p(pbt_spec(2), 3);
  FakePopulation pop;
  pop.waiting = true;
  p.attach(&pop);
  p.on_trial_add("A", 0);
  p.on_trial_add("B", 1);
  CHECK(p.on_result(obs("A", 1, 1)).action == Action::kContinue);
  auto a = p.on_result(obs("A", 2, 1));
  CHECK(a.action == Action::kPause);
  CHECK(a.why == Why::kTurn);
  CHECK(a.save);
  CHECK(p.priority("A") == 2);
  CHECK(p.priority("B") == 0);
  pop.waiting = false;
  CHECK(p.on_result(obs("B", 2, 3)).action == Action::kContinue);
}

TEST_CASE("pbt explore: factors clipped to the bounds; integers round and move at least 1",
          "[sched][pbt]") {
  spec::SchedulerSpec s = pbt_spec(1);
  s.mutations = {param({"u"}, Kind::kUniform, {0.0, 1.0}),
                 param({"n"}, Kind::kRandInt, {1, 10}),  // [1, 10)
                 param({"q"}, Kind::kQUniform, {0, 1, 0.25}),
                 param({"opt", "lr"}, Kind::kLogUniform, {1e-4, 1e-1})};
  search::Rng rng(1);
  s.perturbation_factors = {1.2};
  json up = sched::explore(s, {{"u", 0.9}, {"n", 1}, {"q", 0.5}, {"opt", {{"lr", 0.09}}}}, rng);
  CHECK(up["u"] == 1.0);          // 1.08 clipped to hi
  CHECK(up["n"] == 2);            // 1.2 rounds to 1: moves up by 1 (Ray keeps 1)
  CHECK(up["q"] == 0.5 + 0.25);   // 0.6 rounds back to 0.5: one step of q
  CHECK(up["opt"]["lr"] == 0.1);  // 0.108 clipped
  CHECK(up["n"].is_number_integer());
  s.perturbation_factors = {0.8};
  json down = sched::explore(s, {{"u", 0.5}, {"n", 1}, {"q", 0.0}, {"opt", {{"lr", 0.01}}}}, rng);
  CHECK(down["u"] == Approx(0.4));
  CHECK(down["n"] == 1);  // 0 is below the range
  CHECK(down["q"] == 0.0);
  CHECK(down["opt"]["lr"] == Approx(0.008));
  json top = sched::explore(s, {{"u", 0.5}, {"n", 9}, {"q", 1.0}, {"opt", {{"lr", 0.01}}}}, rng);
  CHECK(top["n"] == 7);  // 7.2 rounds to 7
  CHECK(top["q"] == 0.75);
}

TEST_CASE("pbt explore: a list value moves one place (staying at the ends) or is resampled",
          "[sched][pbt]") {
  spec::SchedulerSpec s = pbt_spec(1);
  s.mutations = {list({"bs"}, json::array({16, 32, 64}))};
  search::Rng rng(5);
  std::set<int> from_mid, from_low;
  for (int i = 0; i < 200; ++i) {
    from_mid.insert(sched::explore(s, {{"bs", 32}}, rng)["bs"].get<int>());
    from_low.insert(sched::explore(s, {{"bs", 16}}, rng)["bs"].get<int>());
  }
  CHECK(from_mid == std::set<int>{16, 64});  // never stays in the middle
  CHECK(from_low == std::set<int>{16, 32});  // stays put at the end, or moves up
  // A value not in the list, or an absent key, is drawn from the list.
  std::set<int> drawn;
  for (int i = 0; i < 200; ++i) {
    drawn.insert(sched::explore(s, {{"bs", 48}}, rng)["bs"].get<int>());
    CHECK(sched::explore(s, json::object(), rng).contains("bs"));
  }
  CHECK(drawn == std::set<int>{16, 32, 64});
}

TEST_CASE("pbt explore: resample_probability 1 draws from the distribution; absent keys too",
          "[sched][pbt]") {
  spec::SchedulerSpec s = pbt_spec(1);
  s.resample_probability = 1;
  s.mutations = {param({"lr"}, Kind::kLogUniform, {1e-4, 1e-1})};
  search::Rng rng(9);
  std::set<double> seen;
  for (int i = 0; i < 50; ++i) {
    double v = sched::explore(s, {{"lr", 0.05}}, rng)["lr"].get<double>();
    CHECK(v >= 1e-4);
    CHECK(v <= 1e-1);
    seen.insert(v);
  }
  CHECK(seen.size() == 50);
  s.resample_probability = 0;
  s.perturbation_factors = {2};
  double drawn = sched::explore(s, {{"other", 1}}, rng)["lr"].get<double>();  // absent: drawn
  CHECK(drawn >= 1e-4);
  CHECK(drawn <= 1e-1);
}

TEST_CASE("pbt is seeded: same seed, same decisions; a saved and restored state decides alike",
          "[sched][pbt]") {
  spec::SchedulerSpec s = pbt_spec(1, 0.5);
  s.resample_probability = 0.5;
  s.perturbation_factors = {1.2, 0.8};
  FakePopulation pop;
  std::vector<std::string> ids = {"A", "B", "C", "D"};
  for (const auto& id : ids) {
    pop.configs[id] = {{"lr", 0.5}};
    pop.with_checkpoint.insert(id);
  }
  auto script = [&](sched::Pbt& p, int from, int to) {
    std::vector<std::string> out;
    for (int t = from; t <= to; ++t)
      for (size_t i = 0; i < ids.size(); ++i) {
        auto d = p.on_result(obs(ids[i], t, std::sin(t * 7.0 + static_cast<double>(i))));
        out.push_back(ids[i] + ":" + std::to_string(static_cast<int>(d.action)) + ":" + d.donor +
                      ":" + d.config.dump());
      }
    return out;
  };
  auto fresh = [&](uint64_t seed) {
    auto p = std::make_unique<sched::Pbt>(s, seed);
    p->attach(&pop);
    for (size_t i = 0; i < ids.size(); ++i) p->on_trial_add(ids[i], i);
    return p;
  };
  auto a = fresh(11), b = fresh(11), c = fresh(12);
  auto whole = script(*a, 1, 10);
  CHECK(script(*b, 1, 10) == whole);
  CHECK(script(*c, 1, 10) != whole);
  size_t exploits = 0;
  for (const auto& line : whole) exploits += line.find(":3:") != std::string::npos;
  CHECK(exploits > 5);
  // Interrupted after 5, restored into a new scheduler: the rest is the same.
  auto first = fresh(11);
  auto head = script(*first, 1, 5);
  json saved = json::parse(first->save().dump());
  auto second = fresh(11);
  REQUIRE(second->restore(saved));
  auto tail = script(*second, 6, 10);
  head.insert(head.end(), tail.begin(), tail.end());
  CHECK(head == whole);
  // A state that is not pbt's is refused, naming the field.
  CHECK(second->restore(json{{"type", "asha"}}).error().message ==
        "scheduler state (pbt): not a pbt state");
  CHECK(second->restore(json{{"type", "pbt"}, {"draws", -1}, {"trials", json::object()}})
            .error()
            .message == "scheduler state (pbt): 'draws' is not a count");
}
