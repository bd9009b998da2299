// Schedulers through the controller with the scripted FakeExecutor: stops, pauses and resumes
// carried out on trials, each iteration recorded once, decisions kept across an interruption.
#include <catch2/catch.hpp>
#include <fstream>

#include "controller_fixtures.hpp"
#include "state/state.hpp"
#include "util/fs.hpp"

using namespace tune;
using testing::FakeContext;
using testing::FakeExecutor;
using testing::FakeProcess;
using testing::iterations;
using testing::make_exp;
using testing::opts;
using testing::results_of;
using testing::ScratchDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A function-mode trial whose loss is q + 1/i at iteration i, checkpointing every `every`
// iterations (the checkpoint holds i) and resuming from TUNE_RESTORE_CHECKPOINT.
struct Curve : FakeProcess {
  double q;
  int every, max_i, i = 0;
  std::vector<std::string>* restores;
  Curve(double q_, int every_, int max_, std::vector<std::string>* r)
      : q(q_), every(every_), max_i(max_), restores(r) {}
  void on_start(FakeContext& c) override {
    if (!c.has_env("TUNE_RESTORE_CHECKPOINT")) return;
    std::string p = c.env("TUNE_RESTORE_CHECKPOINT");
    restores->push_back(p);
    std::ifstream(fs::path(p) / "i") >> i;
  }
  void on_tick(FakeContext& c, double) override {
    if (i >= max_i) return c.exit(0);
    ++i;
    json r = {{"loss", q + 1.0 / i}};
    if (every > 0 && i % every == 0) {
      std::string d = c.make_dir("ck_" + std::to_string(i));
      std::ofstream(fs::path(d) / "i") << i;
      r["checkpoint"] = d;
    }
    c.print(r.dump());
  }
};

testing::ProcessFactory curves(int every, int max_i, std::vector<std::string>* restores) {
  return [=](const exec::Launch& l) {
    double q = json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>();
    return std::make_unique<Curve>(q, every, max_i, restores);
  };
}

std::string exp_yaml(const std::string& scheduler, int concurrency) {
  return "name: exp\ntrial: {command: [train]}\n"
         "param_space: {q: {grid_search: [4, 0, 7, 1, 8, 2, 5, 3, 6]}}\n"
         "metric: loss\nmode: min\nmax_concurrent_trials: " +
         std::to_string(concurrency) + "\nscheduler: " + scheduler + "\n";
}

const trial::Trial& by_q(const state::ExperimentState& s, double q) {
  for (const auto& t : s.trials)
    if (t.config["q"].get<double>() == q) return t;
  FAIL("no trial with q " << q);
  return s.trials.front();
}

}  // namespace

TEST_CASE("asha stops trials below the cutoff as TERMINATED, saying so", "[controller][sched]") {
  ScratchDir d;
  auto e = make_exp(d, exp_yaml("{type: asha, max_t: 9, grace_period: 1, reduction_factor: 3}", 1));
  std::vector<std::string> restores;
  FakeExecutor ex(curves(0, 100, &restores));
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& s = c.state();
  REQUIRE(s.trials.size() == 9);
  for (const auto& t : s.trials) CHECK(t.status == trial::Status::kTerminated);
  // In order q = 4, 0, 7, 1, ...: q 4 runs to max_t (it is alone at every rung); q 0 beats it
  // everywhere and runs to the end; q 7 is below the cutoff at the first rung.
  const auto& first = by_q(s, 4);
  CHECK(first.iteration == 9);
  CHECK(first.reason == trial::Reason::kStopped);
  CHECK(first.cause == trial::Cause::kMaxT);
  CHECK(trial::describe_decision(first, "asha") == "reached max_t at 9");
  CHECK(by_q(s, 0).iteration == 9);
  const auto& bad = by_q(s, 7);
  CHECK(bad.iteration == 1);
  CHECK(bad.reason == trial::Reason::kStopped);
  CHECK(bad.cause == trial::Cause::kCutoff);
  CHECK(trial::describe_decision(bad, "asha") == "stopped by asha at 1");
  auto rows = results_of(e, bad);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["done"] == true);
  CHECK(rows[0]["decision"] == "stopped by asha at 1");
  // Fewer trial-iterations than running everything to the end.
  int64_t used = 0;
  for (const auto& t : s.trials) used += t.iteration;
  CHECK(used < 9 * 9 / 2);
  // The decision survives in the saved state.
  auto saved = state::load(e.dir());
  REQUIRE(saved);
  CHECK(by_q(*saved, 7).cause == trial::Cause::kCutoff);
  CHECK(by_q(*saved, 7).decided_at == 1);
  CHECK(saved->scheduler["type"] == "asha");
}

TEST_CASE("hyperband pauses function-mode trials and resumes the best from their checkpoints",
          "[controller][sched]") {
  ScratchDir d;
  auto e = make_exp(d, exp_yaml("{type: hyperband, max_t: 9, reduction_factor: 3}", 2));
  std::vector<std::string> restores;
  FakeExecutor ex(curves(1, 100, &restores));
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& s = c.state();
  REQUIRE(s.trials.size() == 9);
  std::map<double, int64_t> reached;
  for (const auto& t : s.trials) {
    CHECK(t.status == trial::Status::kTerminated);
    reached[t.config["q"].get<double>()] = t.iteration;
    // Each iteration once, in order, across pauses.
    auto rows = results_of(e, t);
    std::vector<int64_t> want;
    for (int64_t i = 1; i <= t.iteration; ++i) want.push_back(i);
    CHECK(iterations(rows) == want);
  }
  // Rung 1: the best ceil(9/3) = 3 (q 0, 1, 2) go on; rung 3: q 0 goes on to max_t = 9.
  CHECK(reached == std::map<double, int64_t>{
                       {0, 9}, {1, 3}, {2, 3}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 1}, {8, 1}});
  CHECK(by_q(s, 5).cause == trial::Cause::kCutoff);
  CHECK(by_q(s, 0).cause == trial::Cause::kMaxT);
  // Three resumed after rung 1 and one after rung 3, each from its own latest checkpoint.
  REQUIRE(restores.size() == 4);
  CHECK(fs::path(restores.back()).filename() == "checkpoint_000003");
}

TEST_CASE("hyperband pauses step-mode trials after a save and restores them",
          "[controller][sched][step]") {
  ScratchDir d;
  auto e = make_exp(d,
                    "name: exp\ntrial: {command: [train], mode: step}\n"
                    "param_space: {q: {grid_search: [2, 0, 1]}}\n"
                    "metric: loss\nmode: min\nmax_concurrent_trials: 1\n"
                    "scheduler: {type: hyperband, max_t: 3, reduction_factor: 3}\n");
  struct Stepper : FakeProcess {
    double q;
    int i = 0;
    std::vector<int>* saves;
    Stepper(double q_, std::vector<int>* s) : q(q_), saves(s) {}
    void on_start(FakeContext& c) override {
      if (c.has_env("TUNE_RESTORE_CHECKPOINT"))
        std::ifstream(fs::path(c.env("TUNE_RESTORE_CHECKPOINT")) / "i") >> i;
    }
    void on_stdin(FakeContext& c, const std::string& line) override {
      auto cmd = json::parse(line);
      if (cmd["op"] == "step") {
        ++i;
        c.print(json{{"loss", q + 1.0 / i}}.dump());
      } else if (cmd["op"] == "save") {
        std::ofstream(fs::path(cmd["path"].get<std::string>()) / "i") << i;
        saves->push_back(i);
        c.print(json{{"saved", cmd["path"]}}.dump());
      } else if (cmd["op"] == "stop") {
        c.exit(0);
      }
    }
  };
  std::vector<int> saves;
  FakeExecutor ex([&](const exec::Launch& l) {
    return std::make_unique<Stepper>(json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>(),
                                     &saves);
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  // s_max 1: bracket 1 holds 3 trials from budget 1; the best one goes on to 3. The first two
  // pause (saved at 1); the third settles the rung at once and is stopped (nothing to save).
  CHECK(saves == std::vector<int>{1, 1});
  CHECK(by_q(c.state(), 0).iteration == 3);
  CHECK(by_q(c.state(), 1).iteration == 1);
  CHECK(by_q(c.state(), 2).iteration == 1);
  auto rows = results_of(e, by_q(c.state(), 0));
  CHECK(iterations(rows) == std::vector<int64_t>{1, 2, 3});
  CHECK(ex.launches.size() == 4);
}

TEST_CASE("an interrupted hyperband run resumes to the decisions of an uninterrupted one",
          "[controller][sched][state]") {
  auto run = [](double interrupt_at) {
    ScratchDir d;
    auto e = make_exp(d, exp_yaml("{type: hyperband, max_t: 9, reduction_factor: 3}", 1));
    std::vector<std::string> restores;
    std::map<double, std::pair<int64_t, int>> out;  // q -> iteration, cause
    {
      FakeExecutor ex(curves(1, 100, &restores));
      if (interrupt_at > 0) ex.interrupt_at(interrupt_at);
      control::Controller c(e, ex, opts());
      int code = c.run();
      REQUIRE(code == (interrupt_at > 0 ? kExitInterrupted : kExitOk));
    }
    if (interrupt_at > 0) {
      auto s = state::load(e.dir());
      REQUIRE(s);
      FakeExecutor ex(curves(1, 100, &restores));
      control::Controller c(e, ex, opts());
      REQUIRE(c.run(std::move(*s)) == kExitOk);
    }
    auto s = state::load(e.dir());
    REQUIRE(s);
    for (const auto& t : s->trials) {
      CHECK(t.status == trial::Status::kTerminated);
      out[t.config["q"].get<double>()] = {t.iteration, static_cast<int>(t.cause)};
    }
    return out;
  };
  auto straight = run(0);
  // The uninterrupted run goes past 1013 s of the fake clock (from 1000): interrupted at each of
  // these, in every phase (first rung, pauses, promotions, the last rung).
  for (double at : {1001.5, 1003.0, 1005.0, 1007.0, 1009.0, 1011.0, 1013.0}) {
    INFO("interrupted at " << at);
    CHECK(run(at) == straight);
  }
}

namespace {

// A Curve that notes, when its stop arrives, how many results it had printed and whether the
// state on disk recorded the decision yet; with `crash`, the driver dies right after (the
// exception ends Controller::run as a SIGKILL would: nothing more is written).
struct Crash {};
struct Stopped {
  int printed = 0;
  trial::Reason on_disk = trial::Reason::kNone;
  bool journalled = false;
};
struct Watched : Curve {
  fs::path exp_dir;
  std::string id;
  std::map<std::string, Stopped>* stops;
  bool crash;
  Watched(double q_, int max_, fs::path dir, std::string id_, std::map<std::string, Stopped>* s,
          bool crash_)
      : Curve(q_, 0, max_, nullptr),
        exp_dir(std::move(dir)),
        id(std::move(id_)),
        stops(s),
        crash(crash_) {}
  void on_stop(FakeContext& c, bool now) override {
    auto saved = state::load(exp_dir);
    REQUIRE(saved);
    Stopped s{i, trial::Reason::kNone, false};
    for (const auto& t : saved->trials)
      if (t.id == id) s.on_disk = t.reason;
    for (const auto& d : saved->decisions) s.journalled = s.journalled || d.trial_id == id;
    (*stops)[id] = s;
    if (crash) throw Crash{};
    FakeProcess::on_stop(c, now);
  }
};

}  // namespace

TEST_CASE("a scheduler's stop goes to the trial at once, before the state records it",
          "[controller][sched][state]") {
  ScratchDir d;
  auto e = make_exp(d, exp_yaml("{type: asha, max_t: 9, grace_period: 1, reduction_factor: 3}", 3));
  std::map<std::string, Stopped> stops;
  FakeExecutor ex([&](const exec::Launch& l) {
    double q = json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>();
    return std::make_unique<Watched>(q, 100, e.dir(), l.trial_id, &stops, false);
  });
  auto o = opts();
  o.state_period_s = 1000;  // writes only when forced (the start, restarts, the end)
  control::Controller c(e, ex, o);
  REQUIRE(c.run() == kExitOk);
  int cut = 0;
  for (const auto& t : c.state().trials) {
    if (t.cause != trial::Cause::kCutoff) continue;
    ++cut;
    INFO("trial " << t.name);
    REQUIRE(stops.count(t.id));
    // Signalled in the loop turn it was decided in: no result past the decided one was made,
    // and the stop did not wait for a state write (the journal holds the decision meanwhile).
    CHECK(stops[t.id].printed == t.iteration);
    CHECK(stops[t.id].on_disk == trial::Reason::kNone);
    CHECK(stops[t.id].journalled);
    CHECK(results_of(e, t).size() == static_cast<size_t>(t.iteration));
  }
  CHECK(cut >= 3);
}

TEST_CASE(
    "a driver killed after a stop went out, before the state recorded it, resumes to "
    "the same decisions",
    "[controller][sched][state]") {
  const std::string yaml =
      exp_yaml("{type: asha, max_t: 9, grace_period: 1, reduction_factor: 3}", 1);
  auto outcome = [](const state::ExperimentState& s) {
    std::map<double, std::tuple<int64_t, int, int>> out;  // q -> iteration, status, cause
    for (const auto& t : s.trials)
      out[t.config["q"].get<double>()] = {t.iteration, static_cast<int>(t.status),
                                          static_cast<int>(t.cause)};
    return out;
  };
  std::map<std::string, Stopped> stops;
  ScratchDir straight_dir;
  auto straight_exp = make_exp(straight_dir, yaml);
  FakeExecutor straight_ex(curves(0, 100, nullptr));
  control::Controller straight(straight_exp, straight_ex, opts());
  REQUIRE(straight.run() == kExitOk);

  ScratchDir d;
  auto e = make_exp(d, yaml);
  {
    FakeExecutor ex([&](const exec::Launch& l) {
      double q = json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>();
      return std::make_unique<Watched>(q, 100, e.dir(), l.trial_id, &stops, q == 7);
    });
    control::Controller c(e, ex, opts());
    REQUIRE_THROWS_AS(c.run(), Crash);
  }
  auto s = state::load(e.dir());
  REQUIRE(s);
  const trial::Trial& killed = by_q(*s, 7);
  auto dec_at = std::find_if(s->decisions.begin(), s->decisions.end(),
                             [&](const auto& x) { return x.trial_id == killed.id; });
  REQUIRE(dec_at != s->decisions.end());
  const auto dec = *dec_at;
  CHECK(dec.reason == trial::Reason::kStopped);
  CHECK(dec.cause == trial::Cause::kCutoff);
  CHECK(killed.status == trial::Status::kRunning);
  CHECK(killed.reason == trial::Reason::kNone);  // the state does not know yet
  CHECK(killed.iteration < dec.iteration);
  int printed = stops.at(killed.id).printed;
  CHECK(printed == dec.iteration);

  // The attempt ended by the stop; its output past the state's offset is read again.
  struct Ended : FakeProcess {
    double q;
    int from, upto;
    Ended(double q_, int f, int u) : q(q_), from(f), upto(u) {}
    void on_attach(FakeContext& c) override {
      for (int i = from + 1; i <= upto; ++i) c.print(json{{"loss", q + 1.0 / i}}.dump());
      c.killed(15);
    }
  };
  std::map<std::string, int64_t> from;  // the attempts found: where the state has them
  std::map<std::string, double> qs;
  for (const auto& t : s->trials) {
    qs[t.id] = t.config["q"].get<double>();
    if (t.status == trial::Status::kRunning) from[t.id] = t.iteration;
  }
  FakeExecutor ex([&](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.env.empty())  // attach(): the attempt the first driver stopped, ended since
      return std::make_unique<Ended>(qs.at(l.trial_id), static_cast<int>(from.at(l.trial_id)),
                                     stops.at(l.trial_id).printed);
    double q = json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>();
    return std::make_unique<Curve>(q, 0, 100, nullptr);
  });
  ex.on_attach = [](const exec::Launch&) { return exec::Attached::kEnded; };
  control::Controller c(e, ex, opts());
  REQUIRE(c.run(std::move(*s)) == kExitOk);
  CHECK(ex.attaches.size() == from.size());
  const trial::Trial& after = by_q(c.state(), 7);
  CHECK(after.attempt == 1);  // not restarted
  CHECK(after.reason == trial::Reason::kStopped);
  CHECK(results_of(e, after).size() == static_cast<size_t>(after.iteration));
  CHECK(outcome(c.state()) == outcome(straight.state()));
}

TEST_CASE(
    "a resume holds a later attempt's output back until an earlier ended one exits, for 60 s "
    "at most",
    "[controller][sched][state]") {
  ScratchDir d;
  auto e = make_exp(d, exp_yaml("{type: fifo}", 2));
  {
    // Two first attempts started in the same turn (00000 first); the driver dies at a tick.
    struct Dies : FakeProcess {
      void on_tick(FakeContext&, double) override { throw Crash{}; }
    };
    FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Dies>(); });
    auto o = opts();
    o.state_period_s = 1000;
    control::Controller c(e, ex, o);
    REQUIRE_THROWS_AS(c.run(), Crash);
  }
  auto s = state::load(e.dir());
  REQUIRE(s);
  REQUIRE(s->trials.size() == 2);
  // 00000 had ended, but its exit reaches this driver only 100 s in; 00001 still runs and its
  // output is there at once.
  struct LateExit : FakeProcess {
    double at = 0;
    void on_attach(FakeContext& c) override { at = c.ex->now() + 100; }
    void on_tick(FakeContext& c, double now) override {
      if (now >= at) c.exit(0);
    }
  };
  struct Prompt : FakeProcess {
    void on_attach(FakeContext& c) override {
      c.print(json{{"loss", 1.0}}.dump());
      c.exit(0);
    }
  };
  FakeExecutor ex([](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.env.empty() && l.trial_id == "00000") return std::make_unique<LateExit>();
    if (l.env.empty()) return std::make_unique<Prompt>();
    return std::make_unique<testing::Reporter>(1, 0);
  });
  ex.on_attach = [](const exec::Launch& l) {
    return l.trial_id == "00000" ? exec::Attached::kEnded : exec::Attached::kRunning;
  };
  double start = ex.wall_time();
  control::Controller c(e, ex, opts());
  REQUIRE(c.run(std::move(*s)) == kExitOk);
  auto rows = results_of(e, c.state().trials[1]);
  REQUIRE(rows.size() == 1);
  // Held while 00000's exit was awaited, then let go at 60 s, before that exit came.
  auto at = rows[0]["timestamp"].get<double>() - start;
  CHECK(at >= 59);
  CHECK(at < 100);
  for (const auto& t : c.state().trials) CHECK(t.status == trial::Status::kTerminated);
}
