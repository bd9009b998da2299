// Regression tests for the driver hardening work: each case names the item it guards (crashes,
// lost or misattributed results found by attacking the driver), driven by the FakeExecutor.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>

#include "checkpoint/adopt.hpp"
#include "control/ledger.hpp"
#include "control/resources.hpp"
#include "controller_fixtures.hpp"
#include "state/state.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

using namespace tune;
using testing::FakeContext;
using testing::FakeExecutor;
using testing::FakeProcess;
using testing::make_exp;
using testing::opts;
using testing::Reporter;
using testing::results_of;
using testing::ScratchDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A 40-value grid x num_samples 5 = 200 trials.
std::string grid40() {
  std::string g = "param_space:\n  x: {grid_search: [";
  for (int i = 0; i < 40; ++i) g += (i ? ", " : "") + std::to_string(i);
  return g + "]}\n";
}

}  // namespace

TEST_CASE("item 3: 200 trials that each fail once all end TERMINATED after one retry",
          "[controller][hardening]") {
  ScratchDir d;
  auto e = make_exp(d, "name: flaky\ntrial: {command: [\"train\", \"{x}\"]}\n" + grid40() +
                           "num_samples: 5\nseed: 3\nmax_concurrent_trials: 4\n"
                           "failure_config: {max_failures: 1}\n");
  // The first attempt of every trial fails at once; the second reports 1 to 3 results (so
  // slots free up at different times, and retries and new trials start in the same round).
  FakeExecutor ex([](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.attempt == 1) return std::make_unique<Reporter>(0, 1);
    return std::make_unique<Reporter>(1 + std::stoi(l.trial_id) % 3, 0);
  });
  // Without back-off, as the driver was when this crashed it: retries are ready at once, so
  // a launch round holds restarts while new trials grow the trial list.
  auto o = opts(4);
  o.retry_backoff_s = 0;
  control::Controller c(e, ex, o);
  REQUIRE(c.run() == kExitOk);
  REQUIRE(c.state().trials.size() == 200);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.attempt == 2);
    CHECK(t.failures == 1);
    CHECK(t.iteration == 1 + std::stoi(t.id) % 3);
  }
  CHECK(ex.launches.size() == 400);
}

namespace {

const char* kFour = R"(
name: exp
trial: {command: ["train", "{lr}"]}
param_space:
  lr: {grid_search: [0.1, 0.2]}
num_samples: 2
seed: 1
metric: loss
mode: min
)";

// Reports forever, one result per tick; exits with `code_on_term` when asked to stop (what a
// PyTorch script with a SIGTERM handler that saves and exits 0 does).
struct Graceful : FakeProcess {
  int code_on_term, i = 0;
  explicit Graceful(int code) : code_on_term(code) {}
  void on_tick(FakeContext& c, double) override { c.print(json{{"loss", 1.0 / ++i}}.dump()); }
  void on_stop(FakeContext& c, bool now) override {
    if (now)
      c.killed(9);
    else
      c.exit(code_on_term);
  }
};

}  // namespace

TEST_CASE("item 9: a trial that exits 0 on Ctrl-C's SIGTERM is interrupted, not TERMINATED",
          "[controller][hardening]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kFour) + "max_concurrent_trials: 2\n");
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Graceful>(0); });
  ex.interrupt_at(1000 + 5);
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitInterrupted);
  int interrupted = 0;
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kPending);
    CHECK(t.failures == 0);
    if (t.attempt > 0) {
      CHECK(t.reason == trial::Reason::kInterrupted);
      ++interrupted;
    }
  }
  CHECK(interrupted == 2);
  // The saved state says so too, and a resume runs them again.
  auto s = state::load(e.dir());
  REQUIRE(s);
  CHECK(s->trials[0].status == trial::Status::kPending);
  CHECK(s->trials[0].reason == trial::Reason::kInterrupted);
  FakeExecutor ex2([](const exec::Launch&) { return std::make_unique<Reporter>(2, 0); });
  control::Controller c2(e, ex2, opts());
  REQUIRE(c2.run(std::move(*s)) == kExitOk);
  for (const auto& t : c2.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.reason == trial::Reason::kNone);
  }
}

TEST_CASE("item 9: a trial that met a stop criterion stays TERMINATED through a Ctrl-C",
          "[controller][hardening]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kFour) + "stop: {training_iteration: 3}\n");
  // Ignores SIGTERM for a while after it reached the criterion, so that Ctrl-C arrives while
  // the driver waits for it to exit; then it exits 0.
  struct Slow : FakeProcess {
    int i = 0, stop_ticks = -1;
    void on_tick(FakeContext& c, double) override {
      if (stop_ticks >= 0) {
        if (++stop_ticks == 4) c.exit(0);
        return;
      }
      c.print(json{{"loss", 1.0 / ++i}}.dump());
    }
    void on_stop(FakeContext& c, bool now) override {
      if (now) return c.killed(9);
      if (stop_ticks < 0) stop_ticks = 0;
    }
  };
  FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Slow>(); });
  ex.interrupt_at(1000 + 3.5);
  control::Controller c(e, ex, opts());
  (void)c.run();
  const auto& t = c.state().trials[0];
  CHECK(t.status == trial::Status::kTerminated);
  CHECK(t.reason == trial::Reason::kNone);
}

TEST_CASE("item 7: a trial its supervisor stopped as orphaned is re-queued, not failed",
          "[controller][hardening]") {
  ScratchDir d;
  auto e = make_exp(d, std::string(kFour) + "failure_config: {max_failures: 0}\n");
  // Attempt 1 is stopped by its supervisor (the driver was silent past orphan_timeout_s).
  struct Orphaned : FakeProcess {
    int i = 0;
    void on_tick(FakeContext& c, double) override {
      if (++i == 3) return c.exit(0, "", exec::ExitReason::kOrphaned);
      c.print(json{{"loss", 1.0 / i}}.dump());
    }
  };
  FakeExecutor ex([](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.attempt == 1) return std::make_unique<Orphaned>();
    return std::make_unique<Reporter>(2, 0);
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    CHECK(t.failures == 0);
    CHECK(t.attempt == 2);
  }
}

TEST_CASE("item 17: the last row of a finished trial says done: true", "[controller][hardening]") {
  ScratchDir d;
  SECTION("exit 0 without saying done") {
    auto e = make_exp(d, kFour);
    FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(3, 0); });
    control::Controller c(e, ex, opts());
    REQUIRE(c.run() == kExitOk);
    for (const auto& t : c.state().trials) {
      auto rows = results_of(e, t);
      REQUIRE(rows.size() == 3);
      CHECK(rows[0]["done"] == false);
      CHECK(rows[1]["done"] == false);
      CHECK(rows[2]["done"] == true);
      auto csv = util::read_file(e.dir() / t.name / "progress.csv", 1 << 20);
      REQUIRE(csv);
      CHECK(csv->find("true") != std::string::npos);
      CHECK(csv->rfind("true") > csv->rfind("false"));
    }
  }
  SECTION("a stop criterion") {
    auto e = make_exp(d, std::string(kFour) + "stop: {training_iteration: 2}\n");
    FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Graceful>(1); });
    control::Controller c(e, ex, opts());
    REQUIRE(c.run() == kExitOk);
    for (const auto& t : c.state().trials) {
      auto rows = results_of(e, t);
      REQUIRE(rows.size() == 2);
      CHECK(rows[1]["done"] == true);
    }
  }
  SECTION("a failed trial's last row is not done") {
    auto e = make_exp(d, std::string(kFour) + "failure_config: {max_failures: 0}\n");
    FakeExecutor ex([](const exec::Launch&) { return std::make_unique<Reporter>(2, 1); });
    control::Controller c(e, ex, opts());
    REQUIRE(c.run() == kExitTrialError);
    auto rows = results_of(e, c.state().trials[0]);
    REQUIRE(rows.size() == 2);
    CHECK(rows[1]["done"] == false);
  }
}

TEST_CASE("item 22: a crash loop backs off exponentially, and a result resets the back-off",
          "[controller][hardening]") {
  ScratchDir d;
  auto e = make_exp(
      d, std::string(kFour) + "failure_config: {max_failures: 12}\nmax_concurrent_trials: 1\n");
  std::vector<double> starts;
  FakeExecutor* exp_ex = nullptr;
  FakeExecutor ex([&](const exec::Launch& l) -> std::unique_ptr<FakeProcess> {
    if (l.trial_id != "00000") return std::make_unique<Reporter>(1, 0);
    starts.push_back(exp_ex->now());
    if (l.attempt == 13) return std::make_unique<Reporter>(1, 0);
    return std::make_unique<Reporter>(l.attempt == 7 ? 1 : 0, 1);  // attempt 7 reports once
  });
  exp_ex = &ex;
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  REQUIRE(starts.size() == 13);
  std::vector<double> gaps;
  for (size_t i = 1; i < 13; ++i) gaps.push_back(starts[i] - starts[i - 1]);
  // Attempts 2..7 wait 0.25, 0.5, 1, 2, 4, 8 s; attempt 7 reported once, so the back-off
  // starts again: attempts 8..13 wait 0.25, 0.5, 1, 2, 4, 8 s. (Plus up to a loop tick each.)
  std::vector<double> want = {0.25, 0.5, 1, 2, 4, 8, 0.25, 0.5, 1, 2, 4, 8};
  for (size_t i = 0; i < gaps.size(); ++i) {
    INFO("attempt " << i + 2);
    CHECK(gaps[i] >= want[i]);
    CHECK(gaps[i] <= want[i] + 1.5);
  }
  double total = starts[12] - starts[0];
  CHECK(total > 30);  // without back-off: about 12 ticks
}

TEST_CASE("item 11: where a reported checkpoint may come from", "[checkpoint][hardening]") {
  ScratchDir d;
  fs::path exp = d.path / "exp", trial = exp / "trial_00001", other = exp / "trial_00000";
  fs::path work = d.path / "work", tmp = d.path / "tmp", elsewhere = d.path / "elsewhere";
  for (const auto& p : {trial / "mine", other / "theirs", work / "w", tmp / "t", elsewhere / "e"})
    fs::create_directories(p);
  fs::create_directory_symlink(other, trial / "link");
  ::setenv("TMPDIR", tmp.c_str(), 1);
  checkpoint::Roots roots{trial, exp, work};
  using How = checkpoint::Source::How;
  auto how = [&](const std::string& p) { return checkpoint::locate(p, roots); };
  CHECK(how((trial / "mine").string())->how == How::kMove);
  CHECK(how("w")->how == How::kCopy);  // relative to the workdir
  CHECK(how((tmp / "t").string())->how == How::kCopy);
  CHECK_FALSE(how((other / "theirs").string()));  // another trial's
  CHECK_FALSE(how(other.string()));
  CHECK_FALSE(how((trial / "link").string()));             // a symlink
  CHECK_FALSE(how((trial / "link" / "theirs").string()));  // through one, out of the roots
  CHECK_FALSE(how((elsewhere / "e").string()));
  CHECK_FALSE(how(work.string()));  // a root itself
  CHECK_FALSE(how(tmp.string()));
  CHECK_FALSE(how(exp.string()));
  CHECK_FALSE(how(trial.string()));
  CHECK_FALSE(how(d.path.string()));  // contains the experiment
  CHECK_FALSE(how(std::string("a\0b", 3)));
  ::unsetenv("TMPDIR");
}

TEST_CASE("item 6: a checkpoint copied in on the file worker is registered before the trial ends",
          "[controller][checkpoint][hardening]") {
  ScratchDir d;
  fs::create_directories(d.path / "tmp");
  ::setenv("TMPDIR", (d.path / "tmp").c_str(), 1);
  auto e = make_exp(d, std::string(kFour) + "checkpoint_config: {num_to_keep: 1}\n");
  // Reports two checkpoints from the temp dir, then exits at once.
  FakeExecutor ex([&](const exec::Launch& l) {
    return std::make_unique<Reporter>(2, 0, [&, id = l.trial_id](int i, FakeContext&) {
      fs::path src = d.path / "tmp" / (id + "_" + std::to_string(i));
      fs::create_directories(src);
      std::ofstream(src / "i") << i;
      return json{{"loss", 1.0 / i}, {"checkpoint", src.string()}};
    });
  });
  control::Controller c(e, ex, opts());
  REQUIRE(c.run() == kExitOk);
  ::unsetenv("TMPDIR");
  for (const auto& t : c.state().trials) {
    CHECK(t.status == trial::Status::kTerminated);
    REQUIRE(t.checkpoints.size() == 1);
    CHECK(t.checkpoints[0].seq == 2);
    CHECK(t.checkpoints[0].iteration == 2);
    auto kept = util::read_file(e.dir() / t.name / "checkpoint_000002" / "i");
    REQUIRE(kept);
    CHECK(*kept == "2");
    CHECK_FALSE(fs::exists(e.dir() / t.name / "checkpoint_000001"));  // retention
    CHECK(fs::exists(d.path / "tmp" / (t.id + "_1") / "i"));          // the sources stay
  }
}

TEST_CASE("the CPU/GPU ledger skips lines with numbers that are not integers in range",
          "[hardening]") {
  char tmpl[] = "/tmp/tune-ledger-XXXXXX";
  std::filesystem::path dir = ::mkdtemp(tmpl);
  // This process is alive: a well-formed line of it counts, mangled ones never do (and never
  // cast 1e300 to a pid: undefined behaviour, caught under UBSan's float-cast-overflow).
  auto start = tune::util::process_start_ticks(::getpid());
  std::string me = std::to_string(::getpid()), ticks = std::to_string(start);
  {
    std::ofstream f(dir / "ledger.json");
    f << R"({"pid":1e300,"start":)" << ticks << R"(,"exp":"/x","cpus":1,"gpus":{}})"
      << "\n"
      << R"({"pid":)" << me << R"(,"start":1e300,"exp":"/y","cpus":1,"gpus":{}})"
      << "\n"
      << R"({"pid":-5,"start":)" << ticks << R"(,"exp":"/z","cpus":1,"gpus":{}})"
      << "\n"
      << R"({"pid":)" << me << R"(,"start":)" << ticks << R"(,"exp":"/ok","cpus":2,"gpus":{}})"
      << "\n";
  }
  auto live = tune::control::Ledger::read_live(dir);
  REQUIRE(live.size() == 1);
  CHECK(live[0].exp_dir == "/ok");
  std::filesystem::remove_all(dir);
}

TEST_CASE("the ledger is written once per trial: a release waits for the next acquire or sync",
          "[hardening]") {
  char tmpl[] = "/tmp/tune-ledger-XXXXXX";
  std::filesystem::path dir = ::mkdtemp(tmpl);
  auto ledger = tune::control::Ledger::open(dir, "/exp");
  REQUIRE(ledger);
  tune::control::ResourcePool::Host host;
  host.name = "local";
  host.cpus = host.cpu_free = 2;
  host.machine_cpus = 2;
  host.ledger = std::shared_ptr<tune::control::Ledger>(std::move(*ledger));
  tune::control::ResourcePool pool({host});
  tune::spec::Resources one;
  one.cpu = 1;
  auto held = [&] {
    auto live = tune::control::Ledger::read_live(dir);
    return live.empty() ? 0.0 : live[0].cpus;
  };
  auto a = pool.acquire(one);
  auto b = pool.acquire(one);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(held() == 2);
  pool.release(*a);
  CHECK(held() == 2);  // too much for a moment, never too little
  auto c = pool.acquire(one);
  REQUIRE(c);
  CHECK(held() == 2);  // the acquire wrote what is held now
  pool.release(*b);
  pool.release(*c);
  CHECK(held() == 2);
  pool.sync_ledger();
  CHECK(held() == 0);
  pool.sync_ledger();  // nothing released since: nothing to write
  CHECK(held() == 0);
  std::filesystem::remove_all(dir);
}
