// The local transport on real processes: LocalExecutor, a real tune-agent (built beside the
// tests) and the attempt log. Each case runs in a scratch dir in well under a second.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/eventfd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "agent/dir_lock.hpp"
#include "exec/agent_link.hpp"
#include "exec/attempt_log.hpp"
#include "exec/exit_record.hpp"
#include "exec/local_executor.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

namespace fs = std::filesystem;
using namespace tune;

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    char tmpl[] = "/tmp/tune-transport-XXXXXX";
    dir = ::mkdtemp(tmpl);
    fs::create_directories(dir / ".tune");
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

exec::LocalOptions options(const fs::path& exp) {
  exec::LocalOptions o;
  o.agent = TUNE_TEST_AGENT;
  o.attempt_log = exp / exec::kAttemptLog;
  o.lease_file = exp / ".tune" / "lease";
  o.grace_s = 1;
  o.record_key = "00112233445566778899aabbccddeeff";
  return o;
}

exec::Launch launch(const fs::path& exp, const std::string& id, std::vector<std::string> argv,
                    int attempt = 1) {
  exec::Launch l;
  l.trial_id = id;
  l.attempt = attempt;
  l.trial_dir = exp / ("trial_" + id);
  l.cwd = exp;
  l.argv = std::move(argv);
  l.env = {{"PATH", "/usr/bin:/bin"}};
  l.params_json = "{\"x\": 1}\n";
  return l;
}

// Waits until every id in `ids` has exited; collects output and exits.
struct Outcome {
  std::map<std::string, std::string> out;
  std::map<std::string, exec::ExitInfo> exits;
};
void collect(exec::Executor& ex, Outcome& o, double wait_s) {
  for (auto& e : ex.wait(wait_s)) {
    if (auto* out = std::get_if<exec::OutputEvent>(&e)) o.out[out->trial_id] += out->data;
    if (auto* x = std::get_if<exec::ExitEvent>(&e)) o.exits[x->trial_id] = x->info;
  }
}
Outcome run_until_exits(exec::Executor& ex, size_t n, Outcome o = {}, double timeout_s = 20) {
  double end = ex.now() + timeout_s;
  while (o.exits.size() < n && ex.now() < end) collect(ex, o, 0.2);
  return o;
}

// Kills this process's agent: the only tune-agent child of this process. False if none.
bool kill_agent() {
  bool killed = false;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    auto cmd = util::read_file(entry.path() / "cmdline", 4096);
    auto stat = util::read_file(entry.path() / "stat", 4096);
    if (!cmd || !stat || cmd->find("tune-agent") == std::string::npos) continue;
    auto close = stat->rfind(')');
    int ppid = std::atoi(stat->c_str() + close + 4);
    if (ppid != ::getpid()) continue;
    ::kill(std::stoi(entry.path().filename().string()), SIGKILL);
    killed = true;
  }
  return killed;
}

}  // namespace

TEST_CASE("local transport: output, exit code, params.json, and the attempt log") {
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  REQUIRE(ex.start(launch(s.dir, "a", {"sh", "-c", "echo '{\"v\": 1}'; exit 3"})));
  REQUIRE(ex.start(launch(s.dir, "b", {"no-such-program-xyz"})));
  auto o = run_until_exits(ex, 2);
  REQUIRE(o.exits.size() == 2);
  CHECK(o.out["a"] == "{\"v\": 1}\n");
  CHECK(o.exits["a"].exit_code == 3);
  CHECK(o.exits["a"].reason == exec::ExitReason::kExited);
  CHECK(o.exits["a"].pid.has_value());
  CHECK(o.exits["b"].reason == exec::ExitReason::kExecFailed);
  CHECK(o.exits["b"].error == "command not found: no-such-program-xyz");
  CHECK(util::read_file(s.dir / "trial_a" / "params.json", 100) == "{\"x\": 1}\n");
  exec::AttemptLog log(s.dir / exec::kAttemptLog);
  log.refresh();
  const auto* a = log.find("trial_a", 1);
  REQUIRE(a);
  CHECK(a->supervisor.has_value());
  CHECK(a->pid == o.exits["a"].pid);
  REQUIRE(a->exit);
  exec::ExitInfo info;
  exec::AttemptIdentity id{
      exec::attempt_nonce(options(s.dir).record_key, "trial_a", 1), {}, {}, {}};
  CHECK(exec::check_exit_record(*a->exit, 1, id, info) == exec::RecordCheck::kGenuine);
  CHECK(info.exit_code == 3);
}

TEST_CASE("local transport: a trial started by its path gets its own group, cwd, env and signals") {
  // Programs the driver resolved to a path are started with posix_spawn, others with fork and
  // execvp: both give the trial the same process, and report the same failures.
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  // (the signal state is read by the trial's own process, exec'd last: the shell blocks every
  // signal for a moment around each fork)
  auto c = launch(s.dir, "c",
                  {"/bin/sh", "-c",
                   "echo \"$$ $(cut -d' ' -f5 /proc/$$/stat)\"; pwd; echo \"$FOO\"; "
                   "exec grep -E '^Sig(Blk|Ign)' /proc/self/status"});
  c.env["FOO"] = "bar";
  REQUIRE(ex.start(c));
  auto d = launch(s.dir, "d", {"/bin/true"});
  d.cwd = s.dir / "no-such-dir";
  REQUIRE(ex.start(d));
  REQUIRE(ex.start(launch(s.dir, "e", {"/no/such/program"})));
  auto o = run_until_exits(ex, 3);
  REQUIRE(o.exits.size() == 3);
  CHECK(o.exits["c"].reason == exec::ExitReason::kExited);
  CHECK(o.exits["c"].exit_code == 0);
  std::istringstream out(o.out["c"]);
  std::string group, cwd, foo, blk, ign;
  std::getline(out, group), std::getline(out, cwd), std::getline(out, foo);
  std::getline(out, blk), std::getline(out, ign);
  auto space = group.find(' ');
  REQUIRE(space != std::string::npos);
  CHECK(group.substr(0, space) == group.substr(space + 1));  // leads its own process group
  CHECK(cwd == s.dir.string());
  CHECK(foo == "bar");
  // Nothing blocked, whatever the driver and the supervisor block; none of the signals the
  // agent or supervisor handle or ignore (HUP INT USR1 PIPE TERM CHLD) ignored.
  CHECK(blk == "SigBlk:\t0000000000000000");
  REQUIRE(ign.rfind("SigIgn:\t", 0) == 0);
  CHECK((std::stoull(ign.substr(8), nullptr, 16) & 0x15203) == 0);
  CHECK(o.exits["d"].reason == exec::ExitReason::kExecFailed);
  CHECK(o.exits["d"].error ==
        "cannot enter workdir " + (s.dir / "no-such-dir").string() + ": No such file or directory");
  CHECK(o.exits["e"].reason == exec::ExitReason::kExecFailed);
  CHECK(o.exits["e"].error == "command not found: /no/such/program");
}

TEST_CASE("local transport: stop before and after the supervisor is known") {
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  REQUIRE(ex.start(launch(s.dir, "a", {"sleep", "30"})));
  ex.stop("a", false);  // asked at once: applied when the start arrives
  REQUIRE(ex.start(launch(s.dir, "b", {"sleep", "30"})));
  Outcome o;
  while (!ex.pid("b")) collect(ex, o, 0.05);
  ex.stop("b", true);
  o = run_until_exits(ex, 2, o);
  for (const auto& [id, x] : o.exits) INFO(id + ": " + exec::exit_reason_name(x.reason));
  CHECK(o.exits.count("a"));
  CHECK(o.exits.count("b"));
  REQUIRE(o.exits.size() == 2);
  CHECK(o.exits["a"].reason == exec::ExitReason::kDriverStop);
  CHECK(o.exits["a"].signal == SIGTERM);
  CHECK(o.exits["b"].reason == exec::ExitReason::kDriverStop);
  CHECK(o.exits["b"].signal == SIGKILL);
}

TEST_CASE("local transport: each trial gets exactly its environment, also from a new agent") {
  // The agent keeps the first launch's environment; later launches send what differs from it.
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  auto with = [&](const std::string& id, std::map<std::string, std::string> env) {
    auto l = launch(s.dir, id, {"/bin/sh", "-c", "env | grep '^T_' | sort"});
    for (auto& [k, v] : env) l.env[k] = v;
    return l;
  };
  REQUIRE(ex.start(with("a", {{"T_A", "1"}, {"T_B", "x y"}})));
  REQUIRE(ex.start(with("b", {{"T_A", "2"}})));                                // changed, removed
  REQUIRE(ex.start(with("c", {{"T_A", "1"}, {"T_B", "x y"}, {"T_C", "="}})));  // added
  auto o = run_until_exits(ex, 3);
  REQUIRE(o.exits.size() == 3);
  CHECK(o.out["a"] == "T_A=1\nT_B=x y\n");
  CHECK(o.out["b"] == "T_A=2\n");
  CHECK(o.out["c"] == "T_A=1\nT_B=x y\nT_C==\n");
  // A new agent has no base: the next launch gives it one again.
  REQUIRE(kill_agent());
  auto gone = run_until_exits(ex, 1, {}, 0.5);  // (the driver's end notices the agent is gone)
  CHECK(gone.exits.empty());
  REQUIRE(ex.start(with("d", {{"T_D", "4"}})));
  REQUIRE(ex.start(with("e", {{"T_A", "5"}})));
  o = run_until_exits(ex, 2);
  REQUIRE(o.exits.size() == 2);
  CHECK(o.out["d"] == "T_D=4\n");
  CHECK(o.out["e"] == "T_A=5\n");
}

TEST_CASE("local transport: a launch the agent refuses ends its attempt, naming why") {
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  REQUIRE(ex.start(launch(s.dir, "a", {})));  // no command: the agent cannot run it
  REQUIRE(ex.start(launch(s.dir, "b", {"true"})));
  auto o = run_until_exits(ex, 2);
  REQUIRE(o.exits.size() == 2);
  CHECK(o.exits["a"].reason == exec::ExitReason::kSupervisorDied);
  CHECK(o.exits["a"].error ==
        "cannot start the trial's supervisor: tune-agent refused it: bad launch request: empty "
        "argv");
  CHECK(o.exits["b"].exit_code == 0);
}

TEST_CASE("local transport: a params.json left empty or changed is written again, not another") {
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  fs::create_directories(s.dir / "trial_a");
  { std::ofstream torn(s.dir / "trial_a" / "params.json"); }  // left empty by a killed one
  fs::create_directories(s.dir / "trial_b");
  std::ofstream(s.dir / "trial_b" / "params.json") << "{\"x\": 77}\n";  // an attempt changed it
  fs::create_directories(s.dir / "trial_d");
  std::ofstream(s.dir / "trial_d" / "params.json") << "{\"x\": 1}\n";  // as it should be
  struct stat before {};
  REQUIRE(::stat((s.dir / "trial_d" / "params.json").c_str(), &before) == 0);
  for (const char* id : {"a", "b", "c", "d"}) REQUIRE(ex.start(launch(s.dir, id, {"true"})));
  REQUIRE(run_until_exits(ex, 4).exits.size() == 4);
  for (const char* id : {"a", "b", "c", "d"})
    CHECK(util::read_file(s.dir / ("trial_" + std::string(id)) / "params.json", 100) ==
          "{\"x\": 1}\n");
  CHECK((fs::status(s.dir / "trial_c" / "params.json").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  struct stat after {};
  REQUIRE(::stat((s.dir / "trial_d" / "params.json").c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);  // the same text: not written again
}

TEST_CASE("local transport: a killed agent leaves its trials running; their ends still arrive") {
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  REQUIRE(ex.start(launch(s.dir, "a", {"sh", "-c", "sleep 0.5; echo done"})));
  Outcome before;
  while (!ex.pid("a")) collect(ex, before, 0.05);
  REQUIRE(kill_agent());
  auto o = run_until_exits(ex, 1, before);
  REQUIRE(o.exits.size() == 1);
  CHECK(o.exits["a"].reason == exec::ExitReason::kExited);
  CHECK(o.exits["a"].exit_code == 0);
  CHECK(o.out["a"] == "done\n");
  // and a new agent starts for the next launch
  auto started = ex.start(launch(s.dir, "b", {"true"}));
  INFO((started ? std::string() : started.error().message));
  REQUIRE(started);
  CHECK(run_until_exits(ex, 1).exits["b"].exit_code == 0);
}

TEST_CASE("local transport: attach finds running and ended attempts in the log, and no others") {
  Scratch s;
  {
    exec::LocalExecutor first(options(s.dir));
    REQUIRE(first.start(launch(s.dir, "run", {"sh", "-c", "sleep 1; echo late"})));
    REQUIRE(first.start(launch(s.dir, "end", {"sh", "-c", "echo early; exit 4"})));
    while (!first.pid("run") || !first.pid("end")) (void)first.wait(0.05);
  }  // the driver is gone (its agent exits; supervisors go on)
  ::usleep(300'000);
  exec::LocalExecutor ex(options(s.dir));
  auto l_run = launch(s.dir, "run", {});
  auto l_end = launch(s.dir, "end", {});
  auto l_none = launch(s.dir, "none", {});
  CHECK(ex.attach(l_run).value() == exec::Attached::kRunning);
  CHECK(ex.attach(l_end).value() == exec::Attached::kEnded);
  CHECK(ex.attach(l_none).value() == exec::Attached::kGone);
  // A start line anyone could append, naming a live process of the user with its real start
  // time (this test process): not a supervisor, so never re-attached (and never signalled).
  {
    std::ofstream f(s.dir / exec::kAttemptLog, std::ios::app);
    f << "{\"event\":\"start\",\"trial\":\"trial_forged\",\"attempt\":1,\"supervisor\":"
      << ::getpid() << ",\"supervisor_started\":" << util::process_start_ticks(::getpid())
      << ",\"pid\":" << ::getpid() << ",\"started\":1}\n";
  }
  CHECK(ex.attach(launch(s.dir, "forged", {})).value() == exec::Attached::kGone);
  auto wrong_attempt = launch(s.dir, "end", {}, 2);
  wrong_attempt.trial_id = "end2";
  CHECK(ex.attach(wrong_attempt).value() == exec::Attached::kGone);
  auto o = run_until_exits(ex, 2);
  CHECK(o.exits["run"].exit_code == 0);
  CHECK(o.out["run"] == "late\n");
  CHECK(o.exits["end"].exit_code == 4);
}

TEST_CASE("local transport: a trial that cuts or overwrites its own stdout.log fails") {
  // What the log held past the cut may never have been read: the attempt fails (output_lost,
  // retried like a lost log) when the cut or overwrite comes between two writes, and nothing
  // after it is kept. After the last write, only if the driver had not read it all.
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  REQUIRE(ex.start(launch(s.dir, "mid",
                          {"sh", "-c",
                           "echo one; sleep 0.3; : > trial_mid/stdout.log; "
                           "echo two"})));
  REQUIRE(ex.start(launch(s.dir, "refill",
                          {"sh", "-c",
                           "echo one; echo two; sleep 0.3; "
                           "printf 'junk line %s\\n' 1 2 3 4 5 > trial_refill/stdout.log; "
                           "echo three"})));
  REQUIRE(ex.start(launch(s.dir, "overend",
                          {"sh", "-c",
                           "echo one; echo two; sleep 0.3; "
                           "printf 'one\\nTWO\\n' > trial_overend/stdout.log"})));
  REQUIRE(ex.start(launch(s.dir, "last",
                          {"sh", "-c",
                           "echo one; echo two; sleep 0.3; "
                           ": > trial_last/stdout.log"})));
  REQUIRE(ex.start(launch(s.dir, "grown",
                          {"sh", "-c",
                           "echo one; echo extra >> trial_grown/stdout.log; "
                           "echo two"})));
  auto o = run_until_exits(ex, 5);
  std::string dir = (s.dir / "trial_").string();
  INFO(o.exits["mid"].error);
  CHECK(o.exits["mid"].reason == exec::ExitReason::kOutputLost);
  CHECK(o.exits["mid"].error.find("stdout.log in " + dir +
                                  "mid was cut from 4 to 0 bytes by another process; what the "
                                  "trial printed since is not kept") != std::string::npos);
  // (nothing after the cut: a reader going on from where it was would take results past a gap)
  CHECK(util::read_file(s.dir / "trial_mid" / "stdout.log").value() == "");
  INFO(o.exits["refill"].error);
  CHECK(o.exits["refill"].reason == exec::ExitReason::kOutputLost);
  CHECK(o.exits["refill"].error.find("stdout.log in " + dir +
                                     "refill was overwritten by another process") !=
        std::string::npos);
  CHECK(o.out["refill"].find("three") == std::string::npos);
  // Overwritten after its last output (the same length): what a driver reads there now may
  // not be the trial's, so it fails, even if this driver had read it all.
  CHECK(o.exits["overend"].reason == exec::ExitReason::kOutputLost);
  CHECK(o.exits["overend"].error.find("overend was overwritten by another process after the "
                                      "trial's last output") != std::string::npos);
  // Cut after its last output, which the driver had read (the 0.3 s): nothing was lost.
  CHECK(o.exits["last"].reason == exec::ExitReason::kExited);
  CHECK(o.exits["last"].stdout_cut == 8u);
  CHECK(o.out["last"] == "one\ntwo\n");
  // (bytes appended by another process are no loss)
  CHECK(o.exits["grown"].reason == exec::ExitReason::kExited);
  CHECK(o.exits["grown"].exit_code == 0);
}

TEST_CASE("local transport: a wait ends when another executor's descriptor is readable") {
  // (MultiExecutor hands it the SSH executor's ready_fd: remote events are taken at once, not
  // at the end of a 50 ms slice)
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(fd >= 0);
  ex.also_wake_on(fd);
  REQUIRE(::eventfd_write(fd, 1) == 0);
  // 20 waits of up to 1 s each (nothing runs here): all end at once while it is readable.
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) CHECK(ex.wait(1.0).empty());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  eventfd_t drained;
  REQUIRE(::eventfd_read(fd, &drained) == 0);
  ex.also_wake_on(-1);
  ::close(fd);
}

TEST_CASE("judge_cut: output cut after the last line fails the attempt only if unread") {
  exec::ExitInfo info;
  info.reason = exec::ExitReason::kExited;
  info.stdout_cut = 100;
  exec::judge_cut(info, 100);
  CHECK(info.reason == exec::ExitReason::kExited);
  exec::judge_cut(info, 60);
  CHECK(info.reason == exec::ExitReason::kOutputLost);
  CHECK(info.error.find("before bytes 60 to 100 of it were read") != std::string::npos);
  exec::ExitInfo stopped;  // (an attempt stopped, or failed, keeps its reason)
  stopped.reason = exec::ExitReason::kDriverStop;
  stopped.stdout_cut = 100;
  exec::judge_cut(stopped, 0);
  CHECK(stopped.reason == exec::ExitReason::kDriverStop);
  auto parsed = exec::parse_exit_record(
      "{\"attempt\":1,\"reason\":\"exited\",\"ended\":1,\"stdout_cut\":7}", 1);
  REQUIRE(parsed);
  CHECK(parsed->stdout_cut == 7u);
}

TEST_CASE("attempt log: forged, torn and foreign lines") {
  Scratch s;
  fs::path file = s.dir / exec::kAttemptLog;
  {
    std::ofstream f(file);
    f << "not json\n"
      << "{\"event\":\"start\",\"trial\":\"t\",\"attempt\":1,\"supervisor\":-5,\"pid\":1}\n"
      << "{\"event\":\"start\",\"trial\":\"t\",\"attempt\":\"1\",\"supervisor\":5,\"pid\":1}\n"
      << "[1,2]\n"
      << "{\"event\":\"exit\",\"trial\":\"t\",\"attempt\":2,\"nonce\":\"00\",\"reason\":\"exited\","
         "\"ended\":1}\n"
      << "{\"event\":\"start\",\"trial\":\"u\",\"attempt\":1,\"supervisor\":1,\"pid\":2";  // torn
  }
  exec::AttemptLog log(file);
  log.refresh();
  CHECK(log.find("t", 1) == nullptr);
  const auto* t2 = log.find("t", 2);
  REQUIRE(t2);
  REQUIRE(t2->exit);
  exec::ExitInfo info;
  exec::AttemptIdentity id{
      exec::attempt_nonce("00112233445566778899aabbccddeeff", "t", 2), {}, {}, {}};
  CHECK(exec::check_exit_record(*t2->exit, 2, id, info) == exec::RecordCheck::kForged);
  CHECK(log.find("u", 1) == nullptr);  // not complete yet
  {
    std::ofstream f(file, std::ios::app);
    f << ",\"started\":3}\n";
  }
  log.refresh();
  REQUIRE(log.find("u", 1));
  CHECK(log.find("u", 1)->supervisor == 1);
  CHECK(log.live().empty());  // pid 1 did not start at tick 0: not believed to be running
}

TEST_CASE("attempt log: lines read elsewhere, with another host's idea of who is alive") {
  // (an SSH host's log, read there: its supervisors are checked against its own processes)
  exec::AttemptLog log("/nonexistent/attempts.log");
  log.add_lines(
      "{\"event\":\"supervising\",\"trial\":\"a\",\"attempt\":1,\"supervisor\":100,"
      "\"supervisor_started\":7}\n"
      "{\"event\":\"supervising\",\"trial\":\"a\",\"attempt\":2,\"supervisor\":101,"
      "\"supervisor_started\":8}\n"
      "{\"event\":\"supervising\",\"trial\":\"b\",\"attempt\":1,\"supervisor\":102,"
      "\"supervisor_started\":9}\n"
      "{\"event\":\"supervising\",\"trial\":\"c\",\"attempt\":1,\"supervisor\":103");  // torn
  std::vector<std::pair<int, uint64_t>> asked;
  auto live = exec::live_attempts(log, [&](int pid, uint64_t ticks) {
    asked.emplace_back(pid, ticks);
    return pid == 101 || (pid == 102 && ticks == 10);  // 102 started later: a reused pid
  });
  REQUIRE(live.size() == 1);
  CHECK(live[0].trial_name == "a");
  CHECK(live[0].attempt == 2);
  CHECK(live[0].supervisor == 101);
  CHECK(live[0].supervisor_started == 8);
  CHECK(asked.size() == 3);  // (the torn line is not one)
}

TEST_CASE("local transport: launches asked for just before the driver died are found on resume") {
  Scratch s;
  auto opts = options(s.dir);
  constexpr int kTrials = 200;  // the old agent takes a while over them
  {
    exec::AgentLink link;  // the old driver's end: requests sent, then it is gone at once
    REQUIRE(link.start(opts.agent, opts.attempt_log));
    for (int i = 0; i < kTrials; ++i) {
      auto l = launch(s.dir, std::to_string(i), {"sleep", "3"});
      nlohmann::json req = {
          {"op", "launch"},
          {"id", l.trial_id},
          {"dir", l.trial_dir.string()},
          {"attempt", 1},
          {"lease", opts.lease_file.string()},
          {"orphan_timeout", 600},
          {"grace", 1},
          {"cwd", l.cwd.string()},
          {"fifo", false},
          {"argv", {"/bin/sleep", "3"}},
          {"env", {"PATH=/usr/bin:/bin"}},
          {"nonce", exec::attempt_nonce(opts.record_key, l.trial_dir.filename().string(), 1)}};
      REQUIRE(link.send(req.dump()));
    }
  }
  // The new driver: every attempt the old one asked for runs, and is found (none would be
  // started a second time beside it).
  exec::LocalExecutor ex(opts);
  int running = 0;
  for (int i = 0; i < kTrials; ++i)
    running += ex.attach(launch(s.dir, std::to_string(i), {})).value() == exec::Attached::kRunning;
  CHECK(running == kTrials);
  for (int i = 0; i < kTrials; ++i) ex.stop(std::to_string(i), true);
  CHECK(run_until_exits(ex, kTrials).exits.size() == kTrials);
}

TEST_CASE("local transport: a resume lists the attempts still running here and can end them") {
  Scratch s;
  std::vector<exec::LiveAttempt> live;
  int sup = 0;
  {
    exec::LocalExecutor first(options(s.dir));
    REQUIRE(first.start(launch(s.dir, "a", {"sleep", "30"}, 2)));
    Outcome o;
    while (!first.pid("a")) collect(first, o, 0.05);
    // The driver is gone (its executor with it): the attempt runs on, as after a crash.
  }
  exec::LocalExecutor second(options(s.dir));
  live = second.live_attempts();
  REQUIRE(live.size() == 1);
  CHECK(live[0].host.empty());
  CHECK(live[0].trial_name == "trial_a");
  CHECK(live[0].attempt == 2);
  sup = live[0].supervisor;
  CHECK(exec::supervisor_alive(sup, live[0].supervisor_started));
  second.end_attempts(live, 1);
  CHECK_FALSE(exec::supervisor_alive(sup, live[0].supervisor_started));
  CHECK(second.live_attempts().empty());
  exec::AttemptLog log(s.dir / exec::kAttemptLog);
  log.refresh();
  const auto* a = log.find("trial_a", 2);
  REQUIRE(a);
  REQUIRE(a->exit);
  CHECK(a->exit->find("\"driver_stop\"") != std::string::npos);  // stopped, not killed
}

TEST_CASE("finding tune-agent: beside tune, then ../libexec/tune/; the error names every place",
          "[local][helpers]") {
  char tmpl[] = "/tmp/tune-find-XXXXXX";
  fs::path root = ::mkdtemp(tmpl);
  fs::path self = root / "bin" / "tune";
  fs::create_directories(root / "bin");
  const char* var = "TUNE_TEST_FIND_HELPER";
  ::unsetenv(var);

  auto missing = exec::find_helper_program("tune-agent", var, self);
  REQUIRE_FALSE(missing);
  const std::string& msg = missing.error().message;
  CHECK(msg.find("cannot find tune-agent") != std::string::npos);
  CHECK(msg.find("'" + (root / "bin" / "tune-agent").string() + "'") != std::string::npos);
  CHECK(msg.find("'" + (root / "libexec" / "tune" / "tune-agent").string() + "'") !=
        std::string::npos);
  CHECK(msg.find("$TUNE_TEST_FIND_HELPER (unset)") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);  // one line

  auto make_exe = [](const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "#!/bin/sh\n";
    fs::permissions(p, fs::perms::owner_all);
  };
  make_exe(root / "libexec" / "tune" / "tune-agent");  // as installed
  auto installed = exec::find_helper_program("tune-agent", var, self);
  REQUIRE(installed);
  CHECK(*installed == root / "libexec" / "tune" / "tune-agent");
  make_exe(root / "bin" / "tune-agent");  // beside it (a build dir) comes first
  auto beside = exec::find_helper_program("tune-agent", var, self);
  REQUIRE(beside);
  CHECK(*beside == root / "bin" / "tune-agent");

  // The variable wins, and must name a program that can run.
  ::setenv(var, (root / "nope").c_str(), 1);
  auto bad = exec::find_helper_program("tune-agent", var, self);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("'" + (root / "nope").string() + "' (TUNE_TEST_FIND_HELPER)") !=
        std::string::npos);
  ::setenv(var, (root / "bin" / "tune-agent").c_str(), 1);
  auto from_env = exec::find_helper_program("tune-agent", var, self);
  REQUIRE(from_env);
  CHECK(*from_env == root / "bin" / "tune-agent");
  ::unsetenv(var);

  // The running binary's path unknown: said so.
  auto unknown = exec::find_helper_program("tune-agent", var, fs::path());
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("path of the running tune is unknown") != std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("a trial dir's lock names its holder; a second lock on it is refused", "[transport]") {
  Scratch s;
  fs::path d = s.dir / "trial_a";
  fs::create_directories(d);
  CHECK(agent::flock_holder(d.string()) == -1);  // nobody holds it
  int fd = agent::lock_trial_dir(d.string());
  REQUIRE(fd >= 0);
  CHECK(agent::flock_holder(d.string()) == ::getpid());
  // Another open file description (another supervisor) cannot take it, even in this process.
  CHECK(agent::lock_trial_dir(d.string()) == -1);
  CHECK(errno == EWOULDBLOCK);
  ::close(fd);
  CHECK(agent::flock_holder(d.string()) == -1);
  fd = agent::lock_trial_dir(d.string());
  CHECK(fd >= 0);
  ::close(fd);
  CHECK(agent::flock_holder((s.dir / "missing").string()) == -1);
}

TEST_CASE("waiting for an earlier agent that holds the lock fails naming it", "[transport]") {
  Scratch s;
  auto o = options(s.dir);
  fs::path lock = o.attempt_log;
  lock += ".agent-lock";
  CHECK(exec::wait_for_agent(o.attempt_log, 0.05));  // no lock file: no agent ever ran
  std::ofstream(lock).close();
  CHECK(exec::wait_for_agent(o.attempt_log, 0.05));  // free
  pid_t child = ::fork();
  if (child == 0) {  // an "agent" that holds the lock, stopped
    int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
    ::flock(fd, LOCK_EX);
    ::raise(SIGSTOP);
    ::_exit(0);
  }
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, WUNTRACED) == child);  // it holds the lock, and is stopped
  REQUIRE(WIFSTOPPED(status));
  CHECK(agent::flock_holder(lock.string()) == child);
  auto held = exec::wait_for_agent(o.attempt_log, 0.1);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  REQUIRE_FALSE(held);
  const std::string& msg = held.error().message;
  CHECK(msg.find("(pid " + std::to_string(child) +
                 ", stopped (by SIGSTOP or a terminal): `kill "
                 "-CONT " +
                 std::to_string(child) + "`) still holds " + lock.string()) != std::string::npos);
  CHECK(exec::wait_for_agent(o.attempt_log, 1.0));  // gone: free again
}

TEST_CASE(
    "local transport: an attempt in a trial dir that is a symlink is not started, and "
    "nothing is written where it points",
    "[transport]") {
  Scratch s;
  exec::LocalExecutor ex(options(s.dir));
  fs::create_directories(s.dir / "victim");
  std::ofstream(s.dir / "victim" / "params.json") << "precious";
  fs::create_directory_symlink(s.dir / "victim", s.dir / "trial_e");
  REQUIRE(ex.start(launch(s.dir, "e", {"true"})));
  auto o = run_until_exits(ex, 1);
  REQUIRE(o.exits.count("e"));
  CHECK(o.exits["e"].reason == exec::ExitReason::kExecFailed);
  INFO(o.exits["e"].error);
  CHECK(o.exits["e"].error.find("is a symbolic link: nothing is written through one") !=
        std::string::npos);
  CHECK(util::read_file(s.dir / "victim" / "params.json", 100) == "precious");
  CHECK(fs::directory_iterator(s.dir / "victim")->path().filename() == "params.json");
  // The driver's own preparation of a trial dir (SSH and Slurm trials) refuses it too.
  auto l = launch(s.dir, "e", {"true"});
  auto prepared = exec::prepare_trial_dir(l);
  REQUIRE_FALSE(prepared);
  CHECK(prepared.error().message.find("is a symbolic link") != std::string::npos);
  CHECK(util::read_file(s.dir / "victim" / "params.json", 100) == "precious");
}

TEST_CASE(
    "local transport: a step-mode command is never written through a link in its FIFO's place") {
  Scratch s;
  fs::path victim = s.dir / "victim.txt";
  { std::ofstream(victim) << "untouched"; }
  exec::LocalExecutor ex(options(s.dir));
  // The trial puts a link to a file of the user's where its FIFO was, before any command.
  auto l = launch(s.dir, "f",
                  {"/bin/sh", "-c",
                   "rm -f \"$TUNE_TRIAL_DIR/stdin.fifo\"; ln -s " + victim.string() +
                       " \"$TUNE_TRIAL_DIR/stdin.fifo\"; sleep 30"});
  l.env["TUNE_TRIAL_DIR"] = l.trial_dir.string();
  l.stdin_fifo = true;
  REQUIRE(ex.start(l));
  fs::path fifo = l.trial_dir / "stdin.fifo";
  for (int i = 0; i < 500 && !fs::is_symlink(fifo); ++i) (void)ex.wait(0.01);
  REQUIRE(fs::is_symlink(fifo));
  ex.send("f", R"({"op":"step"})");
  std::optional<exec::StdinLostEvent> lost;
  for (double end = ex.now() + 5; !lost && ex.now() < end;)
    for (auto& e : ex.wait(0.1))
      if (auto* x = std::get_if<exec::StdinLostEvent>(&e)) lost = *x;
  REQUIRE(lost);
  CHECK(lost->trial_id == "f");
  CHECK(lost->attempt == 1);
  CHECK(lost->why.find("symbolic link") != std::string::npos);
  CHECK(util::read_file(victim, 100).value_or("") == "untouched");
  ex.stop("f", true);
  (void)run_until_exits(ex, 1);
}
