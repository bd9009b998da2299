// The Slurm executor against a scripted Slurm (FakeSlurm): one squeue per poll whatever the
// number of trials, max_jobs, exits read from the supervisor's record, requeues and time limits
// re-queued without a failure (twice without a checkpoint: one), stops, failing sbatch; and the
// pieces it is made of (squeue parsing, sbatch options, the scripts Slurm runs).
#include "slurm_fake.hpp"

using namespace tune;
namespace fs = std::filesystem;

TEST_CASE("squeue lines are parsed and junk is skipped", "[slurm]") {
  auto jobs = exec::parse_squeue(
      "12|RUNNING|None|tune:1:ab|tune-e-trial_1\n13|PENDING|BeginTime|(null)|x|y\nnot a job\n"
      "|RUNNING|a|b|c\n14|TIMEOUT|None|k|n\n15|RUNNING|None|old-format");
  REQUIRE(jobs.size() == 3);
  CHECK(jobs[0].id == "12");
  CHECK(jobs[0].state == exec::JobState::kRunning);
  CHECK(jobs[0].comment == "tune:1:ab");
  CHECK(jobs[0].name == "tune-e-trial_1");
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
  c.secret = "00ff";
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
  CHECK(f.exit_of("00001")->reason == exec::ExitReason::kExited);
  CHECK(f.exit_of("00001")->exit_code == 0);
  // A record with another attempt's nonce is not believed.
  REQUIRE(f.ex->start(f.launch("00002")));
  REQUIRE(f.pump([&] { return !f.job_of("00002").empty(); }));
  f.fake->set(f.job_of("00002"), "RUNNING");
  f.record("00002", 2, "exited");  // attempt 2's record for attempt 1
  f.settle(1.0);
  CHECK_FALSE(f.exit_of("00002").has_value());
}

TEST_CASE("the files holding a job's secret are the user's alone", "[slurm]") {
  Fixture f;
  REQUIRE(f.ex->start(f.launch("00003")));
  REQUIRE(f.pump([&] { return !f.job_of("00003").empty(); }));
  fs::path sdir = f.dir / exec::kSlurmDir;
  auto mode = [](const fs::path& p) { return fs::status(p).permissions() & fs::perms::all; };
  CHECK(mode(sdir) == fs::perms::owner_all);
  for (const char* file : {"trial_00003.a1.launch", "trial_00003.sbatch", "trial_00003.job"}) {
    INFO(file);
    CHECK(mode(sdir / file) == (fs::perms::owner_read | fs::perms::owner_write));
  }
  auto text = util::read_file(sdir / "trial_00003.a1.launch");
  REQUIRE(text);
  CHECK(text->find(exec::slurm_job_secret(f.key, "trial_00003", 1)) != std::string::npos);
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
  CHECK(run_once(1).reason == exec::ExitReason::kPreempted);  // re-queued, no failure
  f.ex->checkpoint_registered("00003");
  CHECK(run_once(2).reason ==
        exec::ExitReason::kPreempted);  // a checkpoint in between: again no failure
  auto third = run_once(3);             // no checkpoint since the last one
  CHECK(third.reason == exec::ExitReason::kExited);
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
  CHECK(f.exit_of("00004")->reason == exec::ExitReason::kPreempted);
  REQUIRE(f.ex->start(f.launch("00004", 2)));
  REQUIRE(f.pump([&] {
    auto j = exec::read_job_file(f.dir, "trial_00004");
    return j && j->attempt == 2;
  }));
  CHECK(f.job_of("00004") == job);  // the same job
  CHECK(f.fake->submits() == 1);    // no new sbatch
  auto jf = exec::read_job_file(f.dir, "trial_00004");
  REQUIRE(jf);
  CHECK(jf->first_attempt == 1);  // attempt 2 is the job's run 1 (SLURM_RESTART_COUNT=1)
  // Prepared for run 1 of the job: the job's secret, not a nonce (the supervisor derives it).
  fs::path next = exec::next_launch_file(f.dir / exec::kSlurmDir, "trial_00004", job, 1);
  auto text = util::read_file(next);
  REQUIRE(text);
  CHECK(text->find(exec::slurm_job_secret(f.key, "trial_00004", 1)) != std::string::npos);
  CHECK(text->find(exec::attempt_nonce(f.key, "trial_00004", 2)) == std::string::npos);
  CHECK(text->find("/trial_00004 2 ") != std::string::npos);  // the supervisor's ATTEMPT

  // The rerun: a stale record of the job's previous run is never taken for this one, nor one
  // with the attempt's old per-attempt nonce, nor one with another job's nonce for run 1.
  f.fake->set(job, "RUNNING");
  std::string run0 = exec::slurm_attempt_nonce(f.key, "trial_00004", 1, job, 1);
  std::string run1 = exec::slurm_attempt_nonce(f.key, "trial_00004", 1, job, 2);
  CHECK(run0 != run1);
  CHECK(run1 != exec::slurm_attempt_nonce(f.key, "trial_00004", 2, job, 2));
  f.events.clear();
  for (const std::string& stale : {run0, exec::attempt_nonce(f.key, "trial_00004", 2),
                                   exec::slurm_attempt_nonce(f.key, "trial_00004", 1, "999", 2)}) {
    f.record("00004", 2, "exited", 0, stale);
    f.settle(0.3);
    CHECK_FALSE(f.exit_of("00004").has_value());
  }
  f.record("00004", 2, "exited", 0, run1);
  REQUIRE(f.pump([&] { return f.exit_of("00004").has_value(); }));
  CHECK(f.exit_of("00004")->reason == exec::ExitReason::kExited);
}

TEST_CASE("a job Slurm reran with no driver runs the next attempt; a resume adopts it", "[slurm]") {
  Fixture f;
  std::string name = "trial_00050";
  fs::path tdir = f.dir / name;
  fs::create_directories(tdir);
  // Attempt 1 ran in job 100; Slurm requeued it while no driver ran and its stub started the
  // next attempt on its own (run 1), from checkpoint_000001, after 5 bytes of attempt 1's output.
  f.rerun_job_100(name, "5 checkpoint_000001\n");
  REQUIRE(util::write_file_atomic(tdir / "stdout.log", "AAAA\n=== attempt 2 ===\nBBB\n", false));
  auto found = f.ex->attach(f.launch("00050", 1));
  REQUIRE(found);
  CHECK(*found == exec::Attached::kEnded);
  REQUIRE(f.pump([&] { return f.exit_of("00050").has_value(); }));
  CHECK(f.output_of("00050") == "AAAA\n");  // attempt 1's output only
  auto e = *f.exit_of("00050");
  CHECK(e.reason == exec::ExitReason::kPreempted);  // Slurm's doing: no failure
  REQUIRE(e.restart_from);
  CHECK(*e.restart_from == "checkpoint_000001");
  // The driver restarts the trial from that checkpoint: the rerun is adopted, nothing submitted.
  f.events.clear();
  auto l = f.launch("00050", 2);
  l.stdout_offset = 5;
  l.env["TUNE_RESTORE_CHECKPOINT"] = (tdir / "checkpoint_000001").string();
  REQUIRE(f.ex->start(l));
  REQUIRE(f.pump([&] { return f.output_of("00050").find("BBB") != std::string::npos; }));
  CHECK(f.output_of("00050") == "=== attempt 2 ===\nBBB\n");
  CHECK(f.fake->submits() == 0);
  CHECK_FALSE(f.fake->cancelled("100"));
  auto jf = exec::read_job_file(f.dir, name);
  REQUIRE(jf);
  CHECK((jf->job_id == "100" && jf->attempt == 2 && jf->first_attempt == 1));
  f.record("00050", 2, "exited", 0, exec::slurm_attempt_nonce(f.key, name, 1, "100", 2));
  REQUIRE(f.pump([&] { return f.exit_of("00050").has_value(); }));
  CHECK(f.exit_of("00050")->reason == exec::ExitReason::kExited);
}

TEST_CASE("a rerun Slurm started with no driver and that ended meanwhile is finished, not redone",
          "[slurm]") {
  Fixture f;
  std::string name = "trial_00052";
  fs::path tdir = f.dir / name;
  fs::create_directories(tdir);
  f.rerun_job_100(name, "3 -\n", "COMPLETED");
  REQUIRE(util::write_file_atomic(tdir / "stdout.log", "AA\n=== attempt 2 ===\nBB\n", false));
  f.record("00052", 2, "exited", 0, exec::slurm_attempt_nonce(f.key, name, 1, "100", 2));
  REQUIRE(f.ex->attach(f.launch("00052", 1)));
  REQUIRE(f.pump([&] { return f.exit_of("00052").has_value(); }));
  CHECK(f.output_of("00052") == "AA\n");
  f.events.clear();
  auto l = f.launch("00052", 2);
  l.stdout_offset = 3;
  REQUIRE(f.ex->start(l));
  REQUIRE(f.pump([&] { return f.exit_of("00052").has_value(); }));
  CHECK(f.output_of("00052") == "=== attempt 2 ===\nBB\n");  // read once, from the rerun
  CHECK(f.exit_of("00052")->reason == exec::ExitReason::kExited);
  CHECK(f.fake->submits() == 0);
}

TEST_CASE("a rerun whose checkpoint is not the one the trial restarts from is not adopted",
          "[slurm]") {
  Fixture f;
  std::string name = "trial_00051";
  f.rerun_job_100(name, "0 -\n");
  REQUIRE(f.ex->attach(f.launch("00051", 1)));
  REQUIRE(f.pump([&] { return f.exit_of("00051").has_value(); }));
  CHECK(f.exit_of("00051")->restart_from == std::optional<std::string>(""));  // from scratch
  auto l = f.launch("00051", 2);
  l.env["TUNE_RESTORE_CHECKPOINT"] = (f.dir / name / "checkpoint_000003").string();
  REQUIRE(f.ex->start(l));
  REQUIRE(f.pump([&] { return f.fake->submits() == 1; }));  // a new job for the attempt
  CHECK(f.pump([&] { return f.fake->cancelled("100"); }));  // the rerun's job ended
}

TEST_CASE("a malformed self-rerun note is ignored with one warning naming it", "[slurm]") {
  Fixture f;
  std::string name = "trial_00053";
  fs::path sdir = f.dir / exec::kSlurmDir;
  fs::path claim = f.rerun_job_100(name, "");
  for (const char* junk : {"5 ../../etc\n", "x checkpoint_000001\n", "nospace", ""}) {
    REQUIRE(util::write_file_atomic(claim / "self", junk, false));
    std::string problem;
    CHECK_FALSE(exec::read_self_rerun(sdir, name, "100", 1, &problem));
    CHECK(problem.find((claim / "self").string()) == 0);
  }
  std::string problem;
  CHECK_FALSE(exec::read_self_rerun(sdir, name, "100", 2, &problem));  // none: no problem
  CHECK(problem.empty());
  REQUIRE(util::write_file_atomic(claim / "self", "5 ../../etc\n", false));
  LogCapture log;
  // Read at each attach (and each decision after): the attempt is re-attached as if there were
  // no note, and the warning names the file once.
  for (int i = 0; i < 2; ++i) {
    auto found = f.ex->attach(f.launch("00053", 1));
    REQUIRE(found);
    CHECK(*found == exec::Attached::kRunning);
  }
  std::string text = log.text();
  CHECK(text.find("malformed self-rerun note: " + (claim / "self").string()) != std::string::npos);
  size_t first = text.find("malformed self-rerun note");
  CHECK(text.find("malformed self-rerun note", first + 1) == std::string::npos);
}

TEST_CASE("a requeued job's stub runs the next attempt from the latest checkpoint on its own",
          "[slurm]") {
  fs::path dir = fs::temp_directory_path() / ("tune-slurm-stub-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::path sdir = dir / "slurm", tdir = dir / "trial_x";
  for (const char* c : {"checkpoint_000001", "checkpoint_000002", ".staged_checkpoint_9"})
    fs::create_directories(tdir / c);
  fs::create_directories(sdir);
  fs::create_symlink(dir, tdir / "checkpoint_000009");  // never followed
  REQUIRE(util::write_file_atomic(tdir / "stdout.log", "0123456789", false));
  // A stand-in supervisor that prints its attempt and the checkpoint it would restore.
  fs::path fake = dir / "sup";
  REQUIRE(util::write_file_atomic(
      fake, "#!/bin/sh\necho \"attempt=$2 restore=${TUNE_RESTORE_CHECKPOINT:-none}\"\n", false));
  fs::permissions(fake, fs::perms::owner_all);
  exec::Launch l;
  l.trial_id = "x";
  l.attempt = 1;
  l.trial_dir = tdir;
  l.cwd = dir;
  l.argv = {"true"};
  l.env = {{"TUNE_RESTORE_CHECKPOINT", "/old"}};
  exec::SupervisorCall c;
  c.supervisor = fake;
  c.secret = "slurm-job:1:x";
  c.rerun = true;
  fs::path launch = sdir / "trial_x.a1.launch", stub = sdir / "trial_x.sbatch";
  REQUIRE(util::write_file_atomic(launch, exec::launch_script(l, c), false));
  REQUIRE(util::write_file_atomic(
      stub, exec::stub_script("tune-e-trial_x", launch, sdir, "trial_x", tdir), false));
  auto run = [&](const char* count) {
    std::string cmd = "SLURM_JOB_ID=77 SLURM_RESTART_COUNT=" + std::string(count) + " sh '" +
                      stub.string() + "' > '" + (dir / "out").string() + "' 2>/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto out = util::read_file(dir / "out");
    return out ? *out : "";
  };
  CHECK(run("0") == "attempt=1 restore=/old\n");  // the job's first run: the attempt as launched
  // Run 1 with nothing prepared: attempt 2, from the latest complete checkpoint, noted once.
  CHECK(run("1") == "attempt=2 restore=" + (tdir / "checkpoint_000002").string() + "\n");
  auto self = exec::read_self_rerun(sdir, "trial_x", "77", 1);
  REQUIRE(self);
  CHECK(self->stdout_size == 10);
  CHECK(self->checkpoint == "checkpoint_000002");
  // Run 2, which the driver prepared: the prepared file runs, not the stub's own choice.
  REQUIRE(util::write_file_atomic(exec::next_launch_file(sdir, "trial_x", "77", 2),
                                  "echo prepared\n", false));
  CHECK(run("2") == "prepared\n");
  CHECK_FALSE(exec::read_self_rerun(sdir, "trial_x", "77", 2));
  fs::remove_all(dir);
}

TEST_CASE("a job's supervisor derives its run's nonce from the job id and SLURM_RESTART_COUNT",
          "[slurm]") {
  fs::path dir = fs::temp_directory_path() / ("tune-slurm-sup-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "trial_x");
  std::string key(32, 'e');
  REQUIRE(util::write_file_atomic(dir / "lease", "", false));
  exec::Launch l;
  l.trial_id = "x";
  l.attempt = 3;  // the job's run 2: first run as attempt 1
  l.trial_dir = dir / "trial_x";
  l.cwd = dir;
  l.argv = {"true"};
  exec::SupervisorCall c;
  c.supervisor = TUNE_TEST_SUPERVISOR;
  c.lease = dir / "lease";
  c.record = dir / "rec.json";
  c.secret = exec::slurm_job_secret(key, "trial_x", 1);
  REQUIRE(util::write_file_atomic(dir / "launch", exec::launch_script(l, c), false));
  auto run = [&](const char* count) {
    fs::remove(dir / "rec.json");
    std::string cmd = "SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=" + std::string(count) + " sh '" +
                      (dir / "launch").string() + "' 2>/dev/null";
    return std::system(cmd.c_str());
  };
  // SLURM_RESTART_COUNT=2: run 2 of job 4242, attempt 1 + 2 = 3, as the launch file says.
  REQUIRE(run("2") == 0);
  auto text = util::read_file(dir / "rec.json");
  REQUIRE(text);
  exec::ExitInfo info;
  exec::AttemptIdentity id{exec::slurm_attempt_nonce(key, "trial_x", 1, "4242", 3), {}, {}, {}};
  CHECK(exec::check_exit_record(*text, 3, id, info) == exec::RecordCheck::kGenuine);
  CHECK(info.reason == exec::ExitReason::kExited);
  // Another job's or another run's nonce does not match it.
  id.nonce = exec::slurm_attempt_nonce(key, "trial_x", 1, "4243", 3);
  CHECK(exec::check_exit_record(*text, 3, id, info) == exec::RecordCheck::kForged);
  id.nonce = exec::slurm_attempt_nonce(key, "trial_x", 2, "4242", 3);
  CHECK(exec::check_exit_record(*text, 3, id, info) == exec::RecordCheck::kForged);
  // A restart count that does not make this attempt (Slurm requeued it once more than the
  // driver prepared for): nothing runs and nothing is recorded.
  CHECK(run("1") != 0);
  CHECK_FALSE(fs::exists(dir / "rec.json"));
  fs::remove_all(dir);
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
  CHECK(f.exit_of("00006")->reason == exec::ExitReason::kDriverStop);  // it never ran
  CHECK_FALSE(f.exit_of("00005").has_value());  // until its supervisor records
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
  CHECK(f.exit_of("00005")->reason == exec::ExitReason::kDriverStop);  // ours: passed on as it is
}

TEST_CASE("a driver that ends right after stopping its trials leaves no job behind", "[slurm]") {
  // A job stopped while squeue still called it pending ends at once; the driver may then exit
  // before the worker has run its scancel (busy in a slow squeue): the cancel must still be made.
  Fixture f;
  REQUIRE(f.ex->start(f.launch("00001")));
  REQUIRE(f.pump([&] { return !f.job_of("00001").empty(); }));
  std::string job = f.job_of("00001");
  f.settle(0.2);
  f.fake->queue_ms = 400;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the worker is in squeue
  f.ex->stop("00001", false);
  REQUIRE(f.pump([&] { return f.exit_of("00001").has_value(); }));
  f.ex.reset();
  CHECK(f.fake->cancelled(job));
}

TEST_CASE("a job sbatch answers after its attempt was stopped is cancelled, even at exit",
          "[slurm]") {
  Fixture f;
  f.fake->submit_ms = 300;
  REQUIRE(f.ex->start(f.launch("00001")));
  f.settle(0.1);  // sbatch is running
  f.ex->stop("00001", false);
  f.ex.reset();  // before its answer reached the loop
  REQUIRE(f.fake->submits() == 1);
  std::string job = f.job_of("00001");
  REQUIRE_FALSE(job.empty());
  CHECK(f.fake->cancelled(job));
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
  CHECK(f.exit_of("00008")->reason == exec::ExitReason::kPreempted);  // Slurm's doing: no failure
  REQUIRE(f.ex->start(f.launch("00009")));
  REQUIRE(f.pump([&] { return !f.job_of("00009").empty(); }));
  {
    std::lock_guard lk(f.fake->m);
    f.fake->states.erase(f.job_of("00009"));
  }
  REQUIRE(f.pump([&] { return f.exit_of("00009").has_value(); }));
  CHECK(f.exit_of("00009")->reason ==
        exec::ExitReason::kSupervisorDied);  // never wrote anything: a failure
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
  f.fake->add("7", "RUNNING", "tune-e-trial_a", exec::job_mark(f.key, "trial_a", 2));
  f.fake->add("8", "COMPLETED", "tune-e-trial_b", exec::job_mark(f.key, "trial_b", 1));
  f.fake->set("9", "RUNNING");  // no job file names it: not this experiment's, never touched
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

TEST_CASE("a forged .job file naming someone else's job never gets it cancelled", "[slurm]") {
  Fixture f;
  fs::create_directories(f.dir / exec::kSlurmDir);
  auto job_file = [&](const std::string& trial, const std::string& text) {
    REQUIRE(util::write_file_atomic(f.dir / exec::kSlurmDir / (trial + ".job"), text, false));
  };
  f.fake->add("70", "RUNNING", "sleep-by-hand");  // the user's own job, not tune's
  f.fake->add("71", "RUNNING", "tune-e-trial_b", exec::job_mark(f.key, "trial_b", 1));
  // another trial's name (with trial_c's mark): not trial_c's job, nor trial_x's
  f.fake->add("72", "RUNNING", "tune-e-trial_x", exec::job_mark(f.key, "trial_c", 1));
  job_file("trial_a", "70 1\n");
  job_file("trial_b", "71 1\n");
  job_file("trial_c", "72 1\n");
  auto live = f.ex->live_attempts();
  REQUIRE(live.size() == 1);
  CHECK(live[0].trial_name == "trial_b");
  // Even handed a forged stray, end_attempts cancels only jobs it knows to be ours.
  auto forged = live[0];
  forged.trial_name = "trial_a";
  forged.supervisor = 70;
  live.push_back(forged);
  std::thread slurm_ends_it([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    f.fake->set("71", "CANCELLED");
  });
  f.ex->end_attempts(live, 5);
  slurm_ends_it.join();
  CHECK(f.fake->cancelled("71"));
  CHECK_FALSE(f.fake->cancelled("70"));
  CHECK_FALSE(f.fake->cancelled("72"));

  // A resumed attempt whose .job file names the foreign job: stopping it cancels nothing.
  auto l = f.launch("a");
  REQUIRE(f.ex->attach(l) == exec::Attached::kRunning);
  f.ex->stop("a", false);  // before any squeue answer: held until one says whose job it is
  f.settle(0.5);
  f.ex->stop("a", true);
  f.settle(0.5);
  CHECK_FALSE(f.fake->cancelled("70"));
  // The same with the id coming from the state.
  l = f.launch("c");
  l.job_id = "72";
  REQUIRE(f.ex->attach(l) == exec::Attached::kRunning);
  f.ex->stop("c", true);
  f.settle(0.5);
  CHECK_FALSE(f.fake->cancelled("72"));
  // Its own job is cancelled after a resume once squeue lists it under the trial's name.
  f.fake->add("73", "RUNNING", "tune-e-trial_d", exec::job_mark(f.key, "trial_d", 1));
  l = f.launch("d");
  l.job_id = "73";
  REQUIRE(f.ex->attach(l) == exec::Attached::kRunning);
  f.ex->stop("d", true);  // before any squeue answer: held until one says whose it is
  REQUIRE(f.pump([&] { return f.fake->cancelled("73"); }));
}

TEST_CASE("a job with the trial's job name but not this experiment's mark is not ours", "[slurm]") {
  // Any job of the user's may be named tune-<experiment>-<trial>: after a resume, a job id read
  // back (state, .job file) is adopted or cancelled only if squeue lists it with the trial's
  // name and one of its attempts' marks.
  Fixture f;
  fs::create_directories(f.dir / exec::kSlurmDir);
  auto job_file = [&](const std::string& trial, const std::string& text) {
    REQUIRE(util::write_file_atomic(f.dir / exec::kSlurmDir / (trial + ".job"), text, false));
  };
  f.fake->add("80", "RUNNING", "tune-e-trial_a");  // the name, no comment
  f.fake->add("81", "RUNNING", "tune-e-trial_b", "tune:1:0123456789abcdef");  // a made-up mark
  // trial_c's name with another trial's (genuine) mark, and another experiment's mark
  f.fake->add("82", "RUNNING", "tune-e-trial_c", exec::job_mark(f.key, "trial_a", 1));
  f.fake->add("83", "RUNNING", "tune-e-trial_d",
              exec::job_mark(std::string(32, 'd'), "trial_d", 1));
  f.fake->add("84", "RUNNING", "tune-e-trial_e", exec::job_mark(f.key, "trial_e", 1));  // ours
  job_file("trial_a", "80 1\n");
  job_file("trial_b", "81 1\n");
  job_file("trial_c", "82 1\n");
  job_file("trial_d", "83 1\n");
  job_file("trial_e", "84 1\n");
  // A resume's strays: only the marked job (and no name-only job is ever ended as one).
  auto live = f.ex->live_attempts();
  REQUIRE(live.size() == 1);
  CHECK(live[0].trial_name == "trial_e");
  CHECK(live[0].supervisor == 84);
  // Re-attached by the .job file or the state: stopping cancels none of the name-only jobs,
  // and squeue's RUNNING for them never keeps the attempt alive (it is not its job).
  for (std::string t : {"a", "b", "c", "d"}) {
    auto l = f.launch(t);
    if (t == "c" || t == "d") l.job_id = t == "c" ? "82" : "83";  // from the state
    REQUIRE(f.ex->attach(l) == exec::Attached::kRunning);
  }
  f.settle(0.5);
  for (std::string t : {"a", "b", "c", "d"}) f.ex->stop(t, true);
  f.settle(0.5);
  for (const char* id : {"80", "81", "82", "83"}) CHECK_FALSE(f.fake->cancelled(id));
  // Without a marked job in squeue, each attempt ends as a job gone from squeue (no record).
  REQUIRE(f.pump([&] {
    for (const char* t : {"a", "b", "c", "d"})
      if (!f.exit_of(t)) return false;
    return true;
  }));
  // The genuine one is ended when asked.
  auto l = f.launch("e");
  REQUIRE(f.ex->attach(l) == exec::Attached::kRunning);
  f.ex->stop("e", true);
  REQUIRE(f.pump([&] { return f.fake->cancelled("84"); }));
}

TEST_CASE("job ids go to the state; a job whose id was never recorded is found by its mark",
          "[slurm]") {
  Fixture f;
  REQUIRE(f.ex->start(f.launch("00010")));
  REQUIRE(f.pump([&] { return !f.job_of("00010").empty(); }));
  std::string job = f.job_of("00010");
  std::vector<std::pair<std::string, std::string>> ids;
  REQUIRE(f.pump([&] {
    for (auto& x : f.ex->take_job_ids()) ids.push_back(x);
    return !ids.empty();
  }));
  REQUIRE(ids.size() == 1);
  CHECK(ids[0] == std::pair<std::string, std::string>{"00010", job});
  CHECK(f.ex->take_job_ids().empty());
  {
    std::lock_guard lk(f.fake->m);
    CHECK(f.fake->comments[job] == exec::job_mark(f.key, "trial_00010", 1));
  }
  CHECK(exec::marked_attempt(f.key, "trial_00010", exec::job_mark(f.key, "trial_00010", 1)) == 1);
  CHECK_FALSE(exec::marked_attempt(f.key, "trial_00011", exec::job_mark(f.key, "trial_00010", 1)));
  CHECK_FALSE(exec::marked_attempt(std::string(32, 'd'), "trial_00010",
                                   exec::job_mark(f.key, "trial_00010", 1)));
  for (const char* junk : {"", "tune:", "tune::x", "tune:1", "tune:-1:ab", "tune:99999999999:a"})
    CHECK_FALSE(exec::marked_attempt(f.key, "trial_00010", junk));

  // A new driver (sbatch answered, the driver died before any id was written): found by mark.
  Fixture g;
  g.fake->add("500", "RUNNING", "tune-e-trial_q", exec::job_mark(g.key, "trial_q", 2));
  g.fake->add("501", "RUNNING", "tune-e-trial_q", "tune:2:0000000000000000");  // forged mark
  auto live = g.ex->live_attempts();  // nothing on disk but the mark
  CHECK(live.empty());                // (no .tune/slurm dir: nothing of ours ran here)
  fs::create_directories(g.dir / exec::kSlurmDir);
  live = g.ex->live_attempts();
  REQUIRE(live.size() == 1);
  CHECK(live[0].supervisor == 500);
  CHECK(live[0].attempt == 2);
  REQUIRE(g.ex->attach(g.launch("q", 2)) == exec::Attached::kRunning);
  ids = g.ex->take_job_ids();
  REQUIRE(ids.size() == 1);
  CHECK(ids[0].second == "500");
  // Attempt 3 has no job: gone.
  CHECK(g.ex->attach(g.launch("r", 3)) == exec::Attached::kGone);
}

TEST_CASE("sbatch_args may not rename or re-mark tune's jobs", "[slurm]") {
  for (const char* bad : {"--job-name=x", "-J", "-Jx", "--comment=y"}) {
    FakeSlurm* fake = nullptr;
    exec::SlurmOptions o;
    o.exp_name = "e";
    o.exp_dir = fs::temp_directory_path();
    o.job.sbatch_args = {"--qos=normal", bad};
    auto fs_ = std::make_unique<FakeSlurm>();
    fake = fs_.get();
    exec::SlurmExecutor ex(o, std::move(fs_));
    auto r = ex.check();
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("sbatch_args") != std::string::npos);
    (void)fake;
  }
  exec::SlurmOptions o;
  o.exp_name = "e";
  o.exp_dir = fs::temp_directory_path();
  o.job.sbatch_args = {"--qos=normal", "--job-name-suffix"};
  exec::SlurmExecutor ex(o, std::make_unique<FakeSlurm>());
  CHECK(ex.check());
}

TEST_CASE("sacct's records are parsed and junk is skipped", "[slurm]") {
  // As `sacct -n -P -X -o JobID,State,ExitCode,JobName` prints them (Slurm's documented format).
  auto jobs = exec::parse_sacct(
      "123|COMPLETED|0:0|tune-e-trial_1\n"
      "124|CANCELLED by 1000|0:15|tune-e-trial_2\n"
      "125|TIMEOUT|0:0|a|b\n"
      "126|FAILED|2:0|tune-e-trial_4\n"
      "126.batch|FAILED|2:0|batch\n"
      "127_3|COMPLETED|0:0|array\n"
      "sacct: error: something\n"
      "128|OUT_OF_MEMORY|0:125|x\n"
      "129|NODE_FAIL|1:99999|y\n");
  REQUIRE(jobs.size() == 6);
  CHECK(jobs[0].id == "123");
  CHECK(jobs[0].state == exec::JobState::kCompleted);
  CHECK(jobs[0].exit_code == 0);
  CHECK_FALSE(jobs[0].signal.has_value());
  CHECK(jobs[1].state == exec::JobState::kCancelled);
  CHECK(jobs[1].state_text == "CANCELLED");
  CHECK(jobs[1].signal == 15);
  CHECK(jobs[2].state == exec::JobState::kTimeout);
  CHECK(jobs[2].name == "a|b");
  CHECK(jobs[3].exit_code == 2);
  CHECK(jobs[4].state == exec::JobState::kFailed);
  CHECK(jobs[4].signal == 125);
  CHECK(jobs[5].state == exec::JobState::kNodeFail);
  CHECK_FALSE(jobs[5].signal.has_value());  // out of range: not believed
  CHECK(exec::sacct_disabled("sacct: error: Slurm accounting storage is disabled"));
  CHECK_FALSE(exec::sacct_disabled("sacct: error: Invalid job id specified"));
}

TEST_CASE("a job gone from squeue is judged by sacct where the cluster has accounting", "[slurm]") {
  SECTION("accounting: sacct's TIMEOUT counts no failure, FAILED does") {
    Fixture f;
    f.fake->has_accounting = true;
    REQUIRE(f.ex->start(f.launch("00020")));
    REQUIRE(f.ex->start(f.launch("00021")));
    REQUIRE(f.pump([&] { return !f.job_of("00020").empty() && !f.job_of("00021").empty(); }));
    std::string a = f.job_of("00020"), b = f.job_of("00021");
    {
      std::lock_guard lk(f.fake->m);
      f.fake->states.erase(a);  // purged from squeue (MinJobAge)
      f.fake->states.erase(b);
      f.fake->acct_lines[a] = a + "|TIMEOUT|0:0|tune-e-trial_00020";
      f.fake->acct_lines[b] = b + "|FAILED|3:0|tune-e-trial_00021";
    }
    REQUIRE(f.pump([&] { return f.exit_of("00020") && f.exit_of("00021"); }));
    CHECK(f.exit_of("00020")->reason == exec::ExitReason::kPreempted);
    CHECK(f.exit_of("00020")->error.find("TIMEOUT") != std::string::npos);
    CHECK(f.exit_of("00021")->reason == exec::ExitReason::kSupervisorDied);
    CHECK(f.exit_of("00021")->error.find("FAILED (exit code 3)") != std::string::npos);
    CHECK(f.ex->accounting_calls() >= 1);
  }
  SECTION("no accounting: found out once, then exit records and squeue only") {
    Fixture f;
    for (const char* id : {"00022", "00023"}) {
      REQUIRE(f.ex->start(f.launch(id)));
      REQUIRE(f.pump([&] { return !f.job_of(id).empty(); }));
      {
        std::lock_guard lk(f.fake->m);
        f.fake->states.erase(f.job_of(id));
      }
      REQUIRE(f.pump([&] { return f.exit_of(id).has_value(); }));
      CHECK(f.exit_of(id)->reason == exec::ExitReason::kSupervisorDied);  // as without sacct
    }
    CHECK(f.ex->accounting_calls() == 1);
  }
}
