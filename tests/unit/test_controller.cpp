// The controller driven by the scripted FakeExecutor: protocol, stopping, retries, checkpoints,
// retention, step mode, interrupts, budget, concurrency. No processes; milliseconds each.
#include <spdlog/spdlog.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <thread>

#include "checkpoint/adopt.hpp"
#include "control/controller.hpp"
#include "controller_fixtures.hpp"
#include "log_capture.hpp"
#include "util/fs.hpp"

using namespace tune;
using testing::FakeContext;
using testing::FakeExecutor;
using testing::FakeProcess;
using testing::iterations;
using testing::make_exp;
using testing::opts;
using testing::Reporter;
using testing::results_of;
using testing::ScratchDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* kBase = R"(
name: exp
param_space:
  lr: {grid_search: [0.1, 0.2]}
seed: 1
metric: loss
mode: min
)";
const char* kTrial = "trial: {command: [\"train\", \"--lr\", \"{lr}\"]}\n";
const char* kTwo = "num_samples: 2\n";

}  // namespace

TEST_CASE("function-mode trials run to TERMINATED with driver-filled fields", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo);
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(3, 0); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  REQUIRE(c.state().trials.size() == 4);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    auto rows = results_of(e, t);
    CHECK(iterations(rows) == std::vector<int64_t>{1, 2, 3});
    for (const char* k : {"time_this_iter_s", "time_total_s", "timestamp", "date", "trial_id",
                          "hostname", "pid", "iterations_since_restore", "done"})
      CHECK(rows[0].contains(k));
    CHECK(rows[2]["trial_id"] == t.id);
    CHECK(rows[2]["hostname"] == "fakehost");
    CHECK(t.metrics.at("loss").min == Approx(1.0 / 3));
    CHECK(std::filesystem::exists(e.dir() / t.name / "params.json"));
  }
  // the argv got the config value substituted into one word
  CHECK(ex.launches[0].argv == std::vector<std::string>{"train", "--lr", "0.1"});
  CHECK(ex.launches[0].env.at("TUNE_TRIAL_DIR") == (e.dir() / c.state().trials[0].name).string());
  CHECK(json::parse(ex.launches[0].env.at("TUNE_CONFIG"))["lr"] == 0.1);
  CHECK(ex.launches[0].env.count("TUNE_RESTORE_CHECKPOINT") == 0);
  CHECK(ex.launches[0].env.at("CUDA_VISIBLE_DEVICES").empty());
}

TEST_CASE("a stop criterion stops the trial and later results are not recorded", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo + "stop: {training_iteration: 5}\n");
  // Keeps reporting until stopped; prints 2 results per tick to race the stop.
  struct Chatty : FakeProcess {
    int i = 0;
    void on_tick(FakeContext& c, double) override {
      c.print(json{{"loss", 1.0 / ++i}}.dump());
      c.print(json{{"loss", 1.0 / ++i}}.dump());
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Chatty>(); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(iterations(results_of(e, t)) == std::vector<int64_t>{1, 2, 3, 4, 5});
  }
  CHECK(ex.stops.size() == 4);
}

TEST_CASE("a metric threshold in stop ends the trial when reached (>=)", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo + "stop: {accuracy: 0.5}\n");
  FakeExecutor ex([](const exec::Launch&) {
    return std::make_unique<Reporter>(100, 0, [](int i, FakeContext&) {
      return json{{"accuracy", i / 10.0}};
    });
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  CHECK(c.state().trials[0].iteration == 5);
}

TEST_CASE("done:true ends the trial as TERMINATED", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo);
  struct DoneThenLinger : FakeProcess {
    int i = 0;
    void on_tick(FakeContext& c, double) override {
      ++i;
      if (i <= 3)
        c.print(json{{"loss", 1.0}, {"done", i == 3}}.dump());
      else if (i == 4)
        c.print(json{{"loss", 0.0}}.dump());  // after done: not recorded
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<DoneThenLinger>(); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.iteration == 3);
  }
}

TEST_CASE("a crashed trial is retried and each iteration is recorded once", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo + "failure_config: {max_failures: 1}\n");
  FakeExecutor ex([](const exec::Launch& l) {
    return l.attempt == 1 ? std::make_unique<Reporter>(3, 1) : std::make_unique<Reporter>(5, 0);
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.failures == 1);
    CHECK(t.attempt == 2);
    // no checkpoint: the retry starts from scratch and the first attempt's rows are dropped
    CHECK(iterations(results_of(e, t)) == std::vector<int64_t>{1, 2, 3, 4, 5});
  }
}

TEST_CASE("a trial that keeps failing ends in ERROR with the reason, exit code 1", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo + "failure_config: {max_failures: 2}\n");
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(1, 3); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitTrialError);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kError);
    CHECK(t.attempt == 3);
    CHECK(t.error.find("exit code 3") != std::string::npos);
  }
}

TEST_CASE("a command that cannot be executed is an ERROR at once, and the others go on",
          "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo + "failure_config: {max_failures: 5}\n");
  struct Missing : FakeProcess {
    void on_start(FakeContext& c) override {
      c.exit(127, "command not found: train", exec::ExitReason::kExecFailed);
    }
  };
  FakeExecutor ex([](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.trial_id == "00001") return std::make_unique<Missing>();
    return std::make_unique<Reporter>(2, 0);
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitTrialError);
  const auto& ts = c.state().trials;
  CHECK(ts[1].status == trial::Status::kError);
  CHECK(ts[1].error == "command not found: train");
  CHECK(ts[1].attempt == 1);  // not retried
  CHECK(ts[0].status == trial::Status::kTerminated);
  CHECK(ts[3].status == trial::Status::kTerminated);
}

TEST_CASE("fail_fast stops the experiment at the first error", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo +
                           "failure_config: {fail_fast: true}\nmax_concurrent_trials: 2\n");
  FakeExecutor ex([](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.trial_id == "00000") return std::make_unique<Reporter>(1, 1);
    return std::make_unique<Reporter>(1000, 0);
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitTrialError);
  const auto& ts = c.state().trials;
  CHECK(ts[0].status == trial::Status::kError);
  CHECK(ts.size() == 2);                           // trials 2 and 3 were never started
  CHECK(ts[1].status == trial::Status::kPending);  // stopped, resumable
}

TEST_CASE("function-mode checkpoints are adopted and a retry restores the latest",
          "[controller][checkpoint]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"]}
param_space: {x: 1}
failure_config: {max_failures: 1}
)");
  struct CrashAt7 : FakeProcess {
    int i = 0;
    void on_start(FakeContext& c) override {
      if (c.has_env("TUNE_RESTORE_CHECKPOINT")) i = 5;  // resumes after iteration 5
    }
    void on_tick(FakeContext& c, double) override {
      bool restored = c.has_env("TUNE_RESTORE_CHECKPOINT");
      if (!restored && i == 7) return c.exit(1);
      if (i == 10) return c.exit(0);
      ++i;
      json r = {{"loss", 10.0 - i}, {"i", i}};
      if (i == 5) r["checkpoint"] = c.make_dir("ckpt_tmp");
      c.print(r.dump());
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<CrashAt7>(); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& t = c.state().trials.at(0);
  CHECK(t.status == trial::Status::kTerminated);
  REQUIRE(ex.launches.size() == 2);
  fs::path ck = e.dir() / t.name / "checkpoint_000001";
  CHECK(ex.launches[1].env.at("TUNE_RESTORE_CHECKPOINT") == ck.string());
  CHECK(fs::exists(ck / "state.txt"));
  CHECK_FALSE(fs::exists(e.dir() / t.name / "ckpt_tmp"));
  auto rows = results_of(e, t);
  CHECK(iterations(rows) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(rows[5]["iterations_since_restore"] == 1);  // iteration 6, first after the restore
  CHECK(rows[5]["i"] == 6);
  CHECK(rows[4]["checkpoint_dir_name"] == "checkpoint_000001");
}

TEST_CASE("retention keeps the N best: Ray's example 2,4,1,3 keep 2 by min",
          "[controller][checkpoint]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"]}
param_space: {x: 1}
checkpoint_config: {num_to_keep: 2, checkpoint_score_attribute: loss, checkpoint_score_order: min}
)");
  FakeExecutor ex([](const exec::Launch&) {
    return std::make_unique<Reporter>(4, 0, [](int i, FakeContext& c) {
      const double losses[] = {2, 4, 1, 3};
      return json{{"loss", losses[i - 1]}, {"checkpoint", c.make_dir("tmp" + std::to_string(i))}};
    });
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  const auto& t = c.state().trials.at(0);
  fs::path dir = e.dir() / t.name;
  CHECK(fs::exists(dir / "checkpoint_000001"));
  CHECK_FALSE(fs::exists(dir / "checkpoint_000002"));
  CHECK(fs::exists(dir / "checkpoint_000003"));
  CHECK_FALSE(fs::exists(dir / "checkpoint_000004"));
  REQUIRE(t.checkpoints.size() == 2);
  CHECK(t.checkpoints[0].seq == 1);
  CHECK(t.checkpoints[1].seq == 3);
  // the state on disk names exactly what is on disk
  auto s = state::load(e.dir());
  REQUIRE(s);
  REQUIRE(s->trials[0].checkpoints.size() == 2);
  for (const auto& ck : s->trials[0].checkpoints) CHECK(fs::exists(dir / ck.dir_name()));
}

TEST_CASE("a reported checkpoint outside the trial dir is refused and left alone",
          "[controller][checkpoint]") {
  ScratchDir d;
  fs::create_directories(d.path / "work");  // the workdir: what lies there would be copied
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"], workdir: work}
param_space: {x: 1}
)");
  // The scratch dir is itself under /tmp: point TMPDIR elsewhere so "outside" really is.
  fs::create_directories(d.path / "faketmp");
  const char* old_tmp = std::getenv("TMPDIR");
  std::string saved = old_tmp ? old_tmp : "";
  ::setenv("TMPDIR", (d.path / "faketmp").c_str(), 1);
  fs::create_directories(d.path / "outside");
  std::ofstream(d.path / "outside" / "precious") << "keep me";
  std::string outside = (d.path / "outside").string();
  FakeExecutor ex([&](const exec::Launch&) {
    return std::make_unique<Reporter>(4, 0, [&](int i, FakeContext& c) {
      std::string link = (c.launch.trial_dir / "link").string();
      if (i == 4) fs::create_directory_symlink(outside, link);
      const std::string paths[] = {"../../outside", "/etc", outside, link};
      return json{{"loss", 1.0}, {"checkpoint", paths[i - 1]}};
    });
  });
  control::Controller c(e, ex, opts());
  int code = c.run();
  if (old_tmp)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  REQUIRE(code == kExitOk);
  CHECK(c.state().trials[0].checkpoints.empty());
  CHECK(fs::exists(d.path / "outside" / "precious"));
  CHECK(fs::exists("/etc/passwd"));
  CHECK(c.state().trials[0].iteration == 4);  // the results themselves still count
}

TEST_CASE("step mode: checkpoints at frequency, should_checkpoint and at end, never twice",
          "[controller][step]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"], mode: step}
param_space: {x: 1}
stop: {training_iteration: 10}
checkpoint_config: {checkpoint_frequency: 3, checkpoint_at_end: true}
)");
  struct Stepper : FakeProcess {
    int iter = 0;
    std::vector<int>* saves;
    explicit Stepper(std::vector<int>* s) : saves(s) {}
    void on_stdin(FakeContext& c, const std::string& line) override {
      auto cmd = json::parse(line);
      if (cmd["op"] == "step") {
        ++iter;
        json r = {{"loss", 1.0 / iter}};
        if (iter == 5) r["should_checkpoint"] = true;
        c.print(r.dump());
      } else if (cmd["op"] == "save") {
        std::string p = cmd["path"];
        std::ofstream(fs::path(p) / "it") << iter;
        saves->push_back(iter);
        c.print(json{{"saved", p}}.dump());
      } else if (cmd["op"] == "stop") {
        c.exit(0);
      }
    }
  };
  std::vector<int> saves;
  FakeExecutor ex([&](const exec::Launch&) { return std::make_unique<Stepper>(&saves); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  CHECK(saves == std::vector<int>{3, 5, 6, 9, 10});
  const auto& t = c.state().trials[0];
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.iteration == 10);
  REQUIRE(t.checkpoints.size() == 5);
  CHECK(t.checkpoints.back().iteration == 10);
  for (const auto& ck : t.checkpoints) CHECK(fs::exists(e.dir() / t.name / ck.dir_name() / "it"));
  CHECK(ex.stdin_log["00000"].back() == R"({"op":"stop"})");
}

TEST_CASE("step mode: a save adopted off the loop lets the next command go at once",
          "[controller][step]") {
  // As on an SSH host: the adoption waits on the host's link, on the file worker; the loop
  // sends the next command meanwhile, and registers the checkpoint once it is in.
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"], mode: step}
param_space: {x: 1}
stop: {training_iteration: 4}
checkpoint_config: {checkpoint_frequency: 1, checkpoint_at_end: true}
)");
  std::atomic<int> commands{0};
  struct Stepper : FakeProcess {
    int iter = 0;
    std::atomic<int>* commands;
    explicit Stepper(std::atomic<int>* n) : commands(n) {}
    void on_stdin(FakeContext& c, const std::string& line) override {
      ++*commands;
      auto cmd = json::parse(line);
      if (cmd["op"] == "step") {
        c.print(json{{"loss", 1.0 / ++iter}}.dump());
      } else if (cmd["op"] == "save") {
        std::string p = cmd["path"];
        std::ofstream(fs::path(p) / "it") << iter;
        c.print(json{{"saved", p}}.dump());
      } else if (cmd["op"] == "stop") {
        c.exit(0);
      }
    }
  };
  FakeExecutor ex([&](const exec::Launch&) { return std::make_unique<Stepper>(&commands); });
  std::atomic<int> adopted{0}, overtaken{0};
  ex.on_adopt_task = [&](const std::string& reported, const fs::path& cwd, const fs::path& dir,
                         const std::string& dest) -> std::function<Result<void>()> {
    int before = commands.load();  // made on the loop, when the `saved` answer came
    return [&, before, reported, cwd, dir, dest]() -> Result<void> {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (commands.load() == before && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (commands.load() > before) ++overtaken;  // the next command went out first
      ++adopted;
      return checkpoint::adopt(reported, cwd, dir, dest);
    };
  };
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  CHECK(adopted == 4);
  CHECK(overtaken == 4);
  const auto& t = c.state().trials[0];
  CHECK(t.status == trial::Status::kTerminated);
  REQUIRE(t.checkpoints.size() == 4);
  for (size_t i = 0; i < t.checkpoints.size(); ++i) {
    CHECK(t.checkpoints[i].iteration == static_cast<int64_t>(i + 1));
    std::ifstream in(e.dir() / t.name / t.checkpoints[i].dir_name() / "it");
    int it = 0;
    in >> it;
    CHECK(it == static_cast<int>(i + 1));
  }
  CHECK(ex.stdin_log["00000"].back() == R"({"op":"stop"})");
}

TEST_CASE("Ctrl-C once stops trials, keeps them resumable, exit 130", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo);
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(1000000, 0); });
  ex.interrupt_at(1005);
  control::Controller c(e, ex, opts(2));
  REQUIRE(c.run() == kExitInterrupted);
  auto s = state::load(e.dir());
  REQUIRE(s);
  CHECK(s->phase == "interrupted");
  for (const auto& t : s->trials) CHECK(t.status == trial::Status::kPending);
  CHECK(ex.stops.size() == 2);
  CHECK_FALSE(ex.stops[0].second);  // SIGTERM first, not SIGKILL
}

TEST_CASE("Ctrl-C twice kills at once and still saves state", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo);
  struct Stubborn : FakeProcess {  // ignores SIGTERM
    void on_tick(FakeContext& c, double) override { c.print(R"({"loss": 1})"); }
    void on_stop(FakeContext& c, bool now) override {
      if (now) c.killed(9);
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Stubborn>(); });
  ex.interrupt_at(1003);
  ex.interrupt_at(1004);
  control::Controller c(e, ex, opts(2));
  REQUIRE(c.run() == kExitInterrupted);
  bool killed_now = false;
  for (const auto& [id, now] : ex.stops) killed_now |= now;
  CHECK(killed_now);
  auto s = state::load(e.dir());
  REQUIRE(s);
  CHECK(s->phase == "interrupted");
}

TEST_CASE("time_budget_s stops running trials as TERMINATED and starts no more", "[controller]") {
  ScratchDir d;
  auto e = make_exp(
      d, std::string(kBase) + kTrial + kTwo + "time_budget_s: 30\nmax_concurrent_trials: 1\n");
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(1000000, 0); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  REQUIRE(c.state().trials.size() == 1);
  CHECK(c.state().trials[0].status == trial::Status::kTerminated);
  CHECK(ex.now() < 1000 + 30 + 5);
}

TEST_CASE("concurrency is bounded by max_concurrent_trials and by cpus", "[controller]") {
  ScratchDir d;
  struct Count : FakeProcess {
    int* running;
    int* peak;
    int ticks = 0;
    Count(int* r, int* p) : running(r), peak(p) {}
    void on_start(FakeContext&) override { *peak = std::max(*peak, ++*running); }
    void on_tick(FakeContext& c, double) override {
      if (++ticks == 3) --*running, c.exit(0);
    }
  };
  int running = 0, peak = 0;
  SECTION("max_concurrent_trials") {
    auto e =
        make_exp(d, std::string(kBase) + kTrial + "num_samples: 5\nmax_concurrent_trials: 3\n");
    FakeExecutor ex([&](const exec::Launch&) { return std::make_unique<Count>(&running, &peak); });
    control::Controller c(e, ex, opts(64));
    REQUIRE(c.run() == kExitOk);
    CHECK(c.state().trials.size() == 10);
    CHECK(peak == 3);
  }
  SECTION("cpus") {
    auto e =
        make_exp(d, std::string(kBase) + kTwo + "trial: {command: [x], resources: {cpu: 2}}\n");
    FakeExecutor ex([&](const exec::Launch&) { return std::make_unique<Count>(&running, &peak); });
    control::Controller c(e, ex, opts(5));
    REQUIRE(c.run() == kExitOk);
    CHECK(peak == 2);
  }
}

TEST_CASE("hundreds of slots freed at once are filled a slice at a time, events read between",
          "[controller]") {
  // Each start costs the loop 10 ms: 300 starts in one turn would hold it 3 s, reading no
  // output and no Ctrl-C meanwhile. At most 50 ms of starts a turn, and no sleep in between.
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + "num_samples: 150\n");
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(2, 0); });
  ex.start_cost = 0.01;
  control::Controller c(e, ex, opts(1000));
  REQUIRE(c.run() == kExitOk);
  REQUIRE(c.state().trials.size() == 300);
  for (const auto& t : c.state().trials) CHECK(t.status == trial::Status::kTerminated);
  size_t before = 0, longest = 0;
  for (size_t n : ex.launches_at_wait) longest = std::max(longest, n - before), before = n;
  CHECK(longest <= 6);          // 50 ms / 10 ms, and the start that crossed the line
  CHECK(ex.now() - 1000 < 10);  // 300 x 10 ms of starts, not a 1 s sleep after each of 60 slices
}

TEST_CASE("GPUs are assigned exclusively unless fractions are asked for", "[controller]") {
  ScratchDir d;
  struct Hold : FakeProcess {
    std::vector<std::string>* seen;
    int ticks = 0;
    explicit Hold(std::vector<std::string>* s) : seen(s) {}
    void on_start(FakeContext& c) override { seen->push_back(c.env("CUDA_VISIBLE_DEVICES")); }
    void on_tick(FakeContext& c, double) override {
      if (++ticks == 2) c.exit(0);
    }
  };
  std::vector<std::string> seen;
  SECTION("whole GPUs") {
    auto e = make_exp(
        d, std::string(kBase) + kTwo + "trial: {command: [x], resources: {cpu: 1, gpu: 1}}\n");
    FakeExecutor ex([&](const exec::Launch&) { return std::make_unique<Hold>(&seen); });
    control::Controller c(e, ex, opts(8, 2));
    REQUIRE(c.run() == kExitOk);
    REQUIRE(seen.size() == 4);
    CHECK(seen[0] != seen[1]);  // the first two ran at once on different GPUs
    for (const auto& s : seen) CHECK((s == "0" || s == "1"));
  }
  SECTION("fractions share") {
    auto e = make_exp(
        d, std::string(kBase) + kTwo + "trial: {command: [x], resources: {cpu: 1, gpu: 0.5}}\n");
    FakeExecutor ex([&](const exec::Launch&) { return std::make_unique<Hold>(&seen); });
    control::Controller c(e, ex, opts(8, 1));
    REQUIRE(c.run() == kExitOk);
    CHECK(seen[0] == "0");
    CHECK(seen[1] == "0");
  }
}

TEST_CASE("write-ahead: a trial is in the saved state before it starts", "[controller][state]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo);
  std::vector<std::string> states_at_start;
  struct Peek : Reporter {
    std::vector<std::string>* out;
    fs::path exp_dir;
    Peek(std::vector<std::string>* o, fs::path dir)
        : Reporter(1, 0), out(o), exp_dir(std::move(dir)) {}
    void on_start(FakeContext& c) override {
      auto s = state::load(exp_dir);
      if (!s) FAIL(s.error().message);
      for (const auto& t : s->trials)
        if (t.id == c.launch.trial_id)
          out->push_back(std::string(trial::status_name(t.status)) + "/" +
                         std::to_string(t.attempt));
    }
  };
  FakeExecutor ex(
      [&](const exec::Launch&) { return std::make_unique<Peek>(&states_at_start, e.dir()); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  CHECK(states_at_start == std::vector<std::string>(4, "RUNNING/1"));
}

TEST_CASE("non-JSON output is ignored, a trial that reports nothing and exits 0 is TERMINATED",
          "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kBase) + kTrial + kTwo);
  struct Junk : FakeProcess {
    int i = 0;
    void on_tick(FakeContext& c, double) override {
      switch (i++) {
        case 0:
          c.print_raw(std::string("\x00\xff\xfe binary\n", 12));
          break;
        case 1:
          c.print("[1, 2, 3]");
          break;
        case 2:
          c.print("{not json");
          break;
        case 3:
          c.print("Epoch 1: loss 0.3");
          break;
        default:
          c.exit(0);
      }
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Junk>(); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.iteration == 0);
  }
}

TEST_CASE("hostile config values reach the trial as literal argv words", "[controller]") {
  ScratchDir d;
  auto e = make_exp(d, R"Y(
name: exp
trial: {command: ["prog", "--x={x}", "{y}"]}
param_space:
  x: {choice: ["$(touch /tmp/tune-pwned)"]}
  y: {grid_search: ["; rm -rf ~", "a b 'c' \"d\""]}
)Y");
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(0, 0); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  REQUIRE(ex.launches.size() == 2);
  CHECK(ex.launches[0].argv ==
        std::vector<std::string>{"prog", "--x=$(touch /tmp/tune-pwned)", "; rm -rf ~"});
  CHECK(ex.launches[1].argv[2] == "a b 'c' \"d\"");
}

TEST_CASE("the time budget stops a step-mode trial stuck in a step", "[controller][step]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"], mode: step}
param_space: {x: 1}
time_budget_s: 5
)");
  struct Stuck : FakeProcess {  // answers the first step, then never again
    int steps = 0;
    void on_stdin(FakeContext& c, const std::string& line) override {
      if (json::parse(line)["op"] == "step" && ++steps == 1) c.print(R"({"loss": 1})");
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Stuck>(); });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  CHECK(c.state().trials[0].status == trial::Status::kTerminated);
  CHECK(c.state().trials[0].iteration == 1);
  CHECK(ex.now() < 1000 + 5 + 2 + 1);  // budget + grace
  REQUIRE(ex.stops.size() == 1);
}

TEST_CASE("step mode: an attempt its commands cannot reach fails, and is retried",
          "[controller][step]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"], mode: step}
param_space: {x: 1}
stop: {training_iteration: 4}
failure_config: {max_failures: 1}
)");
  // Its first attempt's third command cannot be delivered (its stdin.fifo was removed, say):
  // the executor says so, and the attempt waits for ever unless the controller ends it.
  struct Lost : FakeProcess {
    int iter = 0;
    void on_stdin(FakeContext& c, const std::string& line) override {
      auto cmd = json::parse(line);
      if (cmd["op"] == "step" && c.launch.attempt == 1 && iter == 2) {
        c.ex->push(exec::StdinLostEvent{c.launch.trial_id, 1, "its stdin.fifo is not there"});
        return;
      }
      if (cmd["op"] == "step") c.print(json{{"loss", 1.0 / ++iter}}.dump());
      if (cmd["op"] == "stop") c.exit(0);
    }
  };
  auto o = opts();  // (before the capture: it silences the default logger)
  testing::LogCapture logs;
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Lost>(); });
  control::Controller c(e, ex, o);
  REQUIRE(c.run() == kExitOk);
  const auto& t = c.state().trials[0];
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.failures == 1);
  CHECK(t.attempt == 2);
  REQUIRE_FALSE(ex.stops.empty());
  CHECK(ex.stops.front() == std::pair<std::string, bool>{"00000", true});  // (killed at once)
  CHECK(logs.text().find("its step-mode commands cannot reach it (its stdin.fifo is not there)") !=
        std::string::npos);
  CHECK(ex.now() < 1000 + 5);  // (no wait for a time-out)

  // With no retry left: ERROR, saying why.
  ScratchDir d2;
  auto e2 = make_exp(d2, R"(
name: exp
trial: {command: ["train"], mode: step}
param_space: {x: 1}
stop: {training_iteration: 4}
)");
  FakeExecutor ex2([](const exec::Launch&) { return std::make_unique<Lost>(); });
  control::Controller c2(e2, ex2, opts());
  (void)c2.run();
  const auto& t2 = c2.state().trials[0];
  CHECK(t2.status == trial::Status::kError);
  CHECK(t2.error.find("its step-mode commands could not reach it: its stdin.fifo is not there") !=
        std::string::npos);
}

TEST_CASE(
    "step mode: an attempt that never ran fails for its record's reason, not its lost commands",
    "[controller][step]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"], mode: step}
param_space: {x: 1}
stop: {training_iteration: 4}
)");
  // Its first command is said lost before its exit record comes: the record (exec_failed, its
  // FIFO could not be made) says why the attempt failed.
  struct NeverRan : FakeProcess {
    void on_stdin(FakeContext& c, const std::string&) override {
      c.ex->push(exec::StdinLostEvent{c.launch.trial_id, 1, "Is a directory"});
    }
    void on_stop(FakeContext& c, bool) override {
      c.exit(127, "cannot create stdin.fifo: File exists", exec::ExitReason::kExecFailed);
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<NeverRan>(); });
  control::Controller c(e, ex, opts());
  (void)c.run();
  const auto& t = c.state().trials[0];
  CHECK(t.status == trial::Status::kError);
  CHECK(t.error.find("cannot create stdin.fifo: File exists") != std::string::npos);
}

TEST_CASE("retention deletes a checkpoint that became a symlink, never its target",
          "[controller][checkpoint]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"]}
param_space: {x: 1}
checkpoint_config: {num_to_keep: 1, checkpoint_score_attribute: loss, checkpoint_score_order: min}
)");
  fs::create_directories(d.path / "outside");
  std::ofstream(d.path / "outside" / "precious") << "keep me";
  fs::path outside = d.path / "outside";
  FakeExecutor ex([&](const exec::Launch&) {
    return std::make_unique<Reporter>(3, 0, [&](int i, FakeContext& c) {
      if (i == 2) {  // the trial swaps its first checkpoint for a link to somewhere else
        fs::path first = c.launch.trial_dir / "checkpoint_000001";
        fs::remove_all(first);
        fs::create_directory_symlink(outside, first);
      }
      return json{{"loss", 10.0 - i}, {"checkpoint", c.make_dir("tmp" + std::to_string(i))}};
    });
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  fs::path dir = e.dir() / c.state().trials[0].name;
  CHECK_FALSE(fs::exists(fs::symlink_status(dir / "checkpoint_000001")));
  CHECK(fs::exists(outside / "precious"));
  CHECK(fs::exists(dir / "checkpoint_000003"));
  CHECK(c.state().trials[0].checkpoints.size() == 1);
}

TEST_CASE(
    "resume re-attaches to a live attempt: results since the last state write once, "
    "checkpoints adopted meanwhile kept",
    "[controller][resume]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"]}
param_space: {x: 1}
)");
  // First driver: two results, then the state is as a crashed driver left it (below).
  FakeExecutor ex1([](const exec::Launch&) { return std::make_unique<Reporter>(2, 0); });
  control::Controller c1(e, ex1, opts());
  REQUIRE(c1.run() == kExitOk);
  auto saved = c1.state();
  auto& st = saved.trials.at(0);
  fs::path dir = e.dir() / st.name;
  // The crashed driver had recorded iterations 3 and 4 (the second with a checkpoint it moved
  // to checkpoint_000001) after its last state write; the state still says RUNNING at 2.
  st.status = trial::Status::kRunning;
  {
    trial::ResultLog log;
    REQUIRE(log.open(dir));
    log.append(json{{"training_iteration", 3}, {"loss", 0.3}});
    log.append(json{{"training_iteration", 4}, {"loss", 0.25}});
    REQUIRE(log.flush());
  }
  fs::create_directories(dir / "checkpoint_000001");
  fs::create_directories(dir / "checkpoint_000007");  // not named by any line: removed later
  REQUIRE(iterations(results_of(e, st)).size() == 4);

  // The attempt is still running: it prints lines 3 and 4 again (read from the saved offset),
  // then one more and exits.
  struct Continues : FakeProcess {
    int i = 0;
    void on_attach(FakeContext& c) override {
      c.print(json{{"loss", 0.3}}.dump());
      c.print(json{{"loss", 0.25}, {"checkpoint", "/nonexistent/already/moved"}}.dump());
    }
    void on_tick(FakeContext& c, double) override {
      if (i++ == 0) return c.print(json{{"loss", 0.2}}.dump());
      c.exit(0);
    }
  };
  FakeExecutor ex2([](const exec::Launch&) { return std::make_unique<Continues>(); });
  ex2.on_attach = [](const exec::Launch&) { return exec::Attached::kRunning; };
  control::Controller c2(e, ex2, opts());
  REQUIRE(c2.run(saved) == kExitOk);
  CHECK(ex2.launches.empty());  // nothing restarted
  REQUIRE(ex2.attaches.size() == 1);
  CHECK(ex2.attaches[0].attempt == 1);
  const auto& t = c2.state().trials.at(0);
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.failures == 0);
  auto rows = results_of(e, t);
  CHECK(iterations(rows) == std::vector<int64_t>{1, 2, 3, 4, 5});
  REQUIRE(t.checkpoints.size() == 1);
  CHECK(t.checkpoints[0].iteration == 4);
  CHECK(rows[3]["checkpoint_dir_name"] == "checkpoint_000001");
  CHECK(fs::is_directory(dir / "checkpoint_000001"));
  CHECK(t.metrics.at("loss").min == Approx(0.2));
}

TEST_CASE(
    "resume restarts a trial whose attempt is gone from its latest checkpoint, dropping "
    "later results and stray checkpoint dirs",
    "[controller][resume]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"]}
param_space: {x: 1}
)");
  FakeExecutor ex1([](const exec::Launch&) {
    return std::make_unique<Reporter>(4, 0, [](int i, FakeContext& c) {
      json r = {{"loss", 1.0 / i}};
      if (i == 2) r["checkpoint"] = c.make_dir("ck");
      return r;
    });
  });
  control::Controller c1(e, ex1, opts());
  REQUIRE(c1.run() == kExitOk);
  auto saved = c1.state();
  auto& st = saved.trials.at(0);
  st.status = trial::Status::kRunning;  // as if the driver died while it ran
  fs::path dir = e.dir() / st.name;
  fs::create_directories(dir / "checkpoint_000002");           // adopted after the last write
  fs::create_directories(dir / ".pending_checkpoint_000003");  // a step-mode staging leftover
  FakeExecutor ex2([](const exec::Launch& l) {
    // restored from checkpoint_000001 (iteration 2): reports iterations 3..5
    REQUIRE(l.env.count("TUNE_RESTORE_CHECKPOINT"));
    return std::make_unique<Reporter>(3, 0);
  });
  control::Controller c2(e, ex2, opts());
  REQUIRE(c2.run(saved) == kExitOk);
  REQUIRE(ex2.attaches.size() == 1);
  REQUIRE(ex2.launches.size() == 1);
  CHECK(ex2.launches[0].attempt == 2);
  const auto& t = c2.state().trials.at(0);
  CHECK(t.failures == 0);
  CHECK(iterations(results_of(e, t)) == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK_FALSE(fs::exists(dir / "checkpoint_000002"));
  CHECK_FALSE(fs::exists(dir / ".pending_checkpoint_000003"));
  CHECK(fs::is_directory(dir / "checkpoint_000001"));
}

TEST_CASE("resume stops a live step-mode attempt and restarts it without counting a failure",
          "[controller][resume][step]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"], mode: step}
param_space: {x: 1}
stop: {training_iteration: 3}
)");
  struct Stepper : FakeProcess {
    int iter = 0;
    void on_stdin(FakeContext& c, const std::string& line) override {
      auto cmd = json::parse(line);
      if (cmd["op"] == "step") c.print(json{{"loss", 1.0 / ++iter}}.dump());
      if (cmd["op"] == "stop") c.exit(0);
    }
  };
  FakeExecutor ex1([](const exec::Launch&) { return std::make_unique<Stepper>(); });
  control::Controller c1(e, ex1, opts());
  REQUIRE(c1.run() == kExitOk);
  auto saved = c1.state();
  saved.trials.at(0).status = trial::Status::kRunning;
  saved.trials.at(0).iteration = 1;
  FakeExecutor ex2([](const exec::Launch&) { return std::make_unique<Stepper>(); });
  ex2.on_attach = [](const exec::Launch&) { return exec::Attached::kRunning; };
  control::Controller c2(e, ex2, opts());
  REQUIRE(c2.run(saved) == kExitOk);
  REQUIRE(ex2.stops.size() >= 1);
  CHECK_FALSE(ex2.stops[0].second);  // SIGTERM, not kill-now
  REQUIRE(ex2.launches.size() == 1);
  CHECK(ex2.launches[0].attempt == 2);
  const auto& t = c2.state().trials.at(0);
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.failures == 0);
  CHECK(iterations(results_of(e, t)) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("resume reports its progress pulling the checkpoints that never reached the head",
          "[controller][resume]") {
  ScratchDir d;
  auto e = make_exp(d, R"(
name: exp
trial: {command: ["train"]}
param_space: {x: {grid_search: [1, 2, 3]}}
)");
  FakeExecutor ex1([](const exec::Launch&) {
    return std::make_unique<Reporter>(3, 0, [](int i, FakeContext& c) {
      json r = {{"loss", 1.0 / i}};
      if (i < 3) r["checkpoint"] = c.make_dir("ck" + std::to_string(i));
      return r;
    });
  });
  control::Controller c1(e, ex1, opts());
  REQUIRE(c1.run() == kExitOk);
  auto saved = c1.state();
  size_t want = 0;
  // Trials 0 and 2 ran on SSH host h1 and their checkpoints never reached the head; trial 1
  // ran here.
  for (size_t i : {size_t(0), size_t(2)}) {
    auto& t = saved.trials.at(i);
    t.host = "h1";
    for (const auto& c : t.checkpoints) fs::remove_all(e.dir() / t.name / c.dir_name());
    want += t.checkpoints.size();
  }
  REQUIRE(want >= 2);
  auto o = opts();
  control::ResourcePool::Host h1;
  h1.name = "h1";
  h1.remote = true;
  h1.available = false;
  o.hosts.push_back(h1);
  std::vector<std::pair<size_t, size_t>> calls;
  o.fetch_progress = [&](size_t done, size_t total) { calls.emplace_back(done, total); };
  FakeExecutor ex2([](const exec::Launch&) { return std::make_unique<Reporter>(1, 0); });
  control::Controller c2(e, ex2, o);
  REQUIRE(c2.run(saved) == kExitOk);
  REQUIRE(calls.size() == 2);  // after each trial's checkpoints
  CHECK(calls[0].first == saved.trials[0].checkpoints.size());
  CHECK(calls[1] == std::pair<size_t, size_t>{want, want});
}
