// BOHB's model half as a pure unit: where results are recorded, which budget the model uses,
// that it is reproducible across a save/restore, that it concentrates where random search does
// not, and the budgets the schedulers give it.
#include <catch2/catch.hpp>
#include <cmath>

#include "sched/budgets.hpp"
#include "search/bohb.hpp"
#include "spec/parse.hpp"
#include "util/json_ext.hpp"

using namespace tune;
using namespace tune::search;

namespace {

Space space_of(const std::string& yaml) {
  auto r = spec::parse_experiment("trial: {command: [a]}\nparam_space:\n" + yaml, "/tmp/e.yaml");
  if (!r) FAIL(r.error().message);
  return r->space;
}

Bohb make(const Space& s, std::vector<double> budgets, uint64_t seed, BohbOptions o = {}) {
  auto b = Bohb::create(s, o, std::move(budgets), seed);
  if (!b) FAIL(b.error().message);
  return *b;
}

// A learning curve: the loss at budget t of a config x is (x - 0.3)^2 + 1 / t.
double loss(const json& c, double t) {
  double x = c["x"].get<double>();
  return (x - 0.3) * (x - 0.3) + 1.0 / t;
}

}  // namespace

TEST_CASE("bohb records each result at the highest budget not yet recorded", "[search]") {
  Space s = space_of("  x: {uniform: [0, 1]}\n");
  Bohb b = make(s, {9, 1, 3, 27}, 1);
  json c = {{"x", 0.5}};
  b.observe("a", c, 0.5, 1.0);  // below every budget
  CHECK(b.values_at(1) == 0);
  b.observe("a", c, 1, 1.0);
  b.observe("a", c, 2, 1.0);  // 1 is recorded, 3 not reached
  CHECK(b.values_at(1) == 1);
  b.observe("a", c, 4, 1.0);
  CHECK(b.values_at(3) == 1);
  b.observe("b", c, 10, 1.0);  // jumps straight to 9
  CHECK(b.values_at(9) == 1);
  CHECK(b.values_at(3) == 1);
  b.observe("b", c, 11, NAN);  // not recorded
  b.observe("c", c, 27, INFINITY);
  CHECK(b.values_at(27) == 0);
}

TEST_CASE("bohb models the largest budget with enough values, else draws at random", "[search]") {
  Space s = space_of("  x: {uniform: [0, 1]}\n  y: {uniform: [0, 1]}\n");
  BohbOptions o;
  o.random_fraction = 0;
  Bohb b = make(s, {1, 3, 9}, 7, o);
  // Random until a budget holds parameters + 1 = 3 values: the draws of random search.
  for (int i = 0; i < 3; ++i) {
    CHECK(!b.model_budget());
    json c = b.suggest(static_cast<uint64_t>(i), {});
    CHECK(c == generate(s, 7, static_cast<uint64_t>(i)).config);
    b.observe("t" + std::to_string(i), c, 1, loss(c, 1));
  }
  CHECK(b.model_budget() == 1);
  json model = b.suggest(3, {});
  CHECK(model != generate(s, 7, 3).config);
  for (int i = 0; i < 3; ++i) {
    json c = generate(s, 7, static_cast<uint64_t>(i)).config;
    b.observe("t" + std::to_string(i), c, 3, loss(c, 3));
  }
  CHECK(b.model_budget() == 3);  // the larger budget once it has enough
}

TEST_CASE("bohb is reproducible and survives a save/restore through the state's JSON", "[search]") {
  Space s = space_of(
      "  x: {uniform: [0, 1]}\n  lr: {loguniform: [1.0e-4, 1.0e-1]}\n"
      "  opt: {choice: [sgd, adam]}\n");
  Bohb a = make(s, sched::budgets([] {
                  spec::SchedulerSpec sp;
                  sp.kind = spec::SchedulerKind::kHyperBand;
                  sp.max_t = 27;
                  sp.reduction_factor = 3;
                  return sp;
                }()),
                11);
  Bohb b = a;
  std::vector<json> seen;
  for (uint64_t i = 0; i < 40; ++i) {
    if (i == 20) {  // b goes through save/restore halfway
      auto text = util::dump_json_ext(b.save());
      Bohb r = make(s, {1, 3, 9, 27}, 11);
      REQUIRE(r.restore(util::parse_json_ext(text)));
      b = r;
    }
    json ca = a.suggest(i, {}), cb = b.suggest(i, {});
    REQUIRE(ca == cb);
    double t = static_cast<double>(1 + i % 27);
    a.observe("t" + std::to_string(i), ca, t, loss(ca, t));
    b.observe("t" + std::to_string(i), cb, t, loss(cb, t));
    seen.push_back(ca);
  }
  CHECK(b.save() == a.save());
  Bohb other = make(s, {1, 3, 9, 27}, 12);
  CHECK(other.suggest(0, {}) != seen[0]);  // another seed, other draws
}

TEST_CASE("bohb concentrates near the optimum where random search does not", "[search]") {
  Space s = space_of("  x: {uniform: [0, 1]}\n");
  double model_err = 0, random_err = 0;
  int n_model = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    BohbOptions o;
    o.random_fraction = 0;
    Bohb b = make(s, {1, 3, 9}, seed, o);
    for (uint64_t i = 0; i < 60; ++i) {
      json c = b.suggest(i, {});
      if (i >= 20) {
        model_err += std::abs(c["x"].get<double>() - 0.3);
        random_err += std::abs(generate(s, seed, i).config["x"].get<double>() - 0.3);
        ++n_model;
      }
      for (double t : {1.0, 3.0, 9.0}) b.observe("t" + std::to_string(i), c, t, loss(c, t));
    }
  }
  // Random draws of U(0, 1) are on average 0.29 from 0.3; the model's much closer.
  CHECK(random_err / n_model > 0.2);
  CHECK(model_err / n_model < 0.6 * random_err / n_model);
}

TEST_CASE("bohb models the int and qrandn kinds on their grids", "[search]") {
  Space s = space_of(
      "  li: {lograndint: [1, 1000]}\n  qi: {qrandint: [0, 100, 10]}\n"
      "  qli: {qlograndint: [4, 256, 4]}\n  qn: {qrandn: [0, 1, 0.1]}\n");
  auto f = [](const json& c, double t) {
    return std::abs(std::log(c["li"].get<double>() / 30)) +
           std::abs(c["qi"].get<double>() - 70) / 50 +
           std::abs(std::log(c["qli"].get<double>() / 64)) + std::abs(c["qn"].get<double>() - 0.5) +
           1.0 / t;
  };
  BohbOptions o;
  o.random_fraction = 0;
  Bohb a = make(s, {1, 3}, 4, o), b = make(s, {1, 3}, 4, o);
  double model = 0, random = 0;
  for (uint64_t i = 0; i < 50; ++i) {
    json c = a.suggest(i, {});
    REQUIRE(c == b.suggest(i, {}));
    int64_t li = c["li"], qi = c["qi"], qli = c["qli"];
    double qn = c["qn"];
    CHECK((li >= 1 && li <= 999));
    CHECK((qi >= 0 && qi <= 100 && qi % 10 == 0));
    CHECK((qli >= 4 && qli <= 256 && qli % 4 == 0));
    CHECK(qn == Approx(std::round(qn * 10) / 10).margin(1e-12));
    if (i >= 25) model += f(c, 3), random += f(generate(s, 4, i).config, 3);
    for (double t : {1.0, 3.0}) {
      a.observe("t" + std::to_string(i), c, t, f(c, t));
      b.observe("t" + std::to_string(i), c, t, f(c, t));
    }
  }
  CHECK(model < 0.7 * random);
}

TEST_CASE("bohb refuses what it cannot model and options out of range", "[search]") {
  Space grid = space_of("  x: {grid_search: [1, 2]}\n");
  auto g = Bohb::create(grid, {}, {1, 3}, 1);
  REQUIRE(!g);
  CHECK(g.error().message.find("x") != std::string::npos);
  Space s = space_of("  x: {uniform: [0, 1]}\n");
  BohbOptions o;
  o.top_n_percent = 100;
  CHECK(!Bohb::create(s, o, {1}, 1));
  o = {};
  o.random_fraction = 1.5;
  CHECK(!Bohb::create(s, o, {1}, 1));
  CHECK(!Bohb::create(s, {}, {}, 1));  // no budgets: no scheduler with rungs
  Bohb b = make(s, {1, 3}, 1);
  CHECK(!b.restore(
      json{{"type", "bohb"}, {"budgets", {{{"budget", 5}, {"values", json::array()}}}}}));
  CHECK(!b.restore(json{{"type", "tpe"}}));
  CHECK(!b.restore(json{{"type", "bohb"}, {"budgets", {{{"budget", 1}, {"values", {1}}}}}}));
}

TEST_CASE("schedulers' budgets: asha's rungs and hyperband's brackets", "[sched]") {
  spec::SchedulerSpec a;
  a.kind = spec::SchedulerKind::kAsha;
  a.max_t = 81;
  a.grace_period = 1;
  a.reduction_factor = 3;
  CHECK(sched::budgets(a) == std::vector<double>{1, 3, 9, 27, 81});
  spec::SchedulerSpec h = a;
  h.kind = spec::SchedulerKind::kHyperBand;
  h.max_t = 27;
  CHECK(sched::budgets(h) == std::vector<double>{1, 3, 9, 27});
  spec::SchedulerSpec m;
  m.kind = spec::SchedulerKind::kMedianStopping;
  CHECK(sched::budgets(m).empty());
}
