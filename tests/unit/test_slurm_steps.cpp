// The Slurm executor's job steps (use_allocation), against the scripted Slurm: steps with their
// srun options and claims, signals to their sruns, a resume re-attaching to a step whose srun
// still runs, giving up one that never started and ending by its id one no srun of its machine
// watches (the crash window between srun's start and the .step file; another machine).
#include "slurm_fake.hpp"

using namespace tune;
namespace fs = std::filesystem;

TEST_CASE("use_allocation: trials are job steps of the driver's allocation, never jobs",
          "[slurm]") {
  Fixture f(2, true);
  REQUIRE(f.ex->check());  // no sbatch --test-only
  for (const char* id : {"00030", "00031", "00032"}) REQUIRE(f.ex->start(f.launch(id)));
  REQUIRE(f.pump([&] {
    std::lock_guard lk(f.fake->m);
    return f.fake->steps.size() == 2;
  }));
  f.settle(0.3);
  {
    std::lock_guard lk(f.fake->m);
    CHECK(f.fake->steps.size() == 2);  // max_jobs steps at once
    CHECK(f.fake->submitted.empty());  // no sbatch
    CHECK(f.fake->queue_calls == 0);   // no squeue of jobs
    auto& a = f.fake->steps[0];
    // Each attempt's step has a name of its own, so squeue --steps tells it from the others.
    std::string named = "--job-name=" + exec::step_name(f.key, "e", "trial_00030", 1);
    CHECK(named.starts_with("--job-name=tune-e-trial_00030.a1."));
    for (const std::string& want : {std::string("--exclusive"), std::string("--ntasks=1"),
                                    std::string("--cpus-per-task=2"), named})
      CHECK(std::find(a.begin(), a.end(), want) != a.end());
    // It claims its launch file as it starts.
    auto& c = f.fake->step_commands[0];
    REQUIRE(c.size() == 7);
    CHECK(c[4] == (f.dir / exec::kSlurmDir / "trial_00030.a1.launch").string());
    CHECK(c[5] == (f.dir / exec::kSlurmDir / "trial_00030.a1.run").string());
  }
  // Its supervisor's record (the attempt's own nonce: a step is never requeued) ends it.
  f.record("00030", 1, "exited", 0, exec::attempt_nonce(f.key, "trial_00030", 1));
  REQUIRE(f.pump([&] { return f.exit_of("00030").has_value(); }));
  CHECK(f.exit_of("00030")->reason == exec::ExitReason::kExited);
  REQUIRE(f.pump([&] {
    std::lock_guard lk(f.fake->m);
    return f.fake->steps.size() == 3;  // room for the third
  }));
  // Stopping: SIGTERM to the step's srun (passed on to the supervisor), SIGUSR1 to kill now;
  // never scancel (the allocation is the driver's own).
  REQUIRE(f.pump([&] { return f.ex->take_job_ids().empty(); }));
  f.ex->stop("00031", false);
  REQUIRE(f.pump([&] { return f.fake->signalled("9001", SIGTERM); }));
  CHECK_FALSE(f.fake->signalled("9001", SIGUSR1));
  f.ex->stop("00031", true);
  REQUIRE(f.pump([&] { return f.fake->signalled("9001", SIGUSR1); }));
  {
    std::lock_guard lk(f.fake->m);
    f.fake->steps_done.insert("9001");  // its srun ends; no record
  }
  REQUIRE(f.pump([&] { return f.exit_of("00031").has_value(); }));
  CHECK(f.exit_of("00031")->reason == exec::ExitReason::kDriverStop);
  // A step whose srun ends without a record (not stopped): the supervisor died.
  {
    std::lock_guard lk(f.fake->m);
    f.fake->steps_done.insert("9002");
  }
  REQUIRE(f.pump([&] { return f.exit_of("00032").has_value(); }));
  CHECK(f.exit_of("00032")->reason == exec::ExitReason::kSupervisorDied);
  CHECK(f.fake->cancels.empty());
  // A signal for an srun already reaped is never sent (its pid may be someone else's now).
  f.ex->stop("00032", true);
  f.settle(0.2);
  CHECK_FALSE(f.fake->signalled("9002", SIGUSR1));
  // A resume finds the steps whose srun still runs (they outlive a killed driver): 00030's
  // (its srun has not ended here), not those whose srun ended.
  auto live = f.ex->live_attempts();
  REQUIRE(live.size() == 1);
  CHECK(live[0].trial_name == "trial_00030");
  CHECK(live[0].supervisor == 9000);
}

TEST_CASE("use_allocation: a resume re-attaches to a step whose srun still runs", "[slurm]") {
  Fixture f(4, true);
  fs::path sdir = f.dir / exec::kSlurmDir;
  fs::create_directories(sdir);
  fs::create_directories(f.dir / ".tune" / "exit");
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  auto step_file = [&](const std::string& trial, const std::string& text) {
    REQUIRE(util::write_file_atomic(sdir / (trial + ".step"), text, false));
  };
  // An earlier driver's step of attempt 2, on this machine, its srun still running; the step
  // wrote its id.
  step_file("trial_00040", "9100 2 " + std::string(host) + "\n");
  REQUIRE(util::write_file_atomic(sdir / "trial_00040.a2.stepid", "77.4\n", false));
  auto found = f.ex->attach(f.launch("00040", 2));
  REQUIRE(found);
  CHECK(*found == exec::Attached::kRunning);
  auto ids = f.ex->take_job_ids();
  REQUIRE(ids.size() == 1);
  CHECK(ids[0] == std::pair<std::string, std::string>{"00040", "77.4"});  // for tune status
  // Another attempt's step, one on another machine, one whose srun ended: not re-attached.
  step_file("trial_00041", "9101 1 " + std::string(host) + "\n");
  step_file("trial_00042", "9102 2 some-other-host\n");
  step_file("trial_00043", "9103 2 " + std::string(host) + "\n");
  step_file("trial_00044", "junk");
  {
    std::lock_guard lk(f.fake->m);
    f.fake->steps_done.insert("9103");
  }
  for (const char* id : {"00041", "00042", "00043", "00044"}) {
    auto gone = f.ex->attach(f.launch(id, 2));
    REQUIRE(gone);
    CHECK(*gone == exec::Attached::kGone);
  }
  // The re-attached step is watched and stopped through its srun as one this driver started.
  f.ex->stop("00040", false);
  REQUIRE(f.pump([&] { return f.fake->signalled("9100", SIGTERM); }));
  f.record("00040", 2, "driver_stop", 0, exec::attempt_nonce(f.key, "trial_00040", 2));
  REQUIRE(f.pump([&] { return f.exit_of("00040").has_value(); }));
  CHECK(f.exit_of("00040")->reason == exec::ExitReason::kDriverStop);
  CHECK(f.exit_of("00040")->attempt == 2);
  CHECK(f.fake->submits() == 0);
  CHECK(f.fake->steps.empty());  // nothing started again
}

TEST_CASE("use_allocation: a step claims its launch file; one given up never starts", "[slurm]") {
  fs::path dir = fs::temp_directory_path() / ("tune-slurm-claim-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto file = [&](int a, const char* ext) { return dir / ("t x.a" + std::to_string(a) + ext); };
  auto run = [&](int a) {
    auto cmd = exec::step_command(file(a, ".launch"), file(a, ".run"), file(a, ".stepid"));
    std::string line = "SLURM_JOB_ID=55 SLURM_STEP_ID=" + std::to_string(a) + " ";
    for (auto& w : cmd) line += util::shell_quote(w) + " ";
    line += "> '" + (dir / "out").string() + "' 2>/dev/null";
    REQUIRE(std::system(line.c_str()) == 0);
    auto out = util::read_file(dir / "out");
    return out ? *out : "";
  };
  for (int a : {1, 2}) REQUIRE(util::write_file_atomic(file(a, ".launch"), "echo ran\n", false));
  // Attempt 1's step starts: it writes its id, claims the file and runs it.
  CHECK(run(1) == "ran\n");
  CHECK(util::read_file(file(1, ".stepid")).value_or("") == "55.1\n");
  CHECK(fs::exists(file(1, ".run")));
  CHECK_FALSE(fs::exists(file(1, ".launch")));
  // A resume gives attempt 1 up too late (claimed), attempt 2 in time, attempt 3 never started.
  CHECK(exec::void_step_launch(file(1, ".launch"), file(1, ".run"), file(1, ".void")) ==
        exec::StepClaim::kClaimed);
  CHECK(exec::void_step_launch(file(2, ".launch"), file(2, ".run"), file(2, ".void")) ==
        exec::StepClaim::kVoided);
  CHECK(exec::void_step_launch(file(3, ".launch"), file(3, ".run"), file(3, ".void")) ==
        exec::StepClaim::kNone);
  // The srun of attempt 2, still waiting for CPUs then, starts its step later: nothing runs.
  CHECK(run(2).empty());
  CHECK_FALSE(fs::exists(file(2, ".run")));
  fs::remove_all(dir);
}

TEST_CASE("use_allocation: a resume ends the steps no srun of its machine watches", "[slurm]") {
  Fixture f(4, true);
  fs::path sdir = f.dir / exec::kSlurmDir;
  fs::create_directories(sdir);
  fs::create_directories(f.dir / ".tune" / "exit");
  auto put = [&](const std::string& file, const std::string& text) {
    REQUIRE(util::write_file_atomic(sdir / file, text, false));
  };
  auto listed = [&](const std::string& id, const std::string& name) {
    std::lock_guard lk(f.fake->m);
    f.fake->listed_steps.push_back({id, name});
  };
  std::string s60 = exec::step_name(f.key, "e", "trial_00060", 1);
  // 00060: the driver died between starting the srun and writing the .step file, and the step
  // had started (claimed its launch file, wrote its id): Slurm lists it under its name.
  put("trial_00060.a1.run", "x");
  put("trial_00060.a1.stepid", "77.1\n");
  listed("77.1", s60);
  // 00061: the same, its srun still waiting for CPUs: the launch file is there, unclaimed.
  put("trial_00061.a1.launch", "x");
  // 00062: attempt 2 ran on another machine (its srun is there), claimed and listed.
  put("trial_00062.step", "9300:1 2 some-other-host\n");
  put("trial_00062.a2.run", "x");
  put("trial_00062.a2.stepid", "77.2\n");
  listed("77.2", exec::step_name(f.key, "e", "trial_00062", 2));
  // 00063: its .stepid names a step Slurm lists under another name (not this attempt's): never
  // touched; 00064: an earlier attempt's step that ended (not listed).
  put("trial_00063.a1.run", "x");
  put("trial_00063.a1.stepid", "77.3\n");
  listed("77.3", "someone-elses-step");
  put("trial_00064.a1.run", "x");
  put("trial_00064.a1.stepid", "77.4\n");
  for (auto [id, attempt] : {std::pair{"00060", 1}, {"00061", 1}, {"00062", 2}, {"00063", 1}}) {
    auto found = f.ex->attach(f.launch(id, attempt));
    REQUIRE(found);
    CHECK(*found == exec::Attached::kGone);
  }
  // 00061's launch file is given up: an srun that starts its step later runs nothing.
  CHECK(fs::exists(sdir / "trial_00061.a1.void"));
  CHECK_FALSE(fs::exists(sdir / "trial_00061.a1.launch"));
  // Before anything starts, the steps that did start are found by their ids, and ended.
  auto live = f.ex->live_attempts();
  std::set<std::string> steps;
  for (auto& a : live) steps.insert(a.trial_name + "=" + a.job_step);
  CHECK(steps == std::set<std::string>{"trial_00060=77.1", "trial_00062=77.2"});
  f.ex->end_attempts(live, 1);
  std::lock_guard lk(f.fake->m);
  REQUIRE(!f.fake->step_cancels.empty());
  CHECK(f.fake->step_cancels[0].second);  // SIGTERM first: the trial may checkpoint
  std::set<std::string> cancelled(f.fake->step_cancels[0].first.begin(),
                                  f.fake->step_cancels[0].first.end());
  CHECK(cancelled == std::set<std::string>{"77.1", "77.2"});
  CHECK(f.fake->step_cancels.size() == 1);  // gone after SIGTERM: no kill needed
  REQUIRE(f.fake->listed_steps.size() == 1);
  CHECK(f.fake->listed_steps[0].id == "77.3");  // the other step runs on
  CHECK(f.fake->cancels.empty());               // never scancel of a job
}
