// callbacks: the controller's per-trial events (fake executor, no processes), the runner that
// gives them to commands (real /bin/sh commands: batching, order, failures, time limit, a full
// queue), and the callbacks: key's parsing.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <numeric>
#include <thread>

#include "control/callbacks.hpp"
#include "control/controller.hpp"
#include "controller_fixtures.hpp"
#include "fake_executor.hpp"
#include "log_capture.hpp"
#include "spec/parse.hpp"
#include "util/fs.hpp"

using namespace tune;
using control::TrialEvent;
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

// Records each trial's events in order.
struct Recorder final : control::RunObserver {
  std::map<std::string, std::vector<TrialEvent>> by_trial;
  int ends = 0;
  void on_progress(const control::RunSnapshot&, bool) override {}
  void on_run_end(const control::RunSnapshot&) override { ++ends; }
  double seconds_until_due(double) const override { return 3600; }
  void on_trial_event(TrialEvent k, const trial::Trial& t, const json& detail) override {
    by_trial[t.id].push_back(k);
    if (k == TrialEvent::kResult) CHECK(detail.contains("training_iteration"));
    if (k == TrialEvent::kCheckpoint) CHECK(detail["checkpoint"] == "checkpoint_000001");
  }
};

using testing::LogCapture;

std::string yaml_with(const std::string& callbacks) {
  return "name: cb\ntrial: {command: [train]}\nparam_space: {lr: 0.1}\ncallbacks:\n" + callbacks;
}

trial::Trial fake_trial(const std::string& id) {
  trial::Trial t;
  t.id = id;
  t.name = "trial_" + id;
  t.config = {{"lr", 0.1}};
  t.status = trial::Status::kRunning;
  t.attempt = 1;
  return t;
}

// Every call a `cat >> FILE` callback got: one JSON object per line.
std::vector<json> calls_in(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("the controller tells its observer each trial's events, in order", "[callbacks]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: [train, "{lr}"]}
param_space: {lr: {grid_search: [1, 2, 3]}}
failure_config: {max_failures: 1}
)");
  std::map<std::string, int> attempts;
  FakeExecutor ex([&](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    int lr = std::stoi(l.argv[1]);
    if (lr == 1)  // a checkpoint with its second result
      return std::make_unique<Reporter>(3, 0, [](int i, FakeContext& c) {
        json r = {{"loss", 1.0 / i}};
        if (i == 2) r["checkpoint"] = c.make_dir("ck");
        return r;
      });
    if (lr == 2) return std::make_unique<Reporter>(1, 3);  // fails twice: ERROR
    return std::make_unique<Reporter>(1, ++attempts[l.trial_id] == 1 ? 3 : 0);  // one retry
  });
  Recorder rec;
  control::Controller c(e, ex, opts(), &rec);
  REQUIRE(c.run() == kExitTrialError);
  using K = TrialEvent;
  const auto& ts = c.state().trials;
  REQUIRE(ts.size() == 3);
  CHECK(rec.by_trial[ts[0].id] == std::vector<K>{K::kStart, K::kResult, K::kCheckpoint, K::kResult,
                                                 K::kResult, K::kComplete});
  CHECK(rec.by_trial[ts[1].id] ==
        std::vector<K>{K::kStart, K::kResult, K::kStart, K::kResult, K::kError});
  CHECK(rec.by_trial[ts[2].id] ==
        std::vector<K>{K::kStart, K::kResult, K::kStart, K::kResult, K::kComplete});
  CHECK(rec.ends == 1);
}

TEST_CASE("callbacks: each event is one JSON object; results come batched, in order",
          "[callbacks]") {
  ScratchDir d;
  fs::path out = d.path / "calls.jsonl";
  auto e = make_exp(d, yaml_with("  - {command: [/bin/sh, -c, 'cat >> " + out.string() +
                                 "'], on: [trial_start, trial_result, trial_complete, "
                                 "experiment_end]}\n  - {command: [/bin/sh, -c, 'cat >> " +
                                 (d.path / "ends.jsonl").string() + "'], on: [trial_complete]}\n"));
  control::CallbackOptions o;
  o.result_interval_s = 0.5;
  control::CallbackRunner r(e, o);
  auto a = fake_trial("00000"), b = fake_trial("00001");
  r.on_trial_event(TrialEvent::kStart, a, json());
  r.on_trial_event(TrialEvent::kStart, b, json());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= 200; ++i) {  // 200 results in ~0.4 s
    r.on_trial_event(TrialEvent::kResult, i % 2 ? a : b, json{{"training_iteration", i}});
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.on_trial_event(TrialEvent::kCheckpoint, a, json{{"checkpoint", "checkpoint_000001"}});
  a.status = trial::Status::kTerminated;
  r.on_trial_event(TrialEvent::kComplete, a, json());
  state::ExperimentState st;
  st.trials = {a, b};
  r.on_run_end({0, st, e});
  r.finish(30);
  auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto calls = calls_in(out);
  REQUIRE(calls.size() >= 5);
  CHECK(calls[0]["event"] == "trial_start");
  CHECK(calls[0]["trial_id"] == "00000");
  CHECK(calls[0]["config"]["lr"] == 0.1);
  CHECK(calls[0]["experiment"] == "cb");
  CHECK(calls[1]["event"] == "trial_start");
  std::vector<int> seen;
  size_t result_calls = 0, i = 2;
  for (; i < calls.size() && calls[i]["event"] == "trial_result"; ++i, ++result_calls)
    for (const auto& item : calls[i]["results"]) {
      CHECK(item["trial_id"] ==
            (item["result"]["training_iteration"].get<int>() % 2 ? "00000" : "00001"));
      seen.push_back(item["result"]["training_iteration"]);
    }
  std::vector<int> all(200);
  std::iota(all.begin(), all.end(), 1);
  CHECK(seen == all);  // none lost, none twice, in order
  // at most one call per 0.5 s: a handful, not 200
  CHECK(result_calls <= 2 + static_cast<size_t>(elapsed / 0.5));
  REQUIRE(i + 2 == calls.size());  // the checkpoint is not asked for by this one
  CHECK(calls[i]["event"] == "trial_complete");
  CHECK(calls[i]["status"] == "TERMINATED");
  CHECK(calls[i + 1]["event"] == "experiment_end");
  CHECK(calls[i + 1]["trials"]["TERMINATED"] == 1);
  CHECK(calls[i + 1]["trials"]["RUNNING"] == 1);
  auto ends = calls_in(d.path / "ends.jsonl");
  REQUIRE(ends.size() == 1);
  CHECK(ends[0]["trial_name"] == "trial_00000");
}

TEST_CASE("callbacks: a failing one is logged with its stderr's first line", "[callbacks]") {
  ScratchDir d;
  auto e = make_exp(d, yaml_with("  - {command: [/bin/sh, -c, 'echo; echo boom here >&2; echo "
                                 "second >&2; exit 3'], on: [trial_start]}\n"
                                 "  - {command: [./no-such-callback], on: [trial_start]}\n"));
  LogCapture logs;
  control::CallbackOptions o;
  o.log_dir = d.path / "cblogs";
  control::CallbackRunner r(e, o);
  auto t = fake_trial("00000");
  r.on_trial_event(TrialEvent::kStart, t, json());
  r.finish(30);
  auto text = logs.text();
  CHECK(text.find("callback 1 (sh) failed on trial_start (exit code 3): boom here") !=
        std::string::npos);
  CHECK(text.find("second") == std::string::npos);
  CHECK(text.find("callback 2 (no-such-callback) could not start on trial_start: "
                  "'./no-such-callback': No such file or directory") != std::string::npos);
  CHECK(fs::exists(d.path / "cblogs" / "1.stderr"));
}

TEST_CASE("callbacks: one running past the time limit is killed and reaped", "[callbacks]") {
  ScratchDir d;
  fs::path pid_file = d.path / "pid";
  auto e = make_exp(d, yaml_with("  - {command: [/bin/sh, -c, 'echo $$ > " + pid_file.string() +
                                 "; exec sleep 30'], on: [trial_start]}\n"));
  LogCapture logs;
  control::CallbackOptions o;
  o.call_timeout_s = 0.3;
  control::CallbackRunner r(e, o);
  auto t = fake_trial("00000");
  auto t0 = std::chrono::steady_clock::now();
  r.on_trial_event(TrialEvent::kStart, t, json());
  r.finish(20);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  CHECK(logs.text().find("callback 1 (sh) ran longer than 0.3 s on trial_start: killed") !=
        std::string::npos);
  auto pid = util::read_file(pid_file, 100);
  REQUIRE(pid);
  errno = 0;
  CHECK(::kill(std::stoi(*pid), 0) == -1);  // gone, and no zombie left either
  CHECK(errno == ESRCH);
}

TEST_CASE("callbacks: a full queue drops events with one warning", "[callbacks]") {
  ScratchDir d;
  fs::path out = d.path / "calls.jsonl";
  auto e = make_exp(d, yaml_with("  - {command: [/bin/sh, -c, 'sleep 0.2; cat >> " + out.string() +
                                 "'], on: [trial_start]}\n"));
  LogCapture logs;
  control::CallbackOptions o;
  o.max_queued = 3;
  control::CallbackRunner r(e, o);
  for (int i = 0; i < 20; ++i) {
    auto t = fake_trial(std::to_string(i));
    r.on_trial_event(TrialEvent::kStart, t, json());
  }
  r.finish(30);
  auto calls = calls_in(out);
  CHECK(calls.size() >= 3);
  CHECK(calls.size() <= 4);  // the one running, and the 3 it could queue
  auto text = logs.text();
  auto first = text.find("further events are dropped");
  CHECK(first != std::string::npos);
  CHECK(text.find("further events are dropped", first + 1) == std::string::npos);
  CHECK(text.find(std::to_string(20 - calls.size()) + " events were dropped") != std::string::npos);
}

TEST_CASE("callbacks: parse errors name the place; they may change on resume", "[callbacks]") {
  auto err = [](const std::string& cb) {
    auto r = spec::parse_experiment(yaml_with(cb), "/tmp/exp.yaml");
    REQUIRE(!r);
    return r.error().message;
  };
  CHECK(err("  - {on: [trial_compete], command: [x]}\n") ==
        "/tmp/exp.yaml:5:11: unknown callback event 'trial_compete' in callbacks[0].on (did you "
        "mean 'trial_complete'?)");
  CHECK(err("  - {on: [trial_start], command: []}\n") ==
        "/tmp/exp.yaml:5:34: callbacks[0].command is empty: name the program to run");
  CHECK(err("  - {on: trial_start, command: [x]}\n").find("callbacks[0].on must be a list") !=
        std::string::npos);
  CHECK(err("  - {on: [], command: [x]}\n").find("non-empty list") != std::string::npos);
  CHECK(err("  - {on: [checkpoint, checkpoint], command: [x]}\n").find("listed twice") !=
        std::string::npos);
  CHECK(err("  - {command: [x], when: [x]}\n").find("unknown key 'when'") != std::string::npos);
  CHECK(err("  {command: [x]}\n").find("callbacks must be a list") != std::string::npos);
  auto a = spec::parse_experiment(yaml_with("  - {command: 'notify.sh --to me'}\n"), "/tmp/e.yaml");
  REQUIRE(a);
  REQUIRE(a->callbacks.size() == 1);
  CHECK(a->callbacks[0].command == std::vector<std::string>{"notify.sh", "--to", "me"});
  CHECK(a->callbacks[0].on.size() == 6);  // every event when `on` is left out
  auto b = spec::parse_experiment(yaml_with("  - {command: [other.sh], on: [trial_error]}\n"),
                                  "/tmp/e.yaml");
  REQUIRE(b);
  CHECK(!spec::forbidden_change(a->effective, b->effective));
  auto ray = spec::parse_experiment(
      "name: cb\ntrial: {command: [train]}\nparam_space: {lr: 0.1}\n"
      "run_config: {callbacks: [{command: [x], on: [trial_error]}]}\n",
      "/tmp/e.yaml");
  REQUIRE(ray);
  CHECK(ray->callbacks.size() == 1);
}
