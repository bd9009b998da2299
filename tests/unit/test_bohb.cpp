// BOHB's model half as a pure unit: where results are recorded, which budget the model uses,
// that it is reproducible across a save/restore, that it concentrates where random search does
// not, and the budgets the schedulers give it.
#include <catch2/catch.hpp>
#include <cmath>

#include "sched/budgets.hpp"
#include "search/bohb.hpp"
#include "search/bohb_kde.hpp"
#include "search/rng.hpp"
#include "search/searcher.hpp"
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
  b.observe("b", c, 11, NAN);  // 9 has b's value already
  CHECK(b.values_at(9) == 1);
  b.observe("c", c, 27, INFINITY);  // a failure: recorded as the worst value
  b.observe("d", c, 27, NAN);
  CHECK(b.values_at(27) == 2);
  b.observe("e", json{{"x", 2.0}}, 27, 1.0);  // outside the space: not recorded
  b.observe("f", json{{"y", 0.5}}, 27, 1.0);
  CHECK(b.values_at(27) == 2);
}

TEST_CASE("bohb models the largest budget with enough values, else draws at random", "[search]") {
  Space s = space_of("  x: {uniform: [0, 1]}\n  y: {uniform: [0, 1]}\n");
  BohbOptions o;
  o.random_fraction = 0;
  Bohb b = make(s, {1, 3, 9}, 7, o);
  // As hpbandster: a model needs a good group of max(parameters + 1, 15% of n) = 3 values and a
  // bad group of the next (up to) max(3, 85% of n) holding more than 2: n >= 6. Until then the
  // suggestions are the draws of random search.
  CHECK(Bohb::values_for_model({}, 2) == 6);
  for (int i = 0; i < 6; ++i) {
    CHECK(!b.model_budget());
    json c = b.suggest(static_cast<uint64_t>(i), {});
    CHECK(c == generate(s, 7, static_cast<uint64_t>(i)).config);
    b.observe("t" + std::to_string(i), c, 1, loss(c, 1));
  }
  CHECK(b.model_budget() == 1);
  json model = b.suggest(6, {});
  CHECK(model != generate(s, 7, 6).config);
  for (int i = 0; i < 5; ++i) {
    json c = generate(s, 7, static_cast<uint64_t>(i)).config;
    b.observe("t" + std::to_string(i), c, 3, loss(c, 3));
  }
  CHECK(b.model_budget() == 1);  // 5 values at 3 are not enough
  json c = generate(s, 7, 5).config;
  b.observe("t5", c, 3, loss(c, 3));
  CHECK(b.model_budget() == 3);  // the larger budget once it has enough
}

TEST_CASE("bohb's values needed for a model follow hpbandster's split", "[search]") {
  // d parameters: good = max(d + 1, floor(15% n)), bad = min(n - good, max(d + 1, floor(85% n))),
  // both must hold more than d values.
  CHECK(Bohb::values_for_model({}, 1) == 4);
  CHECK(Bohb::values_for_model({}, 4) == 10);  // the digits space
  BohbOptions o;
  o.min_points_in_model = 1;  // raised to d + 1, as hpbandster does
  CHECK(Bohb::values_for_model(o, 4) == 10);
  o.min_points_in_model = 8;
  CHECK(Bohb::values_for_model(o, 4) == 13);  // good 8, bad 5
  o = {};
  o.top_n_percent = 50;
  CHECK(Bohb::values_for_model(o, 4) == 10);
  CHECK(Bohb::values_for_model(o, 0) == 2);
}

TEST_CASE("bohb's model is joint: it proposes the good combinations of values", "[search]") {
  // The good configs lie near (0.2, 0.2) and (0.8, 0.8). Each coordinate alone is good near 0.2
  // and near 0.8, so a model of each parameter on its own (univariate TPE) proposes (0.2, 0.8)
  // and (0.8, 0.2) as often as the good corners; BOHB's product-kernel KDE does not.
  Space s = space_of("  x: {uniform: [0, 1]}\n  y: {uniform: [0, 1]}\n");
  auto dist = [](const json& c, double x, double y) {
    return std::hypot(c["x"].get<double>() - x, c["y"].get<double>() - y);
  };
  auto f = [&](const json& c) { return std::min(dist(c, 0.2, 0.2), dist(c, 0.8, 0.8)); };
  int good = 0, cross = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    BohbOptions o;
    o.random_fraction = 0;
    Bohb b = make(s, {1}, seed, o);
    for (uint64_t i = 0; i < 100; ++i) {  // random configs: both good corners in the good group
      json c = generate(s, 100 + seed, i).config;
      b.observe("t" + std::to_string(i), c, 1, f(c));
    }
    for (uint64_t i = 0; i < 100; ++i) {
      json c = b.suggest(i, {});
      good += f(c) < 0.2;
      cross += std::min(dist(c, 0.2, 0.8), dist(c, 0.8, 0.2)) < 0.2;
    }
  }
  CHECK(good > 200);        // of 400
  CHECK(cross * 8 < good);  // random search: as many in the cross corners as in the good
}

TEST_CASE("bohb ranks failures last: the model moves away from them", "[search]") {
  // x < 0.5 fails (NaN); among the others, smaller is better. Without failures counted as the
  // worst the model only sees x >= 0.5 and their ranking pulls it toward 0.5 and beyond.
  Space s = space_of("  x: {uniform: [0, 1]}\n");
  int failed = 0, n = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    BohbOptions o;
    o.random_fraction = 0;
    Bohb b = make(s, {1}, seed, o);
    for (uint64_t i = 0; i < 40; ++i) {
      json c = b.suggest(i, {});
      double x = c["x"].get<double>();
      if (i >= 20) failed += x < 0.5, ++n;
      b.observe("t" + std::to_string(i), c, 1, x < 0.5 ? NAN : x);
    }
  }
  CHECK(failed * 5 < n);
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

TEST_CASE("bohb's KDE: normal-reference bandwidths, product kernels, Aitchison-Aitken",
          "[search]") {
  std::vector<kde::Var> one = {kde::Var{}};
  // Rows 0, 0.5, 1: std 0.40825 (ddof 0), n^(-1/5) for d = 1.
  auto k = kde::fit({{0.0}, {0.5}, {1.0}}, one, 1e-3);
  double bw = 1.06 * std::sqrt(1.0 / 6.0) * std::pow(3.0, -0.2);
  CHECK(k.bw[0] == Approx(bw));
  // The density at 0.5: the mean of the three Gaussians there.
  double at = 0;
  for (double r : {0.0, 0.5, 1.0})
    at += std::exp(-0.5 * (0.5 - r) * (0.5 - r) / (bw * bw)) / (bw * std::sqrt(2 * M_PI)) / 3;
  CHECK(kde::log_pdf(k, one, std::vector<double>{0.5}) == Approx(std::log(at)));
  // Identical rows: the bandwidth is min_bandwidth.
  CHECK(kde::fit({{0.3}, {0.3}}, one, 1e-3).bw[0] == 1e-3);
  // A categorical dimension of 4 choices: the rule on the indices (0 and 3: std 1.5) would give
  // 1.38; kept at 3/4, where the kernel is uniform.
  std::vector<kde::Var> cat = {kde::Var{.levels = 4}};
  auto c = kde::fit({{0.0}, {3.0}}, cat, 1e-3);
  CHECK(c.bw[0] == Approx(0.75));
  CHECK(kde::log_pdf(c, cat, std::vector<double>{1.0}) == Approx(std::log(0.25)));
  auto c2 = kde::fit({{1.0}, {1.0}, {1.0}, {2.0}}, cat, 1e-3);
  double h = c2.bw[0];
  CHECK(h == Approx(1.06 * std::sqrt(3.0 / 16.0) * std::pow(4.0, -0.2)));
  // On choice 1: three rows give 1 - h, one gives h / 3.
  CHECK(kde::log_pdf(c2, cat, std::vector<double>{1.0}) ==
        Approx(std::log((3 * (1 - h) + h / 3) / 4)));
  // Two dimensions: the product of the kernels, averaged over rows.
  std::vector<kde::Var> two = {kde::Var{}, kde::Var{.levels = 2}};
  auto m = kde::fit({{0.2, 0.0}, {0.8, 1.0}, {0.5, 1.0}}, two, 1e-3);
  double x = 0.3, p = 0;
  for (auto [r, ch] : {std::pair{0.2, 0.0}, {0.8, 1.0}, {0.5, 1.0}}) {
    double g =
        std::exp(-0.5 * (x - r) * (x - r) / (m.bw[0] * m.bw[0])) / (m.bw[0] * std::sqrt(2 * M_PI));
    p += g * (ch == 0.0 ? 1 - m.bw[1] : m.bw[1]) / 3;
  }
  CHECK(kde::log_pdf(m, two, std::vector<double>{x, 0.0}) == Approx(std::log(p)));
  // Candidates stay in [0, 1] and on the choices; with bandwidth_factor they spread wider.
  Rng rng(5);
  for (int i = 0; i < 2000; ++i) {
    auto a = kde::sample(m, two, 3, rng);
    REQUIRE((a[0] >= 0 && a[0] <= 1));
    REQUIRE((a[1] == 0 || a[1] == 1));
  }
  auto near = kde::fit({{0.45}, {0.5}, {0.55}}, one, 1e-3);  // bw 0.035
  double spread1 = 0, spread3 = 0;
  for (int i = 0; i < 2000; ++i) {
    spread1 += std::abs(kde::sample(near, one, 1, rng)[0] - 0.5);
    spread3 += std::abs(kde::sample(near, one, 3, rng)[0] - 0.5);
  }
  CHECK(spread3 > 2 * spread1);
  CHECK(spread1 / 2000 < 0.07);
}

TEST_CASE("bohb's bandwidth keys are parsed and checked", "[search]") {
  std::string head =
      "trial: {command: [a]}\nparam_space: {x: {uniform: [0, 1]}}\nmetric: m\nmode: min\n"
      "scheduler: {type: hyperband, max_t: 9}\n";
  auto ok = spec::parse_experiment(
      head + "search_alg: {type: bohb, bandwidth_factor: 2, min_bandwidth: 0.01}\n", "/tmp/e.yaml");
  if (!ok) FAIL(ok.error().message);
  CHECK(ok->search_alg.bohb.bandwidth_factor == 2);
  CHECK(ok->search_alg.bohb.min_bandwidth == 0.01);
  auto bad =
      spec::parse_experiment(head + "search_alg: {type: bohb, min_bandwidth: 0}\n", "/tmp/e.yaml");
  REQUIRE(!bad);
  CHECK(bad.error().message.find("min_bandwidth") != std::string::npos);
  CHECK(!spec::parse_experiment(head + "search_alg: {type: tpe, bandwidth_factor: 2}\n",
                                "/tmp/e.yaml"));
}

TEST_CASE("bohb records a trial in ERROR as the worst value at the rung it was running toward",
          "[search]") {
  Space s = space_of("  x: {uniform: [0, 1]}\n");
  SearcherSpec spec;
  spec.kind = SearcherKind::kBohb;
  spec.bohb_target = {{9, 1, 3}, "training_iteration", "loss", false};  // any order
  auto searcher = make_searcher(spec, s, 10, 1);
  REQUIRE(searcher);
  auto& b = **searcher;
  json c0 = b.suggest(0).config, c1 = b.suggest(1).config, c2 = b.suggest(2).config;
  json r1 = {{"training_iteration", 1}, {"loss", 0.5}};
  b.on_result("00000", r1);
  b.on_complete({"00000", c0, std::nullopt, r1, true});       // crashed at epoch 2: worst at 3
  b.on_complete({"00001", c1, std::nullopt, nullptr, true});  // before any result: worst at 1
  json r9 = {{"training_iteration", 9}, {"loss", 0.25}};
  b.on_result("00002", r9);
  b.on_complete({"00002", c2, std::nullopt, r9, true});  // past the top rung: keeps its value
  auto values = [&](double budget) {
    std::vector<std::pair<std::string, json>> out;
    json st = b.save();
    for (const auto& at : st["budgets"])
      if (at["budget"] == budget)
        for (const auto& v : at["values"]) out.emplace_back(v["trial"], v["value"]);
    return out;
  };
  using V = std::vector<std::pair<std::string, json>>;
  CHECK(values(1) == V{{"00000", 0.5}, {"00001", nullptr}});
  CHECK(values(3) == V{{"00000", nullptr}});
  CHECK(values(9) == V{{"00002", 0.25}});
}
