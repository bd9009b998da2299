// The external searcher through the controller, with a toy searcher (tests/fixtures/
// toy_searcher.py, python3 stdlib, deterministic): the protocol's happy path, wait, finished,
// and every way a searcher can misbehave (garbage, death, a hang, a huge line, a config outside
// the space), each ending the run with one error, the state saved and resumable.
#include <catch2/catch.hpp>
#include <fstream>

#include "controller_fixtures.hpp"
#include "search/external.hpp"
#include "search/space_json.hpp"
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

std::unique_ptr<FakeProcess> quadratic(const exec::Launch& l) {
  return std::make_unique<Quadratic>(json::parse(l.env.at("TUNE_CONFIG"))["x"].get<double>());
}

// An experiment searched by the toy searcher; `extra` are its arguments.
std::string yaml(const std::string& extra, int samples = 6, const std::string& more = "") {
  return "name: exp\ntrial: {command: [train]}\nparam_space: {x: {uniform: [-5, 5]}, c: 7}\n"
         "num_samples: " +
         std::to_string(samples) +
         "\nseed: 4\nmetric: loss\nmode: min\nmax_concurrent_trials: 1\n"
         "search_alg: {type: external, command: [/usr/bin/python3, " TUNE_TEST_TOY_SEARCHER "" +
         extra + "]" + more + "}\n";
}

std::vector<double> xs_of(const state::ExperimentState& s) {
  std::vector<double> out;
  for (const auto& t : s.trials) out.push_back(t.config["x"].get<double>());
  return out;
}

std::vector<json> log_lines(const fs::path& p) {
  std::vector<json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// Runs `y` to its end (or its error); the error message, "" if none.
std::string run(const spec::Experiment& e, std::optional<state::ExperimentState> resume = {},
                int* code = nullptr) {
  FakeExecutor ex(quadratic);
  control::Controller c(e, ex, opts());
  try {
    int rc = c.run(std::move(resume));
    if (code) *code = rc;
    return "";
  } catch (const Fatal& f) {
    if (code) *code = f.code();
    return f.what();
  }
}

}  // namespace

TEST_CASE("an external searcher is told the protocol and its configs run", "[controller][search]") {
  ScratchDir d;
  fs::path log = d.path / "ops.jsonl";
  auto e = make_exp(d, yaml(", --log, " + log.string()));
  int code = -1;
  REQUIRE(run(e, {}, &code).empty());
  CHECK(code == kExitOk);
  auto s = state::load(e.dir());
  REQUIRE(s);
  REQUIRE(s->trials.size() == 6);
  for (const auto& t : s->trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.config["c"] == 7);  // constants filled in
    CHECK(std::abs(t.config["x"].get<double>()) <= 5);
  }
  auto ops = log_lines(log);
  REQUIRE(!ops.empty());
  CHECK(ops[0]["op"] == "init");
  CHECK(ops[0]["space"] == json::parse(R"({"x": {"uniform": [-5.0, 5.0]}, "c": 7})"));
  CHECK(ops[0]["metric"] == "loss");
  CHECK(ops[0]["mode"] == "min");
  CHECK(ops[0]["seed"] == 4);
  CHECK(ops[0]["state"].is_null());
  int suggests = 0, completes = 0, results = 0, saves = 0;
  for (const auto& o : ops) {
    suggests += o["op"] == "suggest";
    results += o["op"] == "result";
    saves += o["op"] == "save";
    if (o["op"] == "complete") {
      ++completes;
      CHECK(o["trial_id"].is_string());
      CHECK(o["status"] == "TERMINATED");
      CHECK(o["result"]["loss"].is_number());
    }
  }
  CHECK(suggests == 6);
  CHECK(completes == 6);
  CHECK(results == 6);
  CHECK(saves >= 1);
  // The state names the searcher's last snapshot, which saw every trial.
  CHECK(s->search_alg["type"] == "external");
  CHECK(s->search_alg["completed"].size() == 6);
  REQUIRE(s->search_alg["dir"].is_string());
  CHECK(fs::exists(e.dir() / s->search_alg["dir"].get<std::string>() / "toy.json"));
  // Its suggestions follow the results, the same on every run.
  ScratchDir d2;
  auto e2 = make_exp(d2, yaml(""));
  REQUIRE(run(e2).empty());
  CHECK(xs_of(*state::load(e2.dir())) == xs_of(*s));
}

TEST_CASE("an external searcher that says wait is asked again; finished ends the experiment",
          "[controller][search]") {
  ScratchDir d;
  fs::path log = d.path / "ops.jsonl";
  auto e = make_exp(d, yaml(", --misbehave, wait, --after, 2, --log, " + log.string(), 5));
  REQUIRE(run(e).empty());
  auto s = state::load(e.dir());
  REQUIRE(s);
  CHECK(s->trials.size() == 5);
  int suggests = 0;
  for (const auto& o : log_lines(log)) suggests += o["op"] == "suggest";
  CHECK(suggests == 5 + 3);  // every other one after the first 2 answered wait

  ScratchDir d2;
  auto e2 = make_exp(d2, yaml(", --misbehave, finish, --after, 3", 10));
  int code = -1;
  REQUIRE(run(e2, {}, &code).empty());
  CHECK(code == kExitOk);
  auto s2 = state::load(e2.dir());
  REQUIRE(s2);
  CHECK(s2->trials.size() == 3);
  CHECK(s2->total_trials == 3);
}

TEST_CASE("a misbehaving external searcher ends the run with one error; the run resumes",
          "[controller][search]") {
  struct Case {
    const char* mode;
    const char* expect;
  };
  for (auto [mode, expect] :
       {Case{"garbage", "answered 'this is not json' to suggest"},
        Case{"die", "it exited (exit code 3)"}, Case{"hang", "no answer within 1"},
        Case{"huge", "longer than 1048576 bytes"}, Case{"deep", "nests deeper than 256 levels"},
        Case{"badconfig", "parameter 'x' = \"not a number\" is not a number"},
        Case{"stdout-noise", "answered 'debug: thinking'"}}) {
    CAPTURE(mode);
    ScratchDir d;
    auto e = make_exp(
        d, yaml(std::string(", --misbehave, ") + mode + ", --after, 3", 6, ", timeout_s: 1"));
    int code = -1;
    std::string err = run(e, {}, &code);
    CHECK(code == kExitTrialError);
    CHECK(err.find("external searcher '/usr/bin/python3 ") != std::string::npos);
    CHECK(err.find(expect) != std::string::npos);
    CHECK(err.find('\n') == std::string::npos);
    if (std::string(mode) == "die") CHECK(err.find("dying on purpose") != std::string::npos);
    auto s = state::load(e.dir());
    REQUIRE(s);
    CHECK(s->trials.size() == 3);
    for (const auto& t : s->trials) CHECK(t.status == trial::Status::kTerminated);
    // The same experiment with a searcher that behaves continues from the saved state.
    auto good = make_exp(d, yaml("", 6, ", timeout_s: 1"));
    REQUIRE(run(good, std::move(*s)).empty());
    auto after = state::load(e.dir());
    REQUIRE(after);
    CHECK(after->trials.size() == 6);
  }
}

TEST_CASE("an interrupted external search resumes with the configs of an uninterrupted one",
          "[controller][search]") {
  ScratchDir d;
  auto e = make_exp(d, yaml("", 12));
  REQUIRE(run(e).empty());
  auto whole = xs_of(*state::load(e.dir()));
  // Once the state names a snapshot, the op journal drops what it holds: at the end of a run,
  // only a header with the number of ops sent is left.
  auto journal = [](const spec::Experiment& x) {
    return log_lines(x.dir() / "searcher_state" / "ops.jsonl");
  };
  auto ops_of = [](const state::ExperimentState& s) { return s.search_alg["ops"]; };
  CHECK(journal(e) == std::vector<json>{{{"op", "base"}, {"ops", 36}}});  // 12 x 3 ops
  CHECK(ops_of(*state::load(e.dir())) == 36);
  for (double at : {2.5, 4.01, 7.3}) {
    CAPTURE(at);
    ScratchDir d2;
    auto e2 = make_exp(d2, yaml("", 12));
    {
      FakeExecutor ex(quadratic);
      ex.interrupt_at(at);
      control::Controller c(e2, ex, opts());
      CHECK(c.run() == kExitInterrupted);
    }
    auto s = state::load(e2.dir());
    REQUIRE(s);
    CHECK(s->trials.size() < 12);
    CHECK(journal(e2) == std::vector<json>{{{"op", "base"}, {"ops", ops_of(*s)}}});
    REQUIRE(run(e2, std::move(*s)).empty());  // resumed from the compacted journal
    CHECK(xs_of(*state::load(e2.dir())) == whole);
  }
}

TEST_CASE("an external searcher's command must exist and be executable", "[controller][search]") {
  ScratchDir d;
  auto e = make_exp(d,
                    "trial: {command: [t]}\nparam_space: {x: {uniform: [0, 1]}}\nmetric: m\n"
                    "mode: min\nsearch_alg: {type: external, command: [no-such-searcher-x]}\n");
  FakeExecutor ex(quadratic);
  try {
    control::Controller c(e, ex, opts());
    FAIL("no error");
  } catch (const Fatal& f) {
    CHECK(std::string(f.what()) == "search_alg.command: 'no-such-searcher-x' is not found on PATH");
    CHECK(f.code() == kExitUsage);
  }
  spec::Overrides ov;
  auto grid = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {a: {grid_search: [1, 2]}}\nmetric: m\nmode: min\n"
      "search_alg: {type: external, command: [x]}\n",
      d.path / "exp.yaml", ov);
  REQUIRE_FALSE(grid);
  CHECK(grid.error().message.find("'external' cannot model grid_search parameter 'a'") !=
        std::string::npos);
  auto tpe_key = spec::parse_experiment(
      "trial: {command: [t]}\nparam_space: {a: {uniform: [1, 2]}}\nmetric: m\nmode: min\n"
      "search_alg: {type: external, command: [x], n_startup_trials: 3}\n",
      d.path / "exp.yaml", ov);
  REQUIRE_FALSE(tpe_key);
  CHECK(tpe_key.error().message.find("has no option 'n_startup_trials'") != std::string::npos);
}

TEST_CASE("configs an external searcher answers are checked against the space", "[search]") {
  search::Space space;
  space.base = {{"opt", {{"wd", 0.1}}}, {"c", 3}};
  space.params.push_back({{"opt", "lr"}, {search::Domain::Kind::kLogUniform, {1e-4, 1e-1}, {}}});
  space.params.push_back({{"n"}, {search::Domain::Kind::kRandInt, {1, 5}, {}}});
  space.params.push_back({{"k"}, {search::Domain::Kind::kChoice, {}, json{"a", 2}}});
  CHECK(search::space_to_json(space) ==
        json::parse(R"({"opt": {"wd": 0.1, "lr": {"loguniform": [0.0001, 0.1]}}, "c": 3,
                        "n": {"randint": [1.0, 5.0]}, "k": {"choice": ["a", 2]}})"));
  auto ok = search::config_from_answer(space, json::parse(R"({"opt": {"lr": 0.01}, "n": 4,
                                                              "k": 2})"));
  REQUIRE(ok);
  CHECK(ok->config == json::parse(R"({"opt": {"wd": 0.1, "lr": 0.01}, "c": 3, "n": 4, "k": 2})"));
  auto why = [&](const char* answer) {
    auto r = search::config_from_answer(space, json::parse(answer));
    return r ? std::string() : r.error().message;
  };
  CHECK(why(R"({"opt": {"lr": 0.5}, "n": 4, "k": 2})") ==
        "parameter 'opt.lr' = 0.5 is out of its range (loguniform)");
  CHECK(why(R"({"opt": {"lr": 0.01}, "n": 5, "k": 2})").find("out of its range [lo, hi)") !=
        std::string::npos);
  CHECK(why(R"({"opt": {"lr": 0.01}, "n": 2.5, "k": 2})").find("not an integer") !=
        std::string::npos);
  CHECK(why(R"({"opt": {"lr": 0.01}, "n": 2, "k": "b"})").find("not one of its values") !=
        std::string::npos);
  CHECK(why(R"({"opt": {"lr": 0.01}, "k": "a"})") == "parameter 'n' is missing");
  CHECK(why(R"({"opt": {"lr": 0.01}, "n": 2, "k": "a", "z": 1})") ==
        "key 'z' is not in param_space");
  CHECK(why(R"({"opt": {"lr": 0.01, "wd": 9}, "n": 2, "k": "a"})") ==
        "constant 'opt.wd' was changed");
  CHECK(why(R"([1])") == "the config is not an object");
}

TEST_CASE("points_to_evaluate run first, in order, and every searcher is told their results",
          "[controller][search]") {
  for (const char* alg : {"{type: random", "{type: tpe, n_startup_trials: 3",
                          "{type: external, command: "
                          "[/usr/bin/python3, " TUNE_TEST_TOY_SEARCHER ", --log, LOG]"}) {
    CAPTURE(alg);
    ScratchDir d;
    std::string a = alg;
    if (auto at = a.find("LOG"); at != std::string::npos)
      a.replace(at, 3, (d.path / "ops.jsonl").string());
    auto e = make_exp(d,
                      "name: exp\ntrial: {command: [train]}\n"
                      "param_space: {x: {uniform: [-5, 5]}, k: {choice: [a, b]}}\n"
                      "num_samples: 6\nseed: 4\nmetric: loss\nmode: min\n"
                      "max_concurrent_trials: 1\nsearch_alg: " +
                          a + ", points_to_evaluate: [{x: 0.3, k: b}, {x: -2}]}\n");
    REQUIRE(run(e).empty());
    auto s = state::load(e.dir());
    REQUIRE(s);
    REQUIRE(s->trials.size() == 6);
    CHECK(s->trials[0].config == json{{"x", 0.3}, {"k", "b"}});
    CHECK(s->trials[1].config["x"] == -2);
    CHECK((s->trials[1].config["k"] == "a" || s->trials[1].config["k"] == "b"));
    CHECK(s->trials[0].name == "trial_00000_x=0.3,k=b");
    if (a.find("tpe") != std::string::npos) CHECK(s->search_alg["done"].size() == 6);
    if (a.find("external") != std::string::npos) {
      int completes = 0, suggests = 0;
      for (const auto& o : log_lines(d.path / "ops.jsonl")) {
        suggests += o["op"] == "suggest";
        if (o["op"] == "complete" && o["trial_id"] == "00000") {
          ++completes;
          CHECK(o["config"] == json{{"x", 0.3}, {"k", "b"}});
        }
      }
      CHECK(completes == 1);
      CHECK(suggests == 4);  // not asked for the points
    }
  }
}

TEST_CASE("search_alg.max_concurrent limits the running trials", "[controller][search]") {
  ScratchDir d;
  auto e = make_exp(d,
                    "name: exp\ntrial: {command: [train]}\nparam_space: {x: {uniform: [0, 1]}}\n"
                    "num_samples: 7\nsearch_alg: {type: random, max_concurrent: 2}\n");
  int alive = 0, most = 0;
  struct Counted : FakeProcess {
    int &alive, &most, ticks = 0;
    Counted(int& a, int& m) : alive(a), most(m) { most = std::max(most, ++alive); }
    void on_tick(FakeContext& c, double) override {
      if (++ticks < 3) return c.print(json{{"loss", 1.0}}.dump());
      --alive;
      c.exit(0);
    }
  };
  FakeExecutor ex([&](const exec::Launch&) { return std::make_unique<Counted>(alive, most); });
  control::Controller c(e, ex, opts(8));
  REQUIRE(c.run() == kExitOk);
  CHECK(ex.launches.size() == 7);
  CHECK(most == 2);
}

TEST_CASE("points_to_evaluate and max_concurrent are checked", "[spec][search]") {
  ScratchDir d;
  spec::Overrides ov;
  auto parse = [&](const std::string& search) {
    auto r = spec::parse_experiment(
        "trial: {command: [t]}\nparam_space: {x: {uniform: [0, 1]}, "
        "o: {lr: {loguniform: [0.001, 0.1]}}}\nnum_samples: 2\n"
        "search_alg: {type: random, " +
            search + "}\n",
        d.path / "exp.yaml", ov);
    return r ? std::string() : r.error().message;
  };
  CHECK(parse("points_to_evaluate: [{x: 0.5, o.lr: 0.01}, {o: {lr: 0.002}}]").empty());
  CHECK(parse("points_to_evaluate: [{x: 2}]").find("exp.yaml:4:") != std::string::npos);
  CHECK(parse("points_to_evaluate: [{x: 2}]")
            .find("search_alg.points_to_evaluate[0]: parameter 'x' = 2 is out of its range") !=
        std::string::npos);
  CHECK(parse("points_to_evaluate: [{x: 0.1}, {y: 1}]")
            .find("points_to_evaluate[1]: key 'y' is not in param_space") != std::string::npos);
  CHECK(parse("points_to_evaluate: [{x: 0.1}, {x: 0.2}, {x: 0.3}]")
            .find("more than num_samples (2)") != std::string::npos);
  CHECK(parse("points_to_evaluate: {x: 1}").find("must be a list") != std::string::npos);
  CHECK(parse("max_concurrent: 0").find("max_concurrent must be between 1") != std::string::npos);
}

TEST_CASE("search_alg.restore_from warms the searcher with an earlier experiment's trials",
          "[controller][search]") {
  ScratchDir d;
  auto earlier = make_exp(d,
                          "name: earlier\ntrial: {command: [train]}\n"
                          "param_space: {x: {uniform: [-5, 5]}}\nnum_samples: 5\nseed: 1\n"
                          "metric: loss\nmode: min\n");
  REQUIRE(run(earlier).empty());
  // tpe: the 5 count as observations (its random start is over before the first suggestion).
  auto tpe = make_exp(d,
                      "name: later\ntrial: {command: [train]}\n"
                      "param_space: {x: {uniform: [-5, 5]}}\nnum_samples: 3\nseed: 1\n"
                      "metric: loss\nmode: min\nmax_concurrent_trials: 1\n"
                      "search_alg: {type: tpe, n_startup_trials: 5, restore_from: " +
                          earlier.dir().string() + "}\n");
  REQUIRE(run(tpe).empty());
  auto s = state::load(tpe.dir());
  REQUIRE(s);
  CHECK(s->search_alg["done"].size() == 5 + 3);
  CHECK(s->trials[0].config != search::generate(tpe.space, 1, 0).config);
  // external: complete ops for the earlier trials, with their configs, before any suggest.
  fs::path log = d.path / "ops.jsonl";
  auto ext = make_exp(d,
                      "name: ext\ntrial: {command: [train]}\n"
                      "param_space: {x: {uniform: [-5, 5]}}\nnum_samples: 2\nseed: 1\n"
                      "metric: loss\nmode: min\nsearch_alg: {type: external, command: "
                      "[/usr/bin/python3, " TUNE_TEST_TOY_SEARCHER ", --log, " +
                          log.string() + "], restore_from: " + earlier.dir().string() + "}\n");
  REQUIRE(run(ext).empty());
  auto ops = log_lines(log);
  REQUIRE(ops.size() > 6);
  auto first = state::load(earlier.dir());
  for (int i = 0; i < 5; ++i) {
    CHECK(ops[1 + i]["op"] == "complete");
    CHECK(ops[1 + i]["trial_id"] == "restored-0000" + std::to_string(i));
    CHECK(ops[1 + i]["config"] == first->trials[i].config);
  }
  // A dir that holds no experiment: one line, before anything starts.
  auto bad = make_exp(d,
                      "name: bad\ntrial: {command: [train]}\n"
                      "param_space: {x: {uniform: [-5, 5]}}\nmetric: loss\nmode: min\n"
                      "search_alg: {type: tpe, restore_from: " +
                          (d.path / "nowhere").string() + "}\n");
  FakeExecutor ex(quadratic);
  try {
    control::Controller c(bad, ex, opts());
    FAIL("no error");
  } catch (const Fatal& f) {
    CHECK(std::string(f.what()).rfind("search_alg.restore_from: ", 0) == 0);
    CHECK(std::string(f.what()).find('\n') == std::string::npos);
  }
  CHECK_FALSE(fs::exists(bad.dir()));
}

TEST_CASE("an external searcher is told a trial in ERROR as status ERROR", "[controller][search]") {
  // Trials crash past x = 0.2 after one result: the complete op says ERROR (its last result
  // given as recorded), the others TERMINATED.
  struct CrashesPast : FakeProcess {
    double x;
    explicit CrashesPast(double x_) : x(x_) {}
    void on_tick(FakeContext& c, double) override {
      if (x > 0.2) {
        c.print(json{{"loss", 9.0}}.dump());
        return c.exit(1);
      }
      c.print(json{{"loss", (x - 0.3) * (x - 0.3)}, {"done", true}}.dump());
      c.exit(0);
    }
  };
  ScratchDir d;
  fs::path log = d.path / "ops.jsonl";
  auto e = make_exp(d, yaml(", --log, " + log.string(), 12));
  FakeExecutor ex([](const exec::Launch& l) {
    return std::make_unique<CrashesPast>(json::parse(l.env.at("TUNE_CONFIG"))["x"].get<double>());
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitTrialError);
  auto s = state::load(e.dir());
  REQUIRE(s);
  std::map<std::string, trial::Status> status;
  for (const auto& t : s->trials) status[t.id] = t.status;
  int errors = 0, completes = 0;
  for (const auto& o : log_lines(log)) {
    if (o["op"] != "complete") continue;
    ++completes;
    std::string id = o["trial_id"];
    bool error = status.at(id) == trial::Status::kError;
    errors += error;
    CHECK(o["status"] == (error ? "ERROR" : "TERMINATED"));
    if (error) CHECK(o["result"]["loss"] == 9.0);
  }
  CHECK(completes == 12);
  CHECK(errors >= 1);  // the toy searcher suggests around its best x, 0 at first, +- 0.5
}
