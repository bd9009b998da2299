// PBT through the controller with the scripted FakeExecutor: exploits carried out in both
// modes (donor checkpoint copied in, rows past it set aside, config changed, one policy line
// each), turns given to waiting trials, the donor's checkpoint kept from retention while an
// exploit needs it, and the same decisions after an interruption.
#include <catch2/catch.hpp>
#include <fstream>

#include "controller_fixtures.hpp"
#include "state/state.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

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

// A function-mode trial whose loss falls by q per iteration (the checkpoint holds its loss and
// iteration; a restored trial goes on from the donor's loss with its own new q). It checkpoints
// every `every` iterations; a stop is obeyed `stop_delay` ticks late.
struct Learner : FakeProcess {
  double q, loss = 10;
  int every, max_i, i = 0, stop_delay, stopping = -1;
  std::vector<std::string>* restores;
  std::vector<std::string>* printed = nullptr;  // what its stdout.log holds, if kept
  Learner(double q_, int every_, int max_, int delay, std::vector<std::string>* r)
      : q(q_), every(every_), max_i(max_), stop_delay(delay), restores(r) {}
  void on_start(FakeContext& c) override {
    if (!c.has_env("TUNE_RESTORE_CHECKPOINT")) return;
    std::string p = c.env("TUNE_RESTORE_CHECKPOINT");
    std::ifstream(fs::path(p) / "state") >> i >> loss;
    restores->push_back(p + "|" + std::to_string(i) + "|" + json(loss).dump());
  }
  void on_stop(FakeContext& c, bool now) override {
    if (now || stop_delay == 0) return c.killed(15);
    stopping = stop_delay;
  }
  void on_tick(FakeContext& c, double) override {
    if (stopping >= 0 && stopping-- == 0) return c.killed(15);
    if (i >= max_i) return c.exit(0);
    ++i;
    loss -= q;
    json r = {{"loss", loss}};
    if (every > 0 && i % every == 0) {
      std::string d = c.make_dir("ck_" + std::to_string(i));
      std::ofstream(fs::path(d) / "state") << i << " " << loss;
      r["checkpoint"] = d;
    }
    c.print(r.dump());
    if (printed) printed->push_back(r.dump());
  }
};

testing::ProcessFactory learners(int every, int max_i, std::vector<std::string>* restores,
                                 int stop_delay = 0) {
  return [=](const exec::Launch& l) {
    double q = json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>();
    return std::make_unique<Learner>(q, every, max_i, stop_delay, restores);
  };
}

std::string pbt_yaml(const std::string& grid, int concurrency, const std::string& extra = "") {
  return "name: exp\ntrial: {command: [train]}\n"
         "param_space: {q: {grid_search: " +
         grid +
         "}}\n"
         "metric: loss\nmode: min\nmax_concurrent_trials: " +
         std::to_string(concurrency) + "\n" + extra +
         "scheduler: {type: pbt, perturbation_interval: 3, quantile_fraction: 0.25,\n"
         "  resample_probability: 0, perturbation_factors: [2],\n"
         "  hyperparam_mutations: {q: {uniform: [0, 10]}}}\n";
}

std::vector<json> policy_lines(const spec::Experiment& e) {
  std::vector<json> out;
  std::ifstream in(e.dir() / "pbt_policy.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

const trial::Trial& by_id(const state::ExperimentState& s, const std::string& id) {
  for (const auto& t : s.trials)
    if (t.id == id) return t;
  FAIL("no trial " << id);
  return s.trials.front();
}

}  // namespace

TEST_CASE("pbt exploits in function mode: donor checkpoint, new config, rows set aside, policy",
          "[controller][sched][pbt]") {
  ScratchDir d;
  // q 1, 0.5, 0.1, 0.2 in that order, one slot: each trial is paused at its check (iteration
  // 3) so the next gets its turn; the second (q 0.5) is the worse of two and exploits the best
  // (00000, checkpointed at 2), taking q 1 * 2.
  auto e = make_exp(d, pbt_yaml("[1, 0.5, 0.1, 0.2]", 1));
  std::vector<std::string> restores;
  FakeExecutor ex(learners(2, 9, &restores));
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& s = c.state();
  for (const auto& t : s.trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.iteration == 9);
    CHECK(t.pending_exploit.is_null());
  }
  auto lines = policy_lines(e);
  REQUIRE(!lines.empty());
  const json& first = lines.front();
  CHECK(first["trial"] == "00001");
  CHECK(first["donor"] == "00000");
  CHECK(first["donor_iteration"] == 2);
  CHECK(first["at"] == 3);
  CHECK(first["old_config"] == json{{"q", 0.5}});
  CHECK(first["new_config"] == json{{"q", 2.0}});
  CHECK(first["donor_checkpoint"].get<std::string>().ends_with("/checkpoint_000001"));
  // Every exploit counted per trial, and each trial's config is its last line's new one.
  std::map<std::string, int> count;
  for (const auto& l : lines) {
    ++count[l["trial"].get<std::string>()];
    CHECK(l["donor"] != l["trial"]);
  }
  for (const auto& t : s.trials) {
    CHECK(t.exploits == count[t.id]);
    for (auto it = lines.rbegin(); it != lines.rend(); ++it)
      if ((*it)["trial"] == t.id) {
        CHECK(t.config == (*it)["new_config"]);
        CHECK(t.exploited_from == (*it)["donor"]);
        CHECK(t.exploited_at == (*it)["at"]);
        // tune status and the live table show its last exploit.
        CHECK(trial::describe_decision(t, "pbt") ==
              "exploited " + t.exploited_from + " @ " + util::format_double(t.exploited_at));
        break;
      }
  }
  // 00001: restarted from its own copy of the donor's checkpoint; each iteration once in
  // result.json, its row 3 (past the donor's 2) set aside.
  const auto& x = by_id(s, "00001");
  auto rows = results_of(e, x);
  CHECK(iterations(rows) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::ifstream in(e.dir() / x.name / "result.before_exploit_1.json");
  std::string row;
  REQUIRE(std::getline(in, row));
  CHECK(json::parse(row)["training_iteration"] == 3);
  CHECK(json::parse(row)["decision"] == "exploited 00000 @ 3");  // the row that decided it
  CHECK_FALSE(std::getline(in, row));
  bool restored_copy = false;
  for (const auto& r : restores)
    restored_copy |= r.starts_with((e.dir() / x.name).string() + "/checkpoint_");
  CHECK(restored_copy);
  // It learned from the donor's loss at 2 (10 - 2 * 1), then with q 2 from iteration 3 on.
  CHECK(rows[2]["loss"].get<double>() == Approx(6.0));
  auto params = json::parse(*util::read_file(e.dir() / x.name / "params.json", 1 << 20));
  CHECK(params == x.config);
  // The state file holds the exploits and the policy log's length.
  auto saved = state::load(e.dir());
  REQUIRE(saved);
  CHECK(saved->pbt_policy_bytes == util::file_size_or_zero(e.dir() / "pbt_policy.jsonl"));
  CHECK(by_id(*saved, "00001").exploited_from == x.exploited_from);
  CHECK(by_id(*saved, "00001").exploits == x.exploits);
  // Turns: more launches than trials, with one slot.
  CHECK(ex.launches.size() > 4);
}

TEST_CASE("pbt keeps a donor's checkpoint from retention while an exploit needs it",
          "[controller][sched][pbt]") {
  ScratchDir d;
  // Two slots, keep 1: the donor checkpoints every iteration and goes on while the exploited
  // trial takes 3 ticks to stop; its checkpoint at the decision must survive until copied.
  auto e = make_exp(d, pbt_yaml("[1, 0.1]", 2, "checkpoint_config: {num_to_keep: 1}\n"));
  std::vector<std::string> restores;
  FakeExecutor ex(learners(1, 9, &restores, 3));
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  auto lines = policy_lines(e);
  REQUIRE(!lines.empty());
  CHECK(lines[0]["trial"] == "00001");
  CHECK(lines[0]["donor"] == "00000");
  CHECK(lines[0]["donor_iteration"] == 3);
  const auto& x = by_id(c.state(), "00001");
  CHECK(x.exploits >= 1);
  CHECK(x.iteration == 9);
  // It restored the donor's iteration-3 state from its own copy.
  REQUIRE(!restores.empty());
  CHECK(restores.front().starts_with((e.dir() / x.name).string() + "/checkpoint_"));
  CHECK(restores.front().ends_with("|3|7.0"));
  // Retention caught up afterwards: each trial ends with exactly its one best checkpoint.
  for (const auto& t : c.state().trials) {
    CHECK(t.checkpoints.size() == 1);
    size_t dirs = 0;
    for (const auto& entry : fs::directory_iterator(e.dir() / t.name))
      dirs += entry.path().filename().string().starts_with("checkpoint_");
    CHECK(dirs == 1);
  }
}

TEST_CASE("pbt in function mode without any checkpoint stops with a one-line error",
          "[controller][sched][pbt]") {
  ScratchDir d;
  auto e = make_exp(d, pbt_yaml("[1, 0.5, 0.1, 0.2]", 1));
  std::vector<std::string> restores;
  FakeExecutor ex(learners(0, 9, &restores));
  control::Controller c(e, ex, opts());
  try {
    (void)c.run();
    FAIL("no error");
  } catch (const Fatal& f) {
    CHECK(std::string(f.what()) == "pbt needs checkpoints; trial 00000 reported none");
  }
}

TEST_CASE("pbt exploits in step mode: donors save at their check, the exploited restores",
          "[controller][sched][pbt][step]") {
  ScratchDir d;
  auto e =
      make_exp(d,
               "name: exp\ntrial: {command: [train], mode: step}\n"
               "param_space: {q: {grid_search: [1, 0.1]}}\n"
               "metric: loss\nmode: min\nmax_concurrent_trials: 2\n"
               "scheduler: {type: pbt, perturbation_interval: 3, resample_probability: 0,\n"
               "  perturbation_factors: [2], hyperparam_mutations: {q: {uniform: [0, 10]}}}\n");
  struct Stepper : FakeProcess {
    double q, loss = 10;
    int i = 0;
    std::vector<std::string>* log;
    Stepper(double q_, std::vector<std::string>* l) : q(q_), log(l) {}
    void on_start(FakeContext& c) override {
      if (!c.has_env("TUNE_RESTORE_CHECKPOINT")) return;
      std::ifstream(fs::path(c.env("TUNE_RESTORE_CHECKPOINT")) / "state") >> i >> loss;
      log->push_back("restore " + std::to_string(i));
    }
    void on_stdin(FakeContext& c, const std::string& line) override {
      auto cmd = json::parse(line);
      if (cmd["op"] == "step") {
        ++i;
        loss -= q;
        c.print(json{{"loss", loss}, {"done", i >= 9}}.dump());
      } else if (cmd["op"] == "save") {
        std::ofstream(fs::path(cmd["path"].get<std::string>()) / "state") << i << " " << loss;
        log->push_back("save " + std::to_string(i));
        c.print(json{{"saved", cmd["path"]}}.dump());
      } else if (cmd["op"] == "stop") {
        c.exit(0);
      }
    }
  };
  std::vector<std::string> log;
  FakeExecutor ex([&](const exec::Launch& l) {
    return std::make_unique<Stepper>(json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>(), &log);
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  auto lines = policy_lines(e);
  REQUIRE(!lines.empty());
  CHECK(lines[0]["trial"] == "00001");
  CHECK(lines[0]["donor"] == "00000");
  CHECK(lines[0]["new_config"] == json{{"q", 2.0}});
  // The donor saved at its check, and the exploited trial restored that very state.
  int k = lines[0]["donor_iteration"].get<int>();
  CHECK(k % 3 == 0);
  auto saved = std::find(log.begin(), log.end(), "save " + std::to_string(k));
  auto restored = std::find(log.begin(), log.end(), "restore " + std::to_string(k));
  CHECK(saved < restored);
  CHECK(restored != log.end());
  const auto& x = by_id(c.state(), "00001");
  CHECK(iterations(results_of(e, x)) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(x.config["q"] == 2.0);
}

TEST_CASE("an interrupted pbt run resumes to the exploits of an uninterrupted one",
          "[controller][sched][pbt][state]") {
  auto run = [](double interrupt_at) {
    ScratchDir d;
    auto e = make_exp(d, pbt_yaml("[1, 0.5, 0.1, 0.2]", 1));
    std::vector<std::string> restores;
    {
      FakeExecutor ex(learners(2, 9, &restores));
      if (interrupt_at > 0) ex.interrupt_at(interrupt_at);
      control::Controller c(e, ex, opts());
      int code = c.run();
      REQUIRE(code == (interrupt_at > 0 ? kExitInterrupted : kExitOk));
    }
    if (interrupt_at > 0) {
      auto s = state::load(e.dir());
      REQUIRE(s);
      FakeExecutor ex(learners(2, 9, &restores));
      control::Controller c(e, ex, opts());
      REQUIRE(c.run(std::move(*s)) == kExitOk);
    }
    std::vector<std::string> out;
    for (auto l : policy_lines(e)) {
      l.erase("time");
      out.push_back(l.dump());
    }
    auto s = state::load(e.dir());
    REQUIRE(s);
    for (const auto& t : s->trials)
      out.push_back(t.id + " " + trial::status_name(t.status) + " " + std::to_string(t.iteration) +
                    " " + t.config.dump());
    return out;
  };
  auto straight = run(0);
  for (double at : {1002.0, 1004.0, 1006.0, 1008.0, 1010.0, 1014.0, 1020.0}) {
    INFO("interrupted at " << at);
    CHECK(run(at) == straight);
  }
}

namespace {

struct Crash {};  // thrown from the executor: ends Controller::run as a SIGKILL would

// A first driver's trial: a Learner whose lines are kept; the driver dies right after it
// signals this trial's stop (the decision journalled, the state not written since).
struct CrashOnStop : Learner {
  bool crash;
  CrashOnStop(double q_, std::vector<std::string>* r, std::vector<std::string>* out, bool c)
      : Learner(q_, 1, 9, 0, r), crash(c) {
    printed = out;
  }
  void on_stop(FakeContext& c, bool now) override {
    if (crash) throw Crash{};
    Learner::on_stop(c, now);
  }
};

// The same attempt found ended by the next driver: its output from the offset read again,
// then its exit; `delay` ticks late (an executor may deliver attempts' output in any order).
struct ReadAgain : FakeProcess {
  std::vector<std::string> lines;
  int delay;
  ReadAgain(std::vector<std::string> l, int d) : lines(std::move(l)), delay(d) {}
  void emit(FakeContext& c) {
    for (const auto& line : lines) c.print(line);
    c.killed(15);
  }
  void on_attach(FakeContext& c) override {
    if (delay == 0) emit(c);
  }
  void on_tick(FakeContext& c, double) override {
    if (--delay == 0) emit(c);
  }
};

}  // namespace

TEST_CASE(
    "a pbt driver killed after an exploit went out, before the state recorded it, resumes to "
    "the same exploits",
    "[controller][sched][pbt][state]") {
  // Resampling and perturbation draw random numbers: a decision taken differently on resume
  // (or in another order) changes every later config.
  const std::string yaml =
      "name: exp\ntrial: {command: [train]}\nparam_space: {q: {grid_search: [1, 0.5, 0.1, 0.2]}}\n"
      "metric: loss\nmode: min\nmax_concurrent_trials: 1\nseed: 5\n"
      "scheduler: {type: pbt, perturbation_interval: 3, quantile_fraction: 0.25,\n"
      "  resample_probability: 0.25, hyperparam_mutations: {q: {uniform: [0, 2]}}}\n";
  auto outcome = [](const spec::Experiment& e) {
    std::vector<std::string> out;
    for (auto l : policy_lines(e)) {
      l.erase("time");
      out.push_back(l.dump());
    }
    auto s = state::load(e.dir());
    REQUIRE(s);
    for (const auto& t : s->trials)
      out.push_back(t.id + " " + trial::status_name(t.status) + " " + std::to_string(t.iteration) +
                    " " + t.config.dump() + " " + std::to_string(t.exploits));
    return out;
  };
  std::vector<std::string> restores;
  ScratchDir straight_dir;
  auto straight_exp = make_exp(straight_dir, yaml);
  {
    FakeExecutor ex(learners(1, 9, &restores));
    control::Controller c(straight_exp, ex, opts());
    REQUIRE(c.run() == kExitOk);
  }
  auto straight = outcome(straight_exp);
  // The first exploit: at a trial's first check, while later trials have not started yet.
  auto first = policy_lines(straight_exp).at(0);
  const std::string crashed = first["trial"];
  const int last = std::stoi(crashed);
  REQUIRE(last >= 1);
  REQUIRE(first["at"] == 3);

  ScratchDir d;
  auto e = make_exp(d, yaml);
  std::map<std::string, std::vector<std::string>> printed;
  {
    FakeExecutor ex([&](const exec::Launch& l) {
      double q = json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>();
      return std::make_unique<CrashOnStop>(q, &restores, &printed[l.trial_id],
                                           l.trial_id == crashed);
    });
    auto o = opts();
    o.state_period_s = 1000;  // no state write after the start: the journal has it all
    control::Controller c(e, ex, o);
    REQUIRE_THROWS_AS(c.run(), Crash);
  }
  auto s = state::load(e.dir());
  REQUIRE(s);
  REQUIRE(s->trials.size() == static_cast<size_t>(last + 1));
  auto dec = std::find_if(s->decisions.begin(), s->decisions.end(),
                          [&](const auto& x) { return x.trial_id == crashed; });
  REQUIRE(dec != s->decisions.end());
  CHECK(dec->reason == trial::Reason::kPaused);
  CHECK(dec->cause == trial::Cause::kExploit);
  // The journal line holds the exploit as decided: donor, its checkpoint, the new config.
  REQUIRE(dec->exploit.is_object());
  CHECK(dec->exploit["donor"] == first["donor"]);
  CHECK(dec->exploit["donor_checkpoint"] == first["donor_checkpoint"]);
  CHECK(dec->exploit["new_config"] == first["new_config"]);
  bool plain_pause = false;
  SECTION("replayed as journalled") {}
  SECTION("a journalled pause is not taken for the exploit decided again") {
    // (a line written later about the same attempt replaces the first)
    plain_pause = true;
    state::Journal journal;
    REQUIRE(journal.open(e.dir()));
    REQUIRE(journal.record_decision(
        {crashed, 1, trial::Reason::kPaused, trial::Cause::kTurn, 3, 3, nullptr}));
    s = state::load(e.dir());
    REQUIRE(s);
  }

  // All first attempts ended; the executor hands their output over latest first.
  FakeExecutor ex([&](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.env.empty()) {
      REQUIRE(l.stdout_offset == 0);
      return std::make_unique<ReadAgain>(printed.at(l.trial_id), last - std::stoi(l.trial_id));
    }
    double q = json::parse(l.env.at("TUNE_CONFIG"))["q"].get<double>();
    return std::make_unique<Learner>(q, 1, 9, 0, &restores);
  });
  ex.on_attach = [](const exec::Launch&) { return exec::Attached::kEnded; };
  control::Controller c(e, ex, opts());
  REQUIRE(c.run(std::move(*s)) == kExitOk);
  CHECK(ex.attaches.size() == static_cast<size_t>(last + 1));
  if (!plain_pause) {
    CHECK(outcome(e) == straight);
    return;
  }
  // Paused at 3, as journalled: no exploit then, and its 4th result is its own q's.
  for (const auto& l : policy_lines(e)) CHECK_FALSE((l["trial"] == crashed && l["at"] == 3));
  auto rows = results_of(e, by_id(c.state(), crashed));
  REQUIRE(rows.size() >= 4);
  CHECK(rows[2]["decision"] == "paused by pbt at 3");
  const double grid[] = {1, 0.5, 0.1, 0.2};
  CHECK(rows[3]["loss"].get<double>() ==
        Approx(rows[2]["loss"].get<double>() - grid[last]).margin(1e-9));
}
