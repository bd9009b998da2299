// `tune stop --trial` on the driver's side (fake executor): a request file stops one running
// trial (TERMINATED, cause user) while the others run on; a resumed driver acts on a request
// left while no driver ran (a queued trial: it never starts again); in step mode the trial is
// stopped after the step in flight (saved at end), or after the grace period if that step runs on.
#include <catch2/catch.hpp>

#include <fstream>

#include "control/controller.hpp"
#include "control/stop_requests.hpp"
#include "controller_fixtures.hpp"
#include "fake_executor.hpp"
#include "state/state.hpp"

using namespace tune;
using testing::FakeContext;
using testing::FakeExecutor;
using testing::FakeProcess;
using testing::make_exp;
using testing::opts;
using testing::Reporter;
using testing::ScratchDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* kExp = R"(
name: exp
trial: {command: [train, "{x}"]}
param_space: {x: {grid_search: [0, 1, 2]}}
max_concurrent_trials: 2
)";

}  // namespace

TEST_CASE("tune stop --trial: one running trial ends TERMINATED, the others run on",
          "[controller][user_stop]") {
  ScratchDir d;
  auto e = make_exp(d, kExp);
  FakeExecutor ex([&](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.argv[1] == "1")  // reports until stopped; at its 3rd result asks to stop itself
      return std::make_unique<Reporter>(1000000, 0, [&](int i, FakeContext&) {
        if (i == 3) REQUIRE(control::write_stop_request(e.dir(), "00001"));
        return json{{"loss", 1.0 / i}};
      });
    return std::make_unique<Reporter>(20, 0);
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& ts = c.state().trials;
  REQUIRE(ts.size() == 3);
  CHECK(ts[0].status == trial::Status::kTerminated);
  CHECK(ts[0].iteration == 20);
  CHECK(ts[1].status == trial::Status::kTerminated);
  CHECK(ts[1].reason == trial::Reason::kStopped);
  CHECK(ts[1].cause == trial::Cause::kUser);
  CHECK(trial::describe_decision(ts[1], "fifo") == "stopped by tune stop");
  CHECK(ts[1].iteration >= 3);
  CHECK(ts[1].iteration < 100);  // stopped within about a second (one result per tick)
  CHECK(ts[2].status == trial::Status::kTerminated);  // started in the slot it freed
  CHECK(ts[2].iteration == 20);
  CHECK(ts[2].cause == trial::Cause::kNone);
  CHECK(control::stop_requests(e.dir()).empty());  // acted on and removed
}

TEST_CASE("tune stop --trial: a request left while no driver ran applies on resume",
          "[controller][user_stop]") {
  ScratchDir d;
  auto e = make_exp(d, kExp);
  state::ExperimentState before;
  {  // the first run is interrupted while the trials run
    FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(1000000, 0); });
    ex.interrupt_at(5);
    control::Controller c(e, ex, opts());
    REQUIRE(c.run() == kExitInterrupted);
    before = c.state();
  }
  REQUIRE(control::write_stop_request(e.dir(), "00000"));
  REQUIRE(control::write_stop_request(e.dir(), "99999"));  // no such trial: ignored
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(4, 0); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run(before) == kExitOk);
  const auto& ts = c.state().trials;
  REQUIRE(ts.size() == 3);
  CHECK(ts[0].status == trial::Status::kTerminated);
  CHECK(ts[0].cause == trial::Cause::kUser);
  CHECK(ts[0].attempt == before.trials[0].attempt);  // not restarted
  for (size_t i : {1, 2}) {
    CHECK(ts[i].status == trial::Status::kTerminated);
    CHECK(ts[i].cause == trial::Cause::kNone);
  }
  CHECK(control::stop_requests(e.dir()).empty());
}

namespace {

// Step mode: answers each command at once, except that it asks for its own stop at step
// `ask_at` and then takes `slow_s` (fake seconds) to answer the next step; saves on request.
struct UserStopped : FakeProcess {
  fs::path exp_dir;
  int ask_at;
  double slow_s;
  int iter = 0;
  double answer_at = -1;  // when the slow step's answer is due
  double asked_at = -1;   // when it wrote the stop request
  std::vector<int>* saves;
  UserStopped(fs::path dir, int at, double slow, std::vector<int>* s)
      : exp_dir(std::move(dir)), ask_at(at), slow_s(slow), saves(s) {}
  void on_stdin(FakeContext& c, const std::string& line) override {
    auto cmd = json::parse(line);
    if (cmd["op"] == "step") {
      if (++iter == ask_at + 1) {  // the step in flight when the request is read
        answer_at = c.ex->now() + slow_s;
        return;
      }
      if (iter == ask_at) {
        REQUIRE(control::write_stop_request(exp_dir, "00000"));
        asked_at = c.ex->now();
      }
      c.print(json{{"loss", 1.0 / iter}}.dump());
    } else if (cmd["op"] == "save") {
      std::string p = cmd["path"];
      std::ofstream(fs::path(p) / "it") << iter;
      saves->push_back(iter);
      c.print(json{{"saved", p}}.dump());
    } else if (cmd["op"] == "stop") {
      c.exit(0);
    }
  }
  double stopped_at = -1;
  void on_stop(FakeContext& c, bool now) override {
    stopped_at = c.ex->now();
    FakeProcess::on_stop(c, now);
  }
  void on_tick(FakeContext& c, double now) override {
    if (answer_at >= 0 && now >= answer_at) {
      answer_at = -1;
      c.print(json{{"loss", 1.0 / iter}}.dump());
    }
  }
};

const char* kStepExp = R"(
name: exp
trial: {command: [train], mode: step}
param_space: {x: 1}
checkpoint_config: {checkpoint_at_end: true}
)";

}  // namespace

TEST_CASE("tune stop --trial in step mode: after the step in flight, saved at end",
          "[controller][user_stop][step]") {
  ScratchDir d;
  auto e = make_exp(d, kStepExp);
  std::vector<int> saves;
  FakeExecutor ex([&](const exec::Launch&) {
    return std::make_unique<UserStopped>(e.dir(), 3, 1.5, &saves);  // within the grace (2 s)
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& t = c.state().trials.at(0);
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.cause == trial::Cause::kUser);
  CHECK(ex.stops.empty());  // no signal: asked over stdin
  CHECK(ex.stdin_log["00000"].back() == R"({"op":"stop"})");
  REQUIRE(!saves.empty());
  CHECK(saves.back() == t.iteration);  // checkpoint_at_end
  REQUIRE(!t.checkpoints.empty());
  CHECK(t.checkpoints.back().iteration == t.iteration);
  CHECK(t.iteration >= 4);
}

TEST_CASE("tune stop --trial in step mode: a step longer than the grace period is not waited for",
          "[controller][user_stop][step]") {
  ScratchDir d;
  auto e = make_exp(d, kStepExp);
  std::vector<int> saves;
  UserStopped* proc = nullptr;
  FakeExecutor ex([&](const exec::Launch&) {
    auto p = std::make_unique<UserStopped>(e.dir(), 3, 1000, &saves);  // a long epoch
    proc = p.get();
    return p;
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& t = c.state().trials.at(0);
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.reason == trial::Reason::kStopped);
  CHECK(t.cause == trial::Cause::kUser);
  REQUIRE(ex.stops.size() == 1);
  CHECK_FALSE(ex.stops[0].second);  // SIGTERM after the grace period
  // The grace period (2 s) after the request was read (within a second of being written), long
  // before the step would have been answered.
  CHECK(proc->stopped_at - proc->asked_at <= 3.5);
  CHECK(t.iteration == 3);
  CHECK(saves.empty());
  CHECK(t.failures == 0);
}

TEST_CASE("tune stop --trial: a driver killed right after the stop went out keeps it on resume",
          "[controller][user_stop][state]") {
  ScratchDir d;
  auto e = make_exp(d, kExp);
  struct Crash {};
  int printed = 0;
  {
    FakeExecutor ex([&](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
      if (l.argv[1] != "1") return std::make_unique<Reporter>(1000000, 0);
      struct Stopped : Reporter {
        int* printed;
        Stopped(const spec::Experiment& e, int* p)
            : Reporter(1000000, 0,
                       [&e](int i, FakeContext&) {
                         if (i == 3) REQUIRE(control::write_stop_request(e.dir(), "00001"));
                         return json{{"loss", 1.0 / i}};
                       }),
              printed(p) {}
        void on_stop(FakeContext&, bool) override {
          *printed = i;
          throw Crash{};  // the driver dies before any state write records the stop
        }
      };
      return std::make_unique<Stopped>(e, &printed);
    });
    control::Controller c(e, ex, opts());
    REQUIRE_THROWS_AS(c.run(), Crash);
  }
  REQUIRE(printed >= 3);
  auto s = state::load(e.dir());
  REQUIRE(s);
  REQUIRE(s->trials.size() >= 2);
  CHECK(s->trials[1].reason == trial::Reason::kNone);  // only the journal knows
  int64_t from = s->trials[1].iteration;
  INFO("from " << from << " journalled "
               << (s->decisions.empty() ? -1 : s->decisions[0].iteration));
  // The stopped attempt ended meanwhile (its output past the state's offset is read again);
  // the other one is gone and restarts.
  struct Ended : FakeProcess {
    int64_t from;
    int upto;
    Ended(int64_t f, int u) : from(f), upto(u) {}
    void on_attach(FakeContext& c) override {
      for (int64_t i = from + 1; i <= upto; ++i)
        c.print(json{{"loss", 1.0 / static_cast<double>(i)}}.dump());
      c.killed(15);
    }
  };
  FakeExecutor ex([&](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.trial_id == "00001" && l.env.empty()) return std::make_unique<Ended>(from, printed);
    return std::make_unique<Reporter>(4, 0);
  });
  ex.on_attach = [](const exec::Launch& l) {
    return l.trial_id == "00001" ? exec::Attached::kEnded : exec::Attached::kGone;
  };
  control::Controller c(e, ex, opts());
  REQUIRE(c.run(std::move(*s)) == kExitOk);
  const auto& t = c.state().trials[1];
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.reason == trial::Reason::kStopped);
  CHECK(t.cause == trial::Cause::kUser);
  CHECK(t.attempt == 1);  // not restarted
  CHECK(t.iteration == printed);
  auto rows = testing::results_of(e, t);
  REQUIRE(rows.size() == static_cast<size_t>(printed));
  CHECK(rows.back()["decision"] == "stopped by tune stop");
  for (const auto& other : c.state().trials)
    if (other.id != "00001") CHECK(other.cause == trial::Cause::kNone);
}
