// Searchers through the controller: tpe's suggestions follow the finished trials' results,
// reproducibly, and survive an interruption.
#include <catch2/catch.hpp>
#include <fstream>

#include "controller_fixtures.hpp"
#include "state/state.hpp"

using namespace tune;
using testing::FakeContext;
using testing::FakeExecutor;
using testing::FakeProcess;
using testing::make_exp;
using testing::opts;
using testing::ScratchDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Reports loss = (x - 0.3)^2 once and ends.
struct Quadratic : FakeProcess {
  double x;
  explicit Quadratic(double x_) : x(x_) {}
  void on_tick(FakeContext& c, double) override {
    c.print(json{{"loss", (x - 0.3) * (x - 0.3)}, {"done", true}}.dump());
    c.exit(0);
  }
};

const char* kTpe = R"(
name: exp
trial: {command: [train]}
param_space: {x: {uniform: [-5, 5]}}
num_samples: 30
seed: 4
metric: loss
mode: min
max_concurrent_trials: 1
search_alg: {type: tpe, n_startup_trials: 8}
)";

std::vector<double> xs_of(const state::ExperimentState& s) {
  std::vector<double> out;
  for (const auto& t : s.trials) out.push_back(t.config["x"].get<double>());
  return out;
}

// Runs the experiment `yaml` to the end with trials of kind P (constructed from config x), once
// straight or interrupted at `interrupt_at` and resumed; returns the trials' x in order.
template <typename P>
std::vector<double> run_search(const char* yaml, size_t trials, double interrupt_at) {
  ScratchDir d;
  auto e = make_exp(d, yaml);
  auto factory = [](const exec::Launch& l) {
    return std::make_unique<P>(json::parse(l.env.at("TUNE_CONFIG"))["x"].get<double>());
  };
  {
    FakeExecutor ex(factory);
    if (interrupt_at > 0) ex.interrupt_at(interrupt_at);
    control::Controller c(e, ex, opts());
    REQUIRE(c.run() == (interrupt_at > 0 ? kExitInterrupted : kExitOk));
  }
  if (interrupt_at > 0) {
    auto s = state::load(e.dir());
    REQUIRE(s);
    FakeExecutor ex(factory);
    control::Controller c(e, ex, opts());
    REQUIRE(c.run(std::move(*s)) == kExitOk);
  }
  auto s = state::load(e.dir());
  REQUIRE(s);
  REQUIRE(s->trials.size() == trials);
  return xs_of(*s);
}

std::vector<double> run_tpe(double interrupt_at) {
  return run_search<Quadratic>(kTpe, 30, interrupt_at);
}

}  // namespace

TEST_CASE("tpe suggests near the optimum after its random start, the same on every run",
          "[controller][search]") {
  auto xs = run_tpe(0);
  CHECK(run_tpe(0) == xs);
  // After the 8 random ones, suggestions gather near x = 0.3 (random search: about 1 in 10
  // within 0.5 of it, so 2 of 22; this seed gives 9).
  int near = 0;
  for (size_t i = 8; i < xs.size(); ++i) near += std::abs(xs[i] - 0.3) < 0.5;
  CHECK(near >= 7);
  // Interrupted and resumed: the same suggestions.
  CHECK(run_tpe(1012.5) == xs);
}

TEST_CASE("tpe refuses a grid and needs a metric with a mode", "[spec][search]") {
  ScratchDir d;
  spec::Overrides ov;
  auto bad = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {a: {grid_search: [1, 2]}}\nmetric: m\nmode: min\n"
      "search_alg: {type: tpe}\n",
      d.path / "exp.yaml", ov);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("cannot model grid_search parameter 'a'") != std::string::npos);
  auto nomode = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {a: {uniform: [1, 2]}}\nmetric: m\n"
      "search_alg: {type: tpe}\n",
      d.path / "exp.yaml", ov);
  REQUIRE_FALSE(nomode);
  CHECK(nomode.error().message.find("needs a mode") != std::string::npos);
}

namespace {

// A learning curve: loss (x - 0.3)^2 + 1/i at iteration i, a checkpoint at every one.
struct Learner : FakeProcess {
  double x;
  int i = 0;
  explicit Learner(double x_) : x(x_) {}
  void on_start(FakeContext& c) override {
    if (c.has_env("TUNE_RESTORE_CHECKPOINT"))
      std::ifstream(fs::path(c.env("TUNE_RESTORE_CHECKPOINT")) / "i") >> i;
  }
  void on_tick(FakeContext& c, double) override {
    if (i >= 9) return c.exit(0);
    ++i;
    std::string d = c.make_dir("ck_" + std::to_string(i));
    std::ofstream(fs::path(d) / "i") << i;
    c.print(json{{"loss", (x - 0.3) * (x - 0.3) + 1.0 / i}, {"checkpoint", d}}.dump());
  }
};

const char* kBohb = R"(
name: exp
trial: {command: [train]}
param_space: {x: {uniform: [-5, 5]}}
num_samples: 40
seed: 5
metric: loss
mode: min
max_concurrent_trials: 2
scheduler: {type: hyperband, max_t: 9, reduction_factor: 3}
search_alg: {type: bohb, random_fraction: 0}
)";

std::vector<double> run_bohb(double interrupt_at) {
  return run_search<Learner>(kBohb, 40, interrupt_at);
}

}  // namespace

TEST_CASE("bohb models the rung results of hyperband, the same on every run and after a resume",
          "[controller][search]") {
  auto xs = run_bohb(0);
  CHECK(run_bohb(0) == xs);
  // Random draws of U(-5, 5) fall within 1 of 0.3 one time in 5; bohb's, once a rung holds two
  // values (one parameter + 1), more often. Compared with random search's draws for the same
  // trials (the draws bohb makes when it has no model).
  ScratchDir d;
  auto e = make_exp(d, kBohb);
  int near = 0, near_random = 0;
  for (size_t i = 10; i < xs.size(); ++i) {
    near += std::abs(xs[i] - 0.3) < 1;
    near_random += std::abs(search::generate(e.space, 5, i).config["x"].get<double>() - 0.3) < 1;
  }
  INFO("within 1 of the optimum: bohb " << near << ", random " << near_random << " of 30");
  CHECK(near >= near_random + 4);
  CHECK(run_bohb(1012.5) == xs);
}

TEST_CASE("bohb needs a hyperband or asha scheduler", "[spec][search]") {
  ScratchDir d;
  spec::Overrides ov;
  auto none = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {a: {uniform: [1, 2]}}\nmetric: m\nmode: min\n"
      "search_alg: {type: bohb}\n",
      d.path / "exp.yaml", ov);
  REQUIRE_FALSE(none);
  CHECK(none.error().message.find("needs scheduler: {type: hyperband} or {type: asha}") !=
        std::string::npos);
  auto bad = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {a: {uniform: [1, 2]}}\nmetric: m\nmode: min\n"
      "scheduler: {type: asha, max_t: 9}\nsearch_alg: {type: bohb, gamma: 0.2}\n",
      d.path / "exp.yaml", ov);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("search_alg 'bohb' has no option 'gamma'") != std::string::npos);
  auto ok = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {a: {uniform: [1, 2]}}\nmetric: m\nmode: min\n"
      "scheduler: {type: asha, max_t: 9, reduction_factor: 3}\n"
      "search_alg: {type: bohb, top_n_percent: 20, num_samples: 32}\n",
      d.path / "exp.yaml", ov);
  REQUIRE(ok);
  CHECK(ok->search_alg.bohb_target.budgets == std::vector<double>{1, 3, 9});
  CHECK(ok->search_alg.bohb.top_n_percent == 20);
}

namespace {

// Reports loss = (x - 0.3)^2 and ends, but crashes at once (no result, exit 1) past x = 2: a
// region of the space where trials fail (an out-of-memory batch size).
struct CrashesPastTwo : FakeProcess {
  double x;
  explicit CrashesPastTwo(double x_) : x(x_) {}
  void on_tick(FakeContext& c, double) override {
    if (x > 2) return c.exit(1);
    c.print(json{{"loss", (x - 0.3) * (x - 0.3)}, {"done", true}}.dump());
    c.exit(0);
  }
};

// kTpe's experiment on CrashesPastTwo, whole or interrupted at `interrupt_at` and resumed.
state::ExperimentState run_crashing_tpe(double interrupt_at) {
  ScratchDir d;
  auto e = make_exp(d, kTpe);
  auto factory = [](const exec::Launch& l) {
    return std::make_unique<CrashesPastTwo>(
        json::parse(l.env.at("TUNE_CONFIG"))["x"].get<double>());
  };
  {
    FakeExecutor ex(factory);
    if (interrupt_at > 0) ex.interrupt_at(interrupt_at);
    control::Controller c(e, ex, opts());
    REQUIRE(c.run() == (interrupt_at > 0 ? kExitInterrupted : kExitTrialError));
  }
  if (interrupt_at > 0) {
    auto s = state::load(e.dir());
    REQUIRE(s);
    FakeExecutor ex(factory);
    control::Controller c(e, ex, opts());
    REQUIRE(c.run(std::move(*s)) == kExitTrialError);  // some trials ended in ERROR
  }
  auto s = state::load(e.dir());
  REQUIRE(s);
  REQUIRE(s->trials.size() == 30);
  return std::move(*s);
}

}  // namespace

TEST_CASE("tpe is told trials in ERROR: it stops suggesting where they crash, after a resume too",
          "[controller][search]") {
  auto s = run_crashing_tpe(0);
  size_t errors = 0, late_crashes = 0;
  for (size_t i = 0; i < s.trials.size(); ++i) {
    bool crashed = s.trials[i].config["x"].get<double>() > 2;
    CHECK(crashed == (s.trials[i].status == trial::Status::kError));
    errors += crashed;
    if (i >= 8) late_crashes += crashed;
  }
  // The searcher state holds every failure, as an observation without a value.
  size_t told = 0;
  for (const auto& o : s.search_alg["done"]) told += o.value("error", false);
  INFO("failures in the state " << told << " of " << errors);
  CHECK(told == errors);
  CHECK(errors >= 2);
  // After the 8 random ones: random search would crash 3 in 10 (x > 2 in [-5, 5]), about 7 of
  // 22; this seed crashes 3 times with the failures told, 18 when they were left out (as
  // before): a crash left out leaves the history as it was, so TPE proposes past 2 again.
  INFO("crashes after the 8 startup trials: " << late_crashes);
  CHECK(late_crashes <= 6);
  // Interrupted and resumed: the failures are in the saved state, so the same suggestions.
  auto resumed = run_crashing_tpe(1012.5);
  CHECK(xs_of(resumed) == xs_of(s));
}
