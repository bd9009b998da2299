// TPE: the Parzen estimator's arithmetic on hand-checked numbers, and the searcher's contract
// (determinism, save/restore, domains, the prior, that it concentrates where random search does
// not, and the parameters it refuses).
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "search/parzen.hpp"
#include "search/rng.hpp"
#include "search/searcher.hpp"
#include "search/space.hpp"
#include "search/tpe.hpp"
#include "search/tpe_dims.hpp"
#include "spec/parse.hpp"

using namespace tune;
using namespace tune::search;

namespace {
Space space_of(const std::string& yaml) {
  auto r = spec::parse_experiment("trial: {command: [a]}\nparam_space:\n" + yaml, "/tmp/e.yaml");
  if (!r) FAIL(r.error().message);
  return r->space;
}

Tpe make(const Space& s, uint64_t seed, TpeOptions o = {}) {
  auto t = Tpe::create(s, o, seed);
  if (!t) FAIL(t.error().message);
  return *t;
}

// Runs `n` sequential trials of objective f from `tpe`, appending to `done`.
template <typename F>
void run(Tpe& tpe, std::vector<Observation>& done, int n, F f) {
  for (int i = 0; i < n; ++i) {
    json c = tpe.suggest(done, {});
    done.push_back({c, f(c)});
  }
}

double quadratic(const json& c) {
  double x = c["x"];
  return (x - 1.3) * (x - 1.3);
}
}  // namespace

TEST_CASE("normal cdf, ppf and interval masses", "[tpe]") {
  CHECK(parzen::norm_cdf(0) == 0.5);
  CHECK(parzen::norm_cdf(1.959963984540054) == Approx(0.975).epsilon(1e-12));
  for (double p : {1e-300, 1e-10, 0.01, 0.3, 0.5, 0.9, 0.999999})
    CHECK(parzen::norm_cdf(parzen::norm_ppf(p)) == Approx(p).epsilon(1e-12));
  CHECK(parzen::norm_ppf(0.975) == Approx(1.959963984540054).epsilon(1e-13));
  // P(-1 <= Z <= 1) = erf(1 / sqrt 2) = 0.682689492137086.
  CHECK(parzen::log_gauss_mass(-1, 1) == Approx(std::log(0.682689492137086)).epsilon(1e-13));
  CHECK(parzen::log_gauss_mass(2, 3) == Approx(std::log(0.0214002339165491)).epsilon(1e-11));
  CHECK(parzen::log_gauss_mass(-3, -2) == parzen::log_gauss_mass(2, 3));
  // Far in a tail Phi underflows; the mass stays finite: ~ phi(-40) / 40.
  double deep = parzen::log_gauss_mass(-41, -40);
  CHECK(std::isfinite(deep));
  CHECK(deep == Approx(-800 - std::log(40.0) - 0.5 * std::log(2 * M_PI)).epsilon(1e-4));
  // Inverse-cdf sampling of a truncated normal: u = 0.5 is the median, the ends are the bounds.
  CHECK(parzen::truncnorm_at(-1, 1, 0.5) == Approx(0).margin(1e-15));
  CHECK(parzen::truncnorm_at(-1, 2, 0.0) == -1);
  // Median of N(0, 1) on [1, 2]: Phi^-1((Phi(1) + Phi(2)) / 2).
  CHECK(parzen::truncnorm_at(1, 2, 0.5) == Approx(1.336440347745247).epsilon(1e-12));
  CHECK(parzen::truncnorm_at(0, 0, 0.5) == 0);  // empty interval: no endless mirroring
  double tail = parzen::truncnorm_at(-60, -59, 0.3);
  CHECK((tail >= -60 && tail <= -59));
}

TEST_CASE("gamma and Optuna's default weights", "[tpe]") {
  CHECK(parzen::n_below(10, 0.1, 25) == 1);
  CHECK(parzen::n_below(11, 0.1, 25) == 2);
  CHECK(parzen::n_below(30, 0.1, 25) == 3);
  CHECK(parzen::n_below(1000, 0.1, 25) == 25);
  CHECK(parzen::default_weights(3) == std::vector<double>{1, 1, 1});
  auto w = parzen::default_weights(30);  // the 5 oldest ramp linspace(1/30, 1, 5)
  REQUIRE(w.size() == 30);
  CHECK(w[0] == Approx(1.0 / 30));
  CHECK(w[1] == Approx(0.275));
  CHECK(w[3] == Approx(0.7583333333));
  CHECK(w[4] == 1);
  CHECK(w[29] == 1);
}

// Reference values were computed with Optuna 3.1's _ParzenEstimator on the same observations
// (univariate, prior weight 1, magic clip, no endpoints); its continuous densities are
// bandwidth-weighted (the default here), its quantized masses are not.
TEST_CASE("the Parzen estimator matches hand-checked bandwidths and densities", "[tpe]") {
  parzen::Support unit{.low = 0, .high = 1, .bounded = true, .prior_mu = 0.5, .range = 1};
  std::vector<double> obs{0.2, 0.6}, w{1, 1};
  auto m = parzen::fit(obs, w, unit, {});
  // Sorted centres 0.2, 0.5 (prior), 0.6: 0.2 -> its one neighbour 0.3 away; 0.6 -> 0.1, clipped
  // up to range / min(100, 1 + 3) = 0.25; the prior keeps sigma = range = 1.
  CHECK(m.sigmas == std::vector<double>{0.3, 0.25, 1.0});
  CHECK(m.weights[0] == Approx(1.0 / 3));
  CHECK(parzen::log_pdf(m, 0.3) == Approx(-0.54708814).epsilon(1e-7));
  CHECK(parzen::log_pdf(m, 0.9) == Approx(-0.9127713).epsilon(1e-7));
  CHECK(parzen::log_pdf(m, 0.0) == Approx(-0.78171391).epsilon(1e-7));
  CHECK(parzen::log_pdf(m, 1.5) == -std::numeric_limits<double>::infinity());
  // The normalised mixture: integrates to 1 on [0, 1], and at 0.3 is
  // sum_i w_i phi((0.3 - mu_i) / sigma_i) / (sigma_i Z_i) with Z_i the mass inside [0, 1].
  parzen::FitOptions normalised;
  normalised.bandwidth_weighted = false;
  auto mn = parzen::fit(obs, w, unit, normalised);
  double integral = 0;
  for (int i = 0; i < 10000; ++i) integral += std::exp(parzen::log_pdf(mn, (i + 0.5) / 1e4)) / 1e4;
  CHECK(integral == Approx(1).epsilon(1e-6));
  double by_hand = 0;
  for (size_t i = 0; i < 3; ++i) {
    double mu = mn.mus[i], s = mn.sigmas[i];
    double z = (0.3 - mu) / s;
    double mass = parzen::norm_cdf((1 - mu) / s) - parzen::norm_cdf(-mu / s);
    by_hand += std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI) / (s * mass) / 3;
  }
  CHECK(std::exp(parzen::log_pdf(mn, 0.3)) == Approx(by_hand).epsilon(1e-12));

  // randint [0, 10): support [-0.5, 9.5]; the mass of [v - 0.5, v + 0.5].
  parzen::Support ints{.low = -0.5, .high = 9.5, .bounded = true, .prior_mu = 4.5, .range = 10};
  std::vector<double> iobs{2, 3, 7}, iw{1, 1, 1};
  auto mi = parzen::fit(iobs, iw, ints, {});
  CHECK(mi.sigmas == std::vector<double>{2, 2, 2.5, 10});
  CHECK(parzen::log_mass(mi, 2.5, 3.5) == Approx(-1.97070548).epsilon(1e-7));
  CHECK(parzen::log_mass(mi, 7.5, 8.5) == Approx(-2.64271528).epsilon(1e-7));
  CHECK(parzen::log_mass(mi, -0.5, 0.5) == Approx(-2.58457504).epsilon(1e-7));

  // loguniform [1e-4, 1] in log space: 1e-2 sits on the prior's centre (a tie).
  parzen::Support logs{.low = std::log(1e-4),
                       .high = 0,
                       .bounded = true,
                       .prior_mu = 0.5 * std::log(1e-4),
                       .range = -std::log(1e-4)};
  std::vector<double> lobs{std::log(1e-3), std::log(1e-2)};
  auto ml = parzen::fit(lobs, w, logs, {});
  CHECK(parzen::log_pdf(ml, std::log(1e-3)) == Approx(-0.54575371).epsilon(1e-7));
  CHECK(parzen::log_pdf(ml, std::log(0.5)) == Approx(-1.03741176).epsilon(1e-7));
}

TEST_CASE("the categorical estimator keeps a prior on every choice", "[tpe]") {
  // Rows: each observation 1 + 1/4 on its choice, 1/4 elsewhere, over 1.75; the prior row 1/3.
  std::vector<size_t> obs{0, 0, 2};
  std::vector<double> w{1, 1, 1};
  auto p = parzen::fit_categorical(obs, w, 3, 1.0);
  CHECK(p[0] == Approx(10.0 / 21));
  CHECK(p[1] == Approx(4.0 / 21));  // never observed, still likely
  CHECK(p[2] == Approx(1.0 / 3));
  // No observations: the prior alone, uniform.
  auto prior = parzen::fit_categorical({}, {}, 4, 1.0);
  for (double x : prior) CHECK(x == Approx(0.25));
  Rng rng(3);
  std::vector<int> counts(3);
  for (int i = 0; i < 21000; ++i) counts[parzen::sample_categorical(p, rng)]++;
  CHECK(std::abs(counts[1] - 4000) < 300);
}

TEST_CASE("mixture draws follow the truncated density", "[tpe]") {
  // The prior alone on [0, 1]: N(0.5, 1) truncated. P(X < 0.25) =
  // (Phi(-0.25) - Phi(-0.5)) / (Phi(0.5) - Phi(-0.5)) = 0.0927 / 0.3829 = 0.2421.
  parzen::Support unit{.low = 0, .high = 1, .bounded = true, .prior_mu = 0.5, .range = 1};
  auto m = parzen::fit({}, {}, unit, {});
  Rng rng(11);
  int low = 0, n = 40000;
  for (int i = 0; i < n; ++i) {
    double x = parzen::sample(m, rng);
    REQUIRE((x >= 0 && x <= 1));
    low += x < 0.25;
  }
  CHECK(std::abs(low / double(n) - 0.2421) < 0.01);
}

TEST_CASE("tpe: same seed and history, same suggestions", "[tpe]") {
  auto s = space_of("  x: {uniform: [-5, 5]}\n  c: {choice: [a, b, c]}\n");
  Tpe a = make(s, 42), b = make(s, 42), other = make(s, 43);
  std::vector<Observation> done_a, done_b;
  auto f = [](const json& c) { return quadratic(c) + (c["c"] == "b" ? 0 : 1); };
  run(a, done_a, 40, f);
  run(b, done_b, 40, f);
  for (size_t i = 0; i < done_a.size(); ++i) CHECK(done_a[i].config == done_b[i].config);
  std::vector<Observation> done_o;
  run(other, done_o, 40, f);
  CHECK(done_o[35].config != done_a[35].config);
  // The first n_startup_trials are random search's configs for that seed.
  CHECK(done_a[3].config == generate(s, 42, 3).config);
}

TEST_CASE("tpe: a restored searcher suggests what the uninterrupted one would", "[tpe]") {
  auto s = space_of("  x: {uniform: [-5, 5]}\n  n: {randint: [0, 50]}\n");
  auto f = [](const json& c) { return quadratic(c) + std::abs(c["n"].get<int>() - 20); };
  Tpe whole = make(s, 7);
  std::vector<Observation> done_whole;
  run(whole, done_whole, 30, f);

  Tpe first = make(s, 7);
  std::vector<Observation> done;
  run(first, done, 17, f);
  std::string saved = first.save().dump();
  auto resumed = Tpe::restore(s, {}, json::parse(saved));
  REQUIRE(resumed);
  CHECK(resumed->suggested() == 17);
  run(*resumed, done, 13, f);
  for (size_t i = 0; i < done.size(); ++i) CHECK(done[i].config == done_whole[i].config);

  CHECK_FALSE(Tpe::restore(s, {}, json::array()));
  CHECK_FALSE(
      Tpe::restore(s, {}, json{{"type", "tpe"}, {"version", 2}, {"seed", 1}, {"suggested", 0}}));
  auto bad =
      Tpe::restore(s, {}, json{{"type", "tpe"}, {"version", 1}, {"seed", -1}, {"suggested", 0}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("'seed'") != std::string::npos);
}

TEST_CASE("tpe: every kind of parameter stays in its domain and on its grid", "[tpe]") {
  auto s = space_of(
      "  u: {uniform: [-1, 2]}\n  l: {loguniform: [1.0e-4, 1.0e-1]}\n"
      "  q: {quniform: [0.3, 10, 2.5]}\n  r: {randint: [3, 7]}\n  c: {choice: [a, 7, null]}\n"
      "  n: {randn: [10, 2]}\n  ql: {qloguniform: [1, 1000, 10]}\n"
      "  model: {opt: {lr: {loguniform: [1.0e-3, 1.0]}}, name: fixed}\n"
      "  k: 5\n  same: {randint: [4, 5]}\n");
  Tpe tpe = make(s, 5);
  std::vector<Observation> done;
  std::set<int64_t> ints;
  std::set<std::string> choices;
  auto f = [](const json& c) {
    return std::abs(c["u"].get<double>() - 0.5) + std::abs(std::log10(c["l"].get<double>()) + 2) +
           std::abs(c["q"].get<double>() - 5) + std::abs(c["n"].get<double>() - 12) +
           (c["c"] == 7 ? 0 : 1) + c["model"]["opt"]["lr"].get<double>();
  };
  for (int i = 0; i < 80; ++i) {
    json c = tpe.suggest(done, {});
    double u = c["u"], l = c["l"], q = c["q"], ql = c["ql"], lr = c["model"]["opt"]["lr"];
    CHECK((u >= -1 && u <= 2));
    CHECK((l >= 1e-4 && l <= 1e-1));
    CHECK((lr >= 1e-3 && lr <= 1));
    CHECK(q == std::round(q / 2.5) * 2.5);
    CHECK((q >= 0 && q <= 10));
    CHECK(ql == std::round(ql / 10) * 10);
    CHECK((ql >= 0 && ql <= 1000));
    CHECK(std::isfinite(c["n"].get<double>()));
    REQUIRE(c["r"].is_number_integer());
    ints.insert(c["r"].get<int64_t>());
    choices.insert(c["c"].dump());
    CHECK(c["same"] == 4);
    CHECK(c["k"] == 5);
    CHECK(c["model"]["name"] == "fixed");
    done.push_back({c, f(c)});
  }
  CHECK(*ints.begin() >= 3);
  CHECK(*ints.rbegin() <= 6);
  CHECK(choices.size() >= 2);
  for (const auto& v : choices) CHECK((v == "\"a\"" || v == "7" || v == "null"));
}

TEST_CASE("tpe: on a 1-d quadratic, suggestions concentrate near the optimum", "[tpe]") {
  // For 5 seeds: 30 trials, then 20 more suggestions on those 30 observations. Random search
  // puts 30% of its draws within 1.5 of the optimum (1.3) in [-5, 5], ~30 of 100; TPE puts most
  // of them there (it favours the edge of the explored basin: l high, g low).
  auto s = space_of("  x: {uniform: [-5, 5]}\n");
  int near = 0, near_random = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    Tpe tpe = make(s, seed);
    std::vector<Observation> done;
    run(tpe, done, 30, quadratic);
    for (int i = 0; i < 20; ++i)
      near += std::abs(tpe.suggest(done, {})["x"].get<double>() - 1.3) < 1.5;
    for (uint64_t i = 30; i < 50; ++i)
      near_random += std::abs(generate(s, seed, i).config["x"].get<double>() - 1.3) < 1.5;
  }
  CHECK(near >= 60);
  CHECK(near_random < 60);
}

TEST_CASE("tpe: the good choice is suggested most, the others keep their prior", "[tpe]") {
  auto s = space_of("  c: {choice: [a, b, c, d]}\n");
  Tpe tpe = make(s, 9);
  std::vector<Observation> done;
  run(tpe, done, 40, [](const json& c) { return c["c"] == "b" ? 0.0 : 1.0; });
  int b = 0;
  for (int i = 0; i < 40; ++i) b += tpe.suggest(done, {})["c"] == "b";
  CHECK(b >= 30);
}

TEST_CASE("tpe: pending trials are ignored, or join the bad group with constant_liar", "[tpe]") {
  auto s = space_of("  x: {uniform: [-5, 5]}\n");
  std::vector<Observation> done;
  Tpe warm = make(s, 1);
  run(warm, done, 20, quadratic);
  std::vector<json> pending(10, json{{"x", 1.3}});
  Tpe a = make(s, 1), b = make(s, 1);
  CHECK(a.suggest(done, pending) == b.suggest(done, {}));  // Optuna's default: ignored
  TpeOptions liar;
  liar.constant_liar = true;
  Tpe c = make(s, 1, liar), d = make(s, 1, liar);
  double with = c.suggest(done, pending)["x"], without = d.suggest(done, {})["x"];
  // Ten running trials at the optimum make g(x) large there: the suggestion moves away.
  CHECK(std::abs(with - 1.3) > std::abs(without - 1.3));
}

TEST_CASE("tpe: grid_search and bad options are refused with their names", "[tpe]") {
  auto s = space_of("  lr: {uniform: [0, 1]}\n  model: {layers: {grid_search: [1, 2]}}\n");
  auto t = Tpe::create(s, {}, 0);
  REQUIRE_FALSE(t);
  CHECK(t.error().message.find("'model.layers'") != std::string::npos);
  auto ok = space_of("  lr: {uniform: [0, 1]}\n");
  TpeOptions o;
  o.n_ei_candidates = 0;
  auto bad = Tpe::create(ok, o, 0);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("n_ei_candidates") != std::string::npos);
  o = {};
  o.gamma = 1.5;
  CHECK_FALSE(Tpe::create(ok, o, 0));
}

TEST_CASE("tpe: lograndint, qrandint, qlograndint and qrandn stay on their grids", "[tpe]") {
  auto s = space_of(
      "  li: {lograndint: [2, 300]}\n  qi: {qrandint: [-7, 41, 4]}\n"
      "  qli: {qlograndint: [3, 500, 8]}\n  qn: {qrandn: [1, 3, 0.25]}\n"
      "  one: {qrandint: [5, 9, 6]}\n  pin: {qrandn: [2.3, 0, 0.5]}\n"
      "  onelog: {qlograndint: [5, 9, 6]}\n");
  // Optimum: li 40, qi 16, qli 96, qn 2.5 (each on its grid).
  auto f = [](const json& c) {
    return std::abs(std::log(c["li"].get<double>() / 40)) +
           std::abs(c["qi"].get<double>() - 16) / 8 +
           std::abs(std::log(c["qli"].get<double>() / 96)) + std::abs(c["qn"].get<double>() - 2.5);
  };
  auto check_config = [](const json& c) {
    REQUIRE(c["li"].is_number_integer());
    REQUIRE(c["qi"].is_number_integer());
    REQUIRE(c["qli"].is_number_integer());
    int64_t li = c["li"], qi = c["qi"], qli = c["qli"];
    double qn = c["qn"];
    CHECK((li >= 2 && li <= 299));
    CHECK((qi >= -4 && qi <= 40 && qi % 4 == 0));
    CHECK((qli >= 8 && qli <= 496 && qli % 8 == 0));
    CHECK(std::isfinite(qn));
    CHECK(qn == std::round(qn / 0.25) * 0.25);
    CHECK(c["one"] == 6);  // the only multiple of 6 in [5, 9]
    CHECK(c["onelog"] == 6);
    CHECK(c["pin"] == 2.5);  // sd 0: the mean rounded to q
  };
  std::vector<Observation> a, b;
  Tpe ta = make(s, 11), tb = make(s, 11);
  run(ta, a, 60, f);
  run(tb, b, 60, f);
  for (size_t i = 0; i < a.size(); ++i) {
    check_config(a[i].config);
    CHECK(a[i].config == b[i].config);  // reproducible with the seed
  }
  // The model is used: past the startup trials, suggestions are nearer the optimum than the
  // random configs of the same trial numbers.
  double tpe_loss = 0, random_loss = 0;
  for (size_t i = 30; i < 60; ++i) {
    tpe_loss += a[i].value;
    random_loss += f(generate(s, 11, i).config);
  }
  CHECK(tpe_loss < 0.6 * random_loss);
  // The model-space view: values round-trip, each value's rounding interval is its bucket.
  const auto& qi = s.params[1].domain;
  CHECK(tpe::to_model(qi, 16) == 16.0);
  CHECK(tpe::from_model(qi, 17.9) == 16);
  CHECK(tpe::from_model(qi, 50.0) == 40);  // clamped to the last multiple of q in range
  CHECK(tpe::from_model(qi, -9.0) == -4);
  CHECK_FALSE(tpe::to_model(qi, 16.5));  // not an integer
  CHECK_FALSE(tpe::to_model(qi, 60));    // far outside
  CHECK(tpe::bucket(qi, 16) == std::pair<double, double>{14, 18});
  const auto& li = s.params[0].domain;
  CHECK(*tpe::to_model(li, 40) == Approx(std::log(40.0)));
  CHECK(tpe::from_model(li, std::log(40.4)) == 40);
  CHECK(tpe::from_model(li, 100.0) == 299);
  CHECK_FALSE(tpe::to_model(li, 300));  // hi is excluded
  auto [lo, hi] = tpe::bucket(li, 40);
  CHECK(lo == Approx(std::log(39.5)));
  CHECK(hi == Approx(std::log(40.5)));
  auto dim = tpe::describe(s.params[2].domain, "qli");
  REQUIRE(dim);
  CHECK(dim->support.low == Approx(std::log(4.0)));  // 8 - 8/2 .. 496 + 8/2
  CHECK(dim->support.high == Approx(std::log(500.0)));
  CHECK(tpe::from_model(s.params[3].domain, 2.4) == 2.5);
}

TEST_CASE("tpe: values outside their domain are left out of the model", "[tpe]") {
  Domain r{.kind = Domain::Kind::kRandInt, .args = {3, 7}};
  CHECK(tpe::to_model(r, 3) == 3.0);
  CHECK_FALSE(tpe::to_model(r, 7));
  CHECK_FALSE(tpe::to_model(r, 3.5));
  CHECK_FALSE(tpe::to_model(r, "3"));
  Domain l{.kind = Domain::Kind::kLogUniform, .args = {1e-3, 1}};
  CHECK(*tpe::to_model(l, 0.1) == Approx(std::log(0.1)));
  CHECK_FALSE(tpe::to_model(l, 0.0));
  CHECK_FALSE(tpe::to_model(l, std::nan("")));
  Domain c{.kind = Domain::Kind::kChoice, .args = {}, .values = json::array({32, 64})};
  CHECK(tpe::to_model(c, 64.0) == 1.0);
  CHECK_FALSE(tpe::to_model(c, 16));
  // A suggestion from history full of garbage still comes from the domain.
  auto s = space_of("  x: {uniform: [0, 1]}\n");
  Tpe tpe = make(s, 3);
  std::vector<Observation> junk;
  for (int i = 0; i < 20; ++i)
    junk.push_back({json{{"x", i % 2 ? json("nope") : json(7.0)}},
                    i % 3 ? std::nan("") : -std::numeric_limits<double>::infinity()});
  double x = tpe.suggest(junk, {})["x"];
  CHECK((x >= 0 && x <= 1));
}

TEST_CASE("tpe: trials in ERROR join the bad group, so a crashing region is avoided", "[tpe]") {
  // batch in [0, 10]: the loss falls as the batch grows, but past 6 the trial crashes (out of
  // memory). The best configs sit at the edge of the crash region; told its failures, TPE stops
  // proposing past it. Left out (as before, and as Optuna leaves FAIL trials out), nothing in
  // g(x) marks the region, and l's components near 6 keep spilling past it.
  auto s = space_of("  batch: {uniform: [0, 10]}\n");
  auto crashes = [](const json& c) { return c["batch"].get<double>() > 6; };
  auto loss = [](const json& c) { return 10 - c["batch"].get<double>(); };
  int crashed_told = 0, crashed_ignored = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    for (bool told : {true, false}) {
      Tpe tpe = make(s, seed);
      std::vector<Observation> done;
      for (int i = 0; i < 60; ++i) {
        json c = tpe.suggest(done, {});
        bool crash = crashes(c);
        if (i >= 20) (told ? crashed_told : crashed_ignored) += crash;
        if (crash && told) done.push_back({c, 0, true});
        if (!crash) done.push_back({c, loss(c)});
      }
    }
  }
  INFO("crashes told " << crashed_told << ", left out " << crashed_ignored);
  // 200 suggestions after the 20th each way; measured here: 91 crashes told, 197 left out
  // (nothing in the history changes after a crash left out, so TPE proposes past 6 again).
  CHECK(crashed_told < 120);
  CHECK(crashed_ignored > 170);
}

TEST_CASE("tpe: a failure never counts as good, and ranks with NaN results", "[tpe]") {
  auto s = space_of("  x: {uniform: [0, 10]}\n");
  TpeOptions o;
  o.n_startup_trials = 5;
  // Only failures, all at x in [8, 10]: they count toward the startup trials, the good group
  // is empty (l is the prior alone) and g holds them, so suggestions leave [8, 10].
  std::vector<Observation> failures;
  for (int i = 0; i < 12; ++i) failures.push_back({json{{"x", 8 + i / 6.0}}, 0, true});
  int high = 0;
  Tpe tpe = make(s, 2, o);
  for (int i = 0; i < 40; ++i) high += tpe.suggest(failures, {})["x"].get<double>() >= 8;
  INFO("suggestions in [8, 10]: " << high);
  CHECK(high < 4);  // the prior alone (random search) would put 20% there: 8 of 40
  // Successes, then failures: the good group is the best ceil(gamma n) of the n successes (as
  // Optuna's), and the failures join the bad group, exactly as running trials do with
  // constant_liar (they join the bad group and do not count in n either).
  std::vector<Observation> mixed;
  std::vector<json> failed_configs;
  for (int i = 0; i < 14; ++i) mixed.push_back({json{{"x", i * 0.7}}, std::abs(i * 0.7 - 3)});
  for (int i = 0; i < 12; ++i) {  // crashes just past the best successes
    mixed.push_back({json{{"x", 3.1 + i / 12.0}}, 0, true});
    failed_configs.push_back(mixed.back().config);
  }
  std::vector<Observation> successes(mixed.begin(), mixed.begin() + 14);
  TpeOptions liar = o;
  liar.constant_liar = true;
  Tpe told = make(s, 4, o), lied = make(s, 4, liar), blind = make(s, 4, o);
  int differ = 0;
  for (int i = 0; i < 10; ++i) {
    json a = told.suggest(mixed, {});
    CHECK(a == lied.suggest(successes, failed_configs));
    differ += a != blind.suggest(successes, {});  // the failures change the suggestions
  }
  CHECK(differ >= 5);
  // An ERROR and a NaN result are the same to the model: the same suggestions.
  auto as_nan = mixed;
  for (auto& ob : as_nan)
    if (ob.failed) ob = {ob.config, std::nan(""), false};
  Tpe a = make(s, 9, o), b = make(s, 9, o);
  for (int i = 0; i < 10; ++i) CHECK(a.suggest(mixed, {}) == b.suggest(as_nan, {}));
}

TEST_CASE("tpe's searcher state keeps failures and refuses malformed observations", "[tpe]") {
  auto s = space_of("  x: {uniform: [0, 1]}\n");
  search::SearcherSpec spec;
  spec.kind = search::SearcherKind::kTpe;
  auto searcher = search::make_searcher(spec, s, 10, 1);
  REQUIRE(searcher);
  auto c0 = (*searcher)->suggest(0).config, c1 = (*searcher)->suggest(1).config;
  (*searcher)->on_complete({"00000", c0, std::nullopt, nullptr, true});          // ERROR
  (*searcher)->on_complete({"00001", c1, 0.5, json{{"loss", 0.5}}, false});      // TERMINATED
  (*searcher)->on_complete({"00002", c1, std::nullopt, json::object(), false});  // no metric
  json st = (*searcher)->save();
  REQUIRE(st["done"].size() == 2);
  CHECK(st["done"][0] == json{{"config", c0}, {"error", true}});
  CHECK(st["done"][1] == json{{"config", c1}, {"value", 0.5}});
  auto again = search::make_searcher(spec, s, 10, 1);
  REQUIRE(again);
  REQUIRE((*again)->restore(json::parse(st.dump())));
  CHECK((*again)->save() == st);
  auto refused = [&](json done) {
    json bad = st;
    bad["done"] = json::array({std::move(done)});
    auto r = (*again)->restore(bad);
    return r ? std::string() : r.error().message;
  };
  CHECK(refused({{"config", c0}, {"error", false}}).find("'error' must be true") !=
        std::string::npos);
  CHECK(refused({{"config", c0}}).find("numeric value") != std::string::npos);
  CHECK(refused({{"value", 1}}).find("needs a config") != std::string::npos);
}
