// The Slurm executor against a scripted Slurm (FakeSlurm): one squeue per poll whatever the
// number of trials, max_jobs, exits read from the supervisor's record, requeues and time limits
// re-queued without a failure (twice without a checkpoint: one), stops, failing sbatch; and the
// pieces it is made of (squeue parsing, sbatch options, the scripts Slurm runs).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "exec/exit_record.hpp"
#include "exec/slurm_executor.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"

using namespace tune;
namespace fs = std::filesystem;

namespace {

// A Slurm whose jobs the test moves from state to state by hand.
struct FakeSlurm final : exec::SlurmClient {
  std::mutex m;
  int next_id = 100;
  std::vector<std::vector<std::string>> submitted;  // args of each sbatch
  std::map<std::string, std::string> states;        // job id -> squeue state
  std::vector<std::pair<std::vector<std::string>, bool>> cancels;
  int queue_calls = 0;
  std::string fail_submit;  // non-empty: sbatch fails with this message

  Result<std::string> submit(const std::vector<std::string>& args, const fs::path&) override {
    std::lock_guard lk(m);
    if (!fail_submit.empty()) return fail(fail_submit);
    submitted.push_back(args);
    std::string id = std::to_string(next_id++);
    states[id] = "PENDING";
    return id;
  }
  Result<void> test_only(const std::vector<std::string>&) override { return {}; }
  Result<std::vector<exec::JobInfo>> queue() override {
    std::lock_guard lk(m);
    ++queue_calls;
    std::string text;
    for (auto& [id, st] : states) text += id + "|" + st + "|None|tune-x\n";
    return exec::parse_squeue(text);
  }
  Result<void> cancel(const std::vector<std::string>& ids, bool term) override {
    std::lock_guard lk(m);
    cancels.emplace_back(ids, term);
    return {};
  }
  void set(const std::string& id, const std::string& st) {
    std::lock_guard lk(m);
    states[id] = st;
  }
  size_t submits() {
    std::lock_guard lk(m);
    return submitted.size();
  }
};

struct Fixture {
  fs::path dir = fs::temp_directory_path() / ("tune-slurm-" + std::to_string(::getpid()));
  std::string key = std::string(32, 'c');
  FakeSlurm* fake = nullptr;
  std::unique_ptr<exec::SlurmExecutor> ex;
  std::vector<exec::Event> events;

  explicit Fixture(int max_jobs = 100) {
    fs::remove_all(dir);
    fs::create_directories(dir / ".tune");
    exec::SlurmOptions o;
    o.max_jobs = max_jobs;
    o.exp_name = "e";
    o.exp_dir = dir;
    o.supervisor = "/bin/true";
    o.record_key = key;
    o.poll_s = 0.05;
    o.scan_s = 0.01;
    o.record_wait_s = 0.1;
    o.job.signal_grace_s = 30;
    auto f = std::make_unique<FakeSlurm>();
    fake = f.get();
    ex = std::make_unique<exec::SlurmExecutor>(o, std::move(f));
  }
  ~Fixture() {
    ex.reset();
    fs::remove_all(dir);
  }
  exec::Launch launch(const std::string& id, int attempt = 1) {
    exec::Launch l;
    l.trial_id = id;
    l.attempt = attempt;
    l.trial_dir = dir / ("trial_" + id);
    l.cwd = dir;
    l.host = "slurm";
    l.argv = {"true"};
    return l;
  }
  // Runs the executor's loop until `pred` holds (or 5 s).
  template <class P>
  bool pump(P pred) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      for (auto& e : ex->wait(0.01)) events.push_back(std::move(e));
      if (pred()) return true;
    }
    return false;
  }
  // Runs the loop for `s` seconds.
  void settle(double s) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
    while (std::chrono::steady_clock::now() < until)
      for (auto& e : ex->wait(0.01)) events.push_back(std::move(e));
  }
  std::optional<exec::ExitInfo> exit_of(const std::string& id) {
    for (auto& e : events)
      if (auto* x = std::get_if<exec::ExitEvent>(&e); x && x->trial_id == id) return x->info;
    return std::nullopt;
  }
  std::string output_of(const std::string& id) {
    std::string out;
    for (auto& e : events)
      if (auto* o = std::get_if<exec::OutputEvent>(&e); o && o->trial_id == id) out += o->data;
    return out;
  }
  // What the supervisor of `id`'s attempt writes when it ends.
  void record(const std::string& id, int attempt, const std::string& reason, int code = 0) {
    std::string name = "trial_" + id;
    std::string text = R"({"attempt":)" + std::to_string(attempt) + R"(,"nonce":")" +
                       exec::attempt_nonce(key, name, attempt) + R"(","exit_code":)" +
                       std::to_string(code) + R"(,"reason":")" + reason + R"(","ended":1.0})";
    REQUIRE(util::write_file_atomic(dir / exec::record_path(name), text, false));
  }
  std::string job_of(const std::string& id) {
    auto f = exec::read_job_file(dir, "trial_" + id);
    return f ? f->job_id : "";
  }
};

}  // namespace

TEST_CASE("squeue lines are parsed and junk is skipped", "[slurm]") {
  auto jobs = exec::parse_squeue(
      "12|RUNNING|None|tune-e-trial_1\n13|PENDING|BeginTime|x|y\nnot a job\n|RUNNING|a|b\n"
      "14|TIMEOUT|None|n");
  REQUIRE(jobs.size() == 3);
  CHECK(jobs[0].id == "12");
  CHECK(jobs[0].state == exec::JobState::kRunning);
  CHECK(jobs[1].reason == "BeginTime");
  CHECK(jobs[1].name == "x|y");
  CHECK(jobs[2].state == exec::JobState::kTimeout);
  CHECK(exec::job_ended(exec::JobState::kTimeout));
  CHECK_FALSE(exec::job_ended(exec::JobState::kPending));
  CHECK(exec::parse_job_state("OUT_OF_MEMORY") == exec::JobState::kFailed);
  CHECK(exec::parse_job_state("???") == exec::JobState::kUnknown);
}

TEST_CASE("sbatch options: tune's first, the signal before the limit, the user's last", "[slurm]") {
  exec::SlurmJobOptions o;
  o.partition = "gpu";
  o.time_limit = "04:00:00";
  o.gpus = 1;
  o.cpus = 4;
  o.signal_grace_s = 120;
  o.sbatch_args = {"--qos=normal"};
  auto a = exec::sbatch_options(o, "tune-e-t", "/shared/e/t");
  auto has = [&](const std::string& s) { return std::find(a.begin(), a.end(), s) != a.end(); };
  CHECK(has("--job-name=tune-e-t"));
  CHECK(has("--signal=B:TERM@120"));
  CHECK(has("--partition=gpu"));
  CHECK(has("--time=04:00:00"));
  CHECK(has("--gpus=1"));
  CHECK(has("--cpus-per-task=4"));
  CHECK(has("--chdir=/shared/e/t"));
  CHECK(has("--requeue"));
  CHECK_FALSE(has("--account="));
  CHECK(a.back() == "--qos=normal");
}

TEST_CASE("a launch file hands the supervisor every word and value as it was", "[slurm]") {
  fs::path dir = fs::temp_directory_path() / ("tune-slurm-ls-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // A stand-in supervisor that prints its argv, one word a line, then its stdin and $V.
  fs::path fake = dir / "sup";
  REQUIRE(util::write_file_atomic(
      fake, "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\ncat\necho \"V=[$V]\"\n", false));
  fs::permissions(fake, fs::perms::owner_all);
  exec::Launch l;
  l.trial_id = "00001";
  l.attempt = 3;
  l.trial_dir = dir / "t 1";
  l.cwd = dir;
  l.argv = {"prog", "it's $HOME", "a\"b`c`"};
  l.env = {{"V", "x'y $z"}, {"BAD-NAME", "dropped"}, {"CUDA_VISIBLE_DEVICES", "7"}};
  exec::SupervisorCall c;
  c.supervisor = fake;
  c.lease = dir / "lease";
  c.record = dir / "rec.json";
  c.nonce = "00ff";
  REQUIRE(util::write_file_atomic(dir / "launch", exec::launch_script(l, c), false));
  std::string cmd = "sh '" + (dir / "launch").string() + "' > '" + (dir / "out").string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto out = util::read_file(dir / "out");
  REQUIRE(out);
  CHECK(out->find("[" + (dir / "t 1").string() + "]\n[3]\n") != std::string::npos);
  CHECK(out->find("[--]\n[prog]\n[it's $HOME]\n[a\"b`c`]\n00ff\n") != std::string::npos);
  CHECK(out->find("V=[x'y $z]") != std::string::npos);
  CHECK(exec::launch_script(l, c).find("BAD-NAME") == std::string::npos);
  // Slurm's own CUDA_VISIBLE_DEVICES (the job's GPUs) is kept, not the driver's numbering.
  CHECK(exec::launch_script(l, c).find("CUDA_VISIBLE_DEVICES") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("one squeue per poll whatever the number of trials, within max_jobs", "[slurm]") {
  Fixture f(3);
  for (int i = 0; i < 8; ++i) REQUIRE(f.ex->start(f.launch("0000" + std::to_string(i))));
  REQUIRE(f.pump([&] { return f.fake->submits() == 3; }));
  auto t0 = std::chrono::steady_clock::now();
  f.settle(1.0);  // 1 s of polling at 0.05 s
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(f.fake->submits() == 3);  // max_jobs: the others wait for room
  int calls = f.fake->queue_calls;
  CHECK(calls > 0);
  CHECK(calls <= took / 0.05 + 5);  // one per poll, not one per trial (8 trials)
  CHECK(static_cast<uint64_t>(calls) == f.ex->queue_calls());
  // One ends: a fourth is submitted.
  std::string job = f.job_of("00000");
  REQUIRE(!job.empty());
  f.record("00000", 1, "exited");
  REQUIRE(f.pump([&] { return f.exit_of("00000").has_value(); }));
  f.fake->set(job, "COMPLETED");
  REQUIRE(f.pump([&] { return f.fake->submits() == 4; }));
}

TEST_CASE("output is read from the shared filesystem and the exit comes after it", "[slurm]") {
  Fixture f;
  REQUIRE(f.ex->start(f.launch("00001")));
  REQUIRE(f.pump([&] { return !f.job_of("00001").empty(); }));
  f.fake->set(f.job_of("00001"), "RUNNING");
  { std::ofstream(f.dir / "trial_00001" / "stdout.log") << "{\"a\":1}\n{\"a\":2}\n"; }
  f.record("00001", 1, "exited", 0);
  REQUIRE(f.pump([&] { return f.exit_of("00001").has_value(); }));
  CHECK(f.output_of("00001") == "{\"a\":1}\n{\"a\":2}\n");
  CHECK(f.exit_of("00001")->reason == "exited");
  CHECK(f.exit_of("00001")->exit_code == 0);
  // A record with another attempt's nonce is not believed.
  REQUIRE(f.ex->start(f.launch("00002")));
  REQUIRE(f.pump([&] { return !f.job_of("00002").empty(); }));
  f.fake->set(f.job_of("00002"), "RUNNING");
  f.record("00002", 2, "exited");  // attempt 2's record for attempt 1
  f.settle(1.0);
  CHECK_FALSE(f.exit_of("00002").has_value());
}

TEST_CASE("Slurm's SIGTERM re-queues the trial; twice without a checkpoint counts a failure",
          "[slurm]") {
  Fixture f;
  auto run_once = [&](int attempt) {
    f.events.clear();
    REQUIRE(f.ex->start(f.launch("00003", attempt)));
    REQUIRE(f.pump([&] {
      auto j = exec::read_job_file(f.dir, "trial_00003");
      return j && j->attempt == attempt;
    }));
    f.fake->set(f.job_of("00003"), "RUNNING");
    f.record("00003", attempt, "driver_stop");  // the time limit's warning reached it
    REQUIRE(f.pump([&] { return f.exit_of("00003").has_value(); }));
    f.fake->set(f.job_of("00003"), "COMPLETED");
    return *f.exit_of("00003");
  };
  CHECK(run_once(1).reason == "host_lost");  // re-queued, no failure
  f.ex->checkpoint_registered("00003");
  CHECK(run_once(2).reason == "host_lost");  // a checkpoint in between: again no failure
  auto third = run_once(3);                  // no checkpoint since the last one
  CHECK(third.reason == "exited");
  CHECK_FALSE(third.exit_code.has_value());
  CHECK(third.error.find("second time without a new checkpoint") != std::string::npos);
}

TEST_CASE("a job Slurm requeues runs the trial's next attempt", "[slurm]") {
  Fixture f;
  REQUIRE(f.ex->start(f.launch("00004")));
  REQUIRE(f.pump([&] { return !f.job_of("00004").empty(); }));
  std::string job = f.job_of("00004");
  f.fake->set(job, "RUNNING");
  f.settle(1.0);                // seen running
  f.fake->set(job, "PENDING");  // requeued; its supervisor was killed before it recorded
  REQUIRE(f.pump([&] { return f.exit_of("00004").has_value(); }));
  CHECK(f.exit_of("00004")->reason == "host_lost");
  REQUIRE(f.ex->start(f.launch("00004", 2)));
  REQUIRE(f.pump([&] {
    auto j = exec::read_job_file(f.dir, "trial_00004");
    return j && j->attempt == 2;
  }));
  CHECK(f.job_of("00004") == job);  // the same job
  CHECK(f.fake->submits() == 1);    // no new sbatch
  fs::path next = exec::next_launch_file(f.dir / exec::kSlurmDir, "trial_00004", job);
  auto text = util::read_file(next);
  REQUIRE(text);
  CHECK(text->find(exec::attempt_nonce(f.key, "trial_00004", 2)) != std::string::npos);
}

TEST_CASE("stop: SIGTERM to the batch shell, scancel after the grace; a pending job at once",
          "[slurm]") {
  Fixture f;
  REQUIRE(f.ex->start(f.launch("00005")));
  REQUIRE(f.ex->start(f.launch("00006")));
  REQUIRE(f.pump([&] { return !f.job_of("00005").empty() && !f.job_of("00006").empty(); }));
  std::string running = f.job_of("00005"), pending = f.job_of("00006");
  f.fake->set(running, "RUNNING");
  f.settle(1.0);
  f.ex->stop("00005", false);
  f.ex->stop("00006", false);
  REQUIRE(f.pump([&] { return f.exit_of("00006").has_value(); }));
  CHECK(f.exit_of("00006")->reason == "driver_stop");  // it never ran
  CHECK_FALSE(f.exit_of("00005").has_value());         // until its supervisor records
  REQUIRE(f.pump([&] {
    std::lock_guard lk(f.fake->m);
    return f.fake->cancels.size() >= 2;
  }));
  {
    std::lock_guard lk(f.fake->m);
    bool term = false, kill = false;
    for (auto& [ids, t] : f.fake->cancels) {
      if (ids == std::vector<std::string>{running}) (t ? term : kill) = true;
      if (ids == std::vector<std::string>{pending}) CHECK_FALSE(t);
    }
    CHECK(term);
    CHECK_FALSE(kill);
  }
  f.record("00005", 1, "driver_stop");
  REQUIRE(f.pump([&] { return f.exit_of("00005").has_value(); }));
  CHECK(f.exit_of("00005")->reason == "driver_stop");  // ours: passed on as it is
}

TEST_CASE("a failing sbatch is retried, then the attempt fails with Slurm's message", "[slurm]") {
  Fixture f;
  f.fake->fail_submit = "sbatch: error: Batch job submission failed: Invalid account";
  REQUIRE(f.ex->start(f.launch("00007")));
  // Retried with back-off (5 s, 10 s, ...): the first failure keeps it waiting, nothing ends.
  f.settle(1.0);
  CHECK_FALSE(f.exit_of("00007").has_value());
  CHECK(f.fake->submits() == 0);
  f.fake->fail_submit.clear();
}

TEST_CASE("a job gone from squeue without a record ends its attempt", "[slurm]") {
  Fixture f;
  REQUIRE(f.ex->start(f.launch("00008")));
  REQUIRE(f.pump([&] { return !f.job_of("00008").empty(); }));
  std::string job = f.job_of("00008");
  f.fake->set(job, "NODE_FAIL");
  REQUIRE(f.pump([&] { return f.exit_of("00008").has_value(); }));
  CHECK(f.exit_of("00008")->reason == "host_lost");  // Slurm's doing: no failure
  REQUIRE(f.ex->start(f.launch("00009")));
  REQUIRE(f.pump([&] { return !f.job_of("00009").empty(); }));
  {
    std::lock_guard lk(f.fake->m);
    f.fake->states.erase(f.job_of("00009"));
  }
  REQUIRE(f.pump([&] { return f.exit_of("00009").has_value(); }));
  CHECK(f.exit_of("00009")->reason == "supervisor_died");  // never wrote anything: a failure
}

TEST_CASE("a resume finds this experiment's jobs by their job files and ends the strays",
          "[slurm]") {
  Fixture f;
  fs::create_directories(f.dir / exec::kSlurmDir);
  auto job_file = [&](const std::string& trial, const std::string& text) {
    REQUIRE(util::write_file_atomic(f.dir / exec::kSlurmDir / (trial + ".job"), text, false));
  };
  job_file("trial_a", "7 2\n");
  job_file("trial_b", "8 1\n");
  job_file("trial_c", "not a job\n");
  f.fake->set("7", "RUNNING");
  f.fake->set("8", "COMPLETED");  // ended: not live
  f.fake->set("9", "RUNNING");    // no job file names it: not this experiment's, never touched
  auto live = f.ex->live_attempts();
  REQUIRE(live.size() == 1);
  CHECK(live[0].trial_name == "trial_a");
  CHECK(live[0].attempt == 2);
  CHECK(live[0].host == "slurm");
  std::thread slurm_ends_it([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    f.fake->set("7", "CANCELLED");
  });
  f.ex->end_attempts(live, 5);
  slurm_ends_it.join();
  std::lock_guard lk(f.fake->m);
  REQUIRE(!f.fake->cancels.empty());
  CHECK(f.fake->cancels[0].first == std::vector<std::string>{"7"});
  CHECK(f.fake->cancels[0].second);  // SIGTERM to the batch shell first
  for (auto& [ids, term] : f.fake->cancels)
    CHECK(std::find(ids.begin(), ids.end(), "9") == ids.end());
}
