// The scripted Slurm the Slurm executor's unit tests run against (FakeSlurm: jobs and job steps
// the test moves from state to state by hand), the executor around it (Fixture) and a capture
// of the warnings logged. Included by test_slurm.cpp and test_slurm_steps.cpp only.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "exec/exit_record.hpp"
#include "exec/slurm_executor.hpp"
#include "log_capture.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

using namespace tune;
namespace fs = std::filesystem;

namespace {

// A Slurm whose jobs the test moves from state to state by hand.
struct FakeSlurm final : exec::SlurmClient {
  std::mutex m;
  int next_id = 100;
  std::vector<std::vector<std::string>> submitted;     // args of each sbatch
  std::map<std::string, std::string> states;           // job id -> squeue state
  std::map<std::string, std::string> names, comments;  // job id -> --job-name, --comment
  std::vector<std::pair<std::vector<std::string>, bool>> cancels;
  int queue_calls = 0;
  std::string fail_submit;                     // non-empty: sbatch fails with this message
  std::atomic<int> submit_ms{0}, queue_ms{0};  // how long sbatch and squeue take

  Result<std::string> submit(const std::vector<std::string>& args, const fs::path&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(submit_ms.load()));
    std::lock_guard lk(m);
    if (!fail_submit.empty()) return fail(fail_submit);
    submitted.push_back(args);
    std::string id = std::to_string(next_id++);
    states[id] = "PENDING";
    for (const auto& a : args) {
      if (a.starts_with("--job-name=")) names[id] = a.substr(11);
      if (a.starts_with("--comment=")) comments[id] = a.substr(10);
    }
    return id;
  }
  Result<void> test_only(const std::vector<std::string>&) override { return {}; }
  Result<std::vector<exec::JobInfo>> queue() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(queue_ms.load()));
    std::lock_guard lk(m);
    ++queue_calls;
    std::string text;
    for (auto& [id, st] : states)
      text += id + "|" + st + "|None|" + (comments.count(id) ? comments[id] : "(null)") + "|" +
              (names.count(id) ? names[id] : "someone-elses") + "\n";
    return exec::parse_squeue(text);
  }
  bool has_accounting = false;
  int acct_calls = 0;
  std::map<std::string, std::string> acct_lines;  // job id -> its sacct line
  Result<exec::Accounting> accounting(const std::vector<std::string>& ids) override {
    std::lock_guard lk(m);
    ++acct_calls;
    if (!has_accounting) return exec::Accounting{false, {}};
    std::string text;
    for (auto& id : ids)
      if (acct_lines.count(id)) text += acct_lines[id] + "\n";
    return exec::Accounting{true, exec::parse_sacct(text)};
  }
  Result<void> cancel(const std::vector<std::string>& ids, bool term) override {
    std::lock_guard lk(m);
    cancels.emplace_back(ids, term);
    return {};
  }
  // use_allocation: steps started (srun's args), those the test ended, signals sent.
  std::vector<std::vector<std::string>> steps;
  std::set<std::string> steps_done;
  std::vector<std::pair<std::string, int>> step_signals;
  std::vector<std::vector<std::string>> step_commands;
  std::vector<exec::StepInfo> listed_steps;  // what squeue --steps lists
  std::vector<std::pair<std::vector<std::string>, bool>> step_cancels;
  Result<std::string> start_step(const std::vector<std::string>& args,
                                 const std::vector<std::string>& command,
                                 const fs::path&) override {
    std::lock_guard lk(m);
    steps.push_back(args);
    step_commands.push_back(command);
    return std::to_string(9000 + steps.size() - 1);
  }
  Result<std::vector<exec::StepInfo>> job_steps() override {
    std::lock_guard lk(m);
    return listed_steps;
  }
  // A step cancelled with SIGTERM ends (its supervisor stops the trial); so does one killed.
  Result<void> cancel_steps(const std::vector<std::string>& ids, bool term) override {
    std::lock_guard lk(m);
    step_cancels.emplace_back(ids, term);
    std::erase_if(listed_steps, [&](const exec::StepInfo& s) {
      return std::find(ids.begin(), ids.end(), s.id) != ids.end();
    });
    return {};
  }
  std::vector<std::string> ended_steps(const std::vector<std::string>& ids) override {
    std::lock_guard lk(m);
    std::vector<std::string> out;
    for (auto& id : ids)
      if (steps_done.count(id)) out.push_back(id);
    return out;
  }
  void signal_steps(const std::vector<std::string>& ids, int sig) override {
    std::lock_guard lk(m);
    for (auto& id : ids) step_signals.emplace_back(id, sig);
  }
  bool signalled(const std::string& id, int sig) {
    std::lock_guard lk(m);
    return std::find(step_signals.begin(), step_signals.end(), std::pair{id, sig}) !=
           step_signals.end();
  }
  void set(const std::string& id, const std::string& st) {
    std::lock_guard lk(m);
    states[id] = st;
  }
  // A job submitted by hand (not through the executor).
  void add(const std::string& id, const std::string& st, const std::string& name,
           const std::string& comment = "") {
    std::lock_guard lk(m);
    states[id] = st;
    names[id] = name;
    if (!comment.empty()) comments[id] = comment;
  }
  bool cancelled(const std::string& id) {
    std::lock_guard lk(m);
    for (auto& [ids, term] : cancels)
      if (std::find(ids.begin(), ids.end(), id) != ids.end()) return true;
    return false;
  }
  size_t submits() {
    std::lock_guard lk(m);
    return submitted.size();
  }
};

// Hands the executor a client that forwards to a fake the test keeps (it outlives the executor).
struct Forward final : exec::SlurmClient {
  std::shared_ptr<FakeSlurm> f;
  explicit Forward(std::shared_ptr<FakeSlurm> fake) : f(std::move(fake)) {}
  Result<std::string> submit(const std::vector<std::string>& a, const fs::path& p) override {
    return f->submit(a, p);
  }
  Result<void> test_only(const std::vector<std::string>& a) override { return f->test_only(a); }
  Result<std::vector<exec::JobInfo>> queue() override { return f->queue(); }
  Result<exec::Accounting> accounting(const std::vector<std::string>& ids) override {
    return f->accounting(ids);
  }
  Result<void> cancel(const std::vector<std::string>& ids, bool term) override {
    return f->cancel(ids, term);
  }
  Result<std::string> start_step(const std::vector<std::string>& a,
                                 const std::vector<std::string>& c, const fs::path& log) override {
    return f->start_step(a, c, log);
  }
  Result<std::vector<exec::StepInfo>> job_steps() override { return f->job_steps(); }
  Result<void> cancel_steps(const std::vector<std::string>& ids, bool term) override {
    return f->cancel_steps(ids, term);
  }
  std::vector<std::string> ended_steps(const std::vector<std::string>& ids) override {
    return f->ended_steps(ids);
  }
  void signal_steps(const std::vector<std::string>& ids, int sig) override {
    f->signal_steps(ids, sig);
  }
};

struct Fixture {
  fs::path dir = fs::temp_directory_path() / ("tune-slurm-" + std::to_string(::getpid()));
  std::string key = std::string(32, 'c');
  std::shared_ptr<FakeSlurm> owned;
  FakeSlurm* fake = nullptr;
  std::unique_ptr<exec::SlurmExecutor> ex;
  std::vector<exec::Event> events;

  explicit Fixture(int max_jobs = 100, bool use_allocation = false) {
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
    o.job.cpus = 2;
    o.use_allocation = use_allocation;
    owned = std::make_shared<FakeSlurm>();
    fake = owned.get();
    ex = std::make_unique<exec::SlurmExecutor>(o, std::make_unique<Forward>(owned));
  }
  ~Fixture() {
    ex.reset();
    fs::remove_all(dir);
  }
  // Attempt 1 of `name` ran in job 100, which Slurm requeued while no driver ran: the job is
  // `state` in squeue, and its stub's note of the run it started (`self`: "<bytes>
  // <checkpoint>") is in the job's claim dir, which is returned.
  fs::path rerun_job_100(const std::string& name, const std::string& self,
                         const std::string& state = "RUNNING") {
    fs::path sdir = dir / exec::kSlurmDir;
    fs::create_directories(sdir);
    fs::create_directories(dir / ".tune" / "exit");
    REQUIRE(util::write_file_atomic(sdir / (name + ".job"), "100 1 1\n", false));
    fake->add("100", state, "tune-e-" + name, exec::job_mark(key, name, 1));
    fs::path claim = exec::claim_dir(sdir, name, "100", 1);
    fs::create_directories(claim);
    REQUIRE(util::write_file_atomic(claim / "self", self, false));
    return claim;
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
  // What the supervisor of `id`'s attempt writes when it ends: the nonce of this run of the job
  // its .job file names (or `nonce` if given).
  void record(const std::string& id, int attempt, const std::string& reason, int code = 0,
              std::string nonce = "") {
    std::string name = "trial_" + id;
    if (nonce.empty()) {
      auto job = exec::read_job_file(dir, name);
      REQUIRE(job);
      nonce = exec::slurm_attempt_nonce(key, name, job->first_attempt, job->job_id, attempt);
    }
    std::string text = R"({"attempt":)" + std::to_string(attempt) + R"(,"nonce":")" + nonce +
                       R"(","exit_code":)" + std::to_string(code) + R"(,"reason":")" + reason +
                       R"(","ended":1.0})";
    REQUIRE(util::write_file_atomic(dir / exec::record_path(name), text, false));
  }
  std::string job_of(const std::string& id) {
    auto f = exec::read_job_file(dir, "trial_" + id);
    return f ? f->job_id : "";
  }
};

using testing::LogCapture;

}  // namespace
