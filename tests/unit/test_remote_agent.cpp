// `tune-agent remote` (what runs on an SSH worker host) on real processes, over pipes instead of
// an SSH channel, with the driver's side of its protocol (exec/agent_protocol.hpp).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "agent/stdin_record.hpp"
#include "exec/agent_protocol.hpp"
#include "exec/attempt_log.hpp"
#include "exec/exit_record.hpp"
#include "exec/ssh_changes.hpp"
#include "util/process.hpp"

namespace fs = std::filesystem;
using namespace tune;
using Kind = exec::AgentEvent::Kind;

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    char tmpl[] = "/tmp/tune-remote-agent-XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::ofstream(dir / "lease") << "";
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// tune-agent remote ATTEMPT_LOG, its stdin and stdout as pipes.
struct Agent {
  pid_t pid = -1;
  int to = -1, from = -1;
  std::string buf;
  std::map<std::string, int> outputs;           // output events passed over, by "id#attempt"
  std::vector<exec::AgentEvent> output_events;  // and the events
  // supervisors' start and exit events, and the changes said before an exit, passed over
  std::vector<exec::AgentEvent> relayed;
  int alive = 0;                          // heartbeats passed over
  std::map<std::string, int> written;     // stdin lines said written, passed over, by "id#attempt"
  std::vector<uint64_t> written_n;        // and their numbers
  std::vector<uint64_t> written_already;  // and the records' numbers of those found written
  explicit Agent(const fs::path& log) {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execl(TUNE_TEST_AGENT, TUNE_TEST_AGENT, "remote", log.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to = in[1];
    from = out[0];
  }
  ~Agent() {
    if (to >= 0) ::close(to);
    ::close(from);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  void send(const std::string& line) {
    std::string l = line + "\n";
    REQUIRE(::write(to, l.data(), l.size()) == static_cast<ssize_t>(l.size()));
  }
  // The next event line (within 10 s), output events only counted unless `outputs_too`.
  std::optional<exec::AgentEvent> next(bool outputs_too = false, int within_ms = 10000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(within_ms);
    for (;;) {
      if (auto nl = buf.find('\n'); nl != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        auto e = exec::parse_agent_event(line);
        if (e && e->kind == Kind::kOutput && !outputs_too) {
          ++outputs[e->id + "#" + std::to_string(e->attempt)];
          output_events.push_back(std::move(*e));
          continue;
        }
        if (e && e->kind == Kind::kAlive) {
          ++alive;
          continue;
        }
        if (e && e->kind == Kind::kWritten) {
          ++written[e->id + "#" + std::to_string(e->attempt)];
          written_n.push_back(e->n);
          written_already.push_back(e->already);
          continue;
        }
        if (e && (e->kind == Kind::kStart || e->kind == Kind::kExit || e->kind == Kind::kChanges)) {
          relayed.push_back(std::move(*e));
          continue;
        }
        return e;
      }
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      until - std::chrono::steady_clock::now())
                                      .count());
      pollfd p{from, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, left) <= 0) return std::nullopt;
      char chunk[4096];
      ssize_t n = ::read(from, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf.append(chunk, static_cast<size_t>(n));
    }
  }
};

// Attempt 1 of trial `id`, in trial dir `trial` of the scratch dir, running `command`.
exec::RemoteLaunch launch(const Scratch& s, const std::string& id, const std::string& trial,
                          const std::vector<std::string>& command,
                          const std::map<std::string, std::string>& env = {}) {
  exec::RemoteLaunch l;
  l.id = id;
  l.attempt = 1;
  l.dir = (s.dir / trial).string();
  l.record = (s.dir / (trial + ".exit.json")).string();
  l.nonce = "ef";
  l.lease = (s.dir / "lease").string();
  l.grace = 1;
  l.cwd = s.dir.string();
  l.argv = command;
  l.env = env;
  return l;
}

// The arguments of tune-supervisor (the program) for the same.
std::vector<std::string> supervisor_args(const Scratch& s, const std::string& trial,
                                         const std::vector<std::string>& command) {
  std::vector<std::string> args = {(s.dir / trial).string(),
                                   "1",
                                   (s.dir / "lease").string(),
                                   "600",
                                   "1",
                                   s.dir.string(),
                                   "null",
                                   (s.dir / (trial + ".exit.json")).string(),
                                   "--"};
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

// A supervisor started by someone else (an earlier agent): here a child of the test.
pid_t stand_in_supervisor() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execlp("sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  return pid;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// What a driver reads of trial `id`'s stdout.log `log` from `offset` with the agent's output
// `events`, by its rule (ssh_output.cpp's, written again here): the bytes of an event that
// reaches where it has read to, else a read of the file up to the event's size; then the rest
// of the file (read when "gone" comes). `carried` / `looked`: how many events went each way.
std::string as_driver_reads(const std::vector<exec::AgentEvent>& events, const std::string& id,
                            const std::string& log, uint64_t offset, int& carried, int& looked) {
  std::string got;
  carried = looked = 0;
  for (const auto& e : events) {
    if (e.id != id) continue;
    if (e.from >= 0 && static_cast<uint64_t>(e.from) <= offset &&
        offset <= e.from + e.data.size()) {
      CHECK(static_cast<int64_t>(e.data.size()) <= 64 << 10);
      got += e.data.substr(offset - e.from);
      offset = e.from + e.data.size();
      ++carried;
    } else {
      CHECK(e.from == -1);  // (never a gap: an event goes on from where the last one ended)
      if (e.size >= 0 && static_cast<uint64_t>(e.size) > offset) {
        got += log.substr(offset, e.size - offset);
        offset = e.size;
      }
      ++looked;
    }
  }
  return got + log.substr(std::min<uint64_t>(offset, log.size()));
}

// A dir in /dev/shm (another filesystem than the scratch dir's /tmp), removed at the end.
struct ShmDir {
  fs::path dir;
  explicit ShmDir(const char* prefix) {
    std::string tmpl = std::string("/dev/shm/") + prefix + "-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()));
    dir = tmpl;
  }
  ~ShmDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// A checkpoint dir `dir` holding `mib` MiB (copying it across filesystems takes a while).
void make_big_checkpoint(const fs::path& dir, int mib) {
  fs::create_directories(dir);
  std::ofstream f(dir / "weights.bin", std::ios::binary);
  std::string block(1 << 20, 'w');
  for (int i = 0; i < mib; ++i) f << block;
  f.close();
  REQUIRE(f.good());  // (/dev/shm needs room for it)
}

// The first child process `parent` has (waited for up to 5 s): the agent's, the child doing its
// one file request; that child's, its copy across filesystems.
pid_t first_child(pid_t parent) {
  std::string children =
      "/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children";
  pid_t child = 0;
  for (int i = 0; i < 5000 && child <= 0; ++i) {
    std::ifstream(children) >> child;
    if (child <= 0) ::usleep(1000);
  }
  REQUIRE(child > 0);
  return child;
}

}  // namespace

TEST_CASE("tune-agent remote starts a supervisor per request and says when it ends",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  auto ready = agent.next();
  REQUIRE(ready);
  CHECK(ready->kind == Kind::kReady);
  // An earlier attempt's output is there: the new one's starts after it; its old exit record
  // is removed before the start.
  fs::create_directories(s.dir / "trial_a");
  std::ofstream(s.dir / "trial_a" / "stdout.log") << "12345\n";
  std::ofstream(s.dir / "trial_a.exit.json") << "stale";
  auto a = launch(s, "a", "trial_a", {"/bin/sh", "-c", "echo \"$GREETING\""},
                  {{"GREETING", "hello there"}});
  a.nonce = "abcd";
  agent.send(exec::agent_launch_request(a));
  auto launched = agent.next();
  REQUIRE(launched);
  CHECK(launched->kind == Kind::kLaunched);
  CHECK(launched->id == "a");
  CHECK(launched->attempt == 1);
  CHECK(launched->offset == 6);
  CHECK(launched->supervisor > 0);
  CHECK(launched->watched);
  auto gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->id == "a");
  CHECK(gone->supervisor == launched->supervisor);
  CHECK(gone->status == 0);
  CHECK(read(s.dir / "trial_a" / "stdout.log") == "12345\n=== attempt 1 ===\nhello there\n");
  // The supervisor's own events came through the agent, before its "gone": the trial's start
  // (its pid), then the exit record, which the driver believes as it would the file.
  REQUIRE(agent.relayed.size() == 2);
  const auto& start = agent.relayed[0];
  CHECK(start.kind == Kind::kStart);
  CHECK((start.id == "a" && start.attempt == 1));
  CHECK(start.supervisor == launched->supervisor);
  CHECK(start.pid > 0);
  CHECK(start.pid != start.supervisor);
  CHECK(start.started > 0);
  const auto& exit = agent.relayed[1];
  CHECK(exit.kind == Kind::kExit);
  CHECK(exit.supervisor == launched->supervisor);
  exec::AttemptIdentity who{"abcd", launched->supervisor, start.pid, start.started};
  exec::ExitInfo info;
  CHECK(exec::check_exit_record(exit.line, 1, who, info) == exec::RecordCheck::kGenuine);
  CHECK(info.exit_code == std::optional<int>(0));
  CHECK(info.pid == std::optional<int>(start.pid));
  who.nonce = "abce";
  CHECK(exec::check_exit_record(exit.line, 1, who, info) == exec::RecordCheck::kForged);
  // It says it is alive while it waits (the driver checks the supervisors itself when not).
  CHECK(agent.alive >= 1);
  // The record is the supervisor's, with the request's nonce; the attempt log names the
  // supervisor (before the agent answered) and its exit.
  std::string record = read(s.dir / "trial_a.exit.json");
  CHECK(record.find("\"nonce\":\"abcd\"") != std::string::npos);
  std::string sup = "\"supervisor\":" + std::to_string(launched->supervisor);
  CHECK(record.find(sup) != std::string::npos);
  std::string log = read(s.dir / "attempts.log");
  CHECK(log.find("{\"event\":\"supervising\",\"trial\":\"trial_a\",\"attempt\":1," + sup) !=
        std::string::npos);
  CHECK(log.find("\"event\":\"exit\",\"trial\":\"trial_a\"") != std::string::npos);
}

TEST_CASE("tune-agent remote: what changed in an ended attempt's dir comes before its exit",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());  // (ready)
  auto a = launch(s, "a", "trial_a", {"/bin/sh", "-c", "echo '{\"x\": 1}'; printf made > out.txt"});
  a.cwd = (s.dir / "trial_a").string();
  a.changes_at_exit = true;
  agent.send(exec::agent_launch_request(a));
  auto launched = agent.next();
  REQUIRE(launched);
  REQUIRE(launched->kind == Kind::kLaunched);
  auto gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  REQUIRE(agent.relayed.size() == 3);
  CHECK(agent.relayed[0].kind == Kind::kStart);
  const auto& changes = agent.relayed[1];
  CHECK(changes.kind == Kind::kChanges);
  CHECK((changes.id == "a" && changes.attempt == 1));
  CHECK(changes.supervisor == launched->supervisor);
  CHECK(agent.relayed[2].kind == Kind::kExit);
  // The whole dir as it was when the attempt ended, every file new since no sync looked.
  auto c = exec::parse_changes(changes.data);
  REQUIRE(c.kind == exec::Changes::Kind::kFiles);
  std::map<std::string, std::string> files;
  for (const auto& f : c.files) {
    CHECK(f.changed);
    files[f.path] = f.data;
  }
  CHECK(files["out.txt"] == "made");
  CHECK(files["stdout.log"] == read(s.dir / "trial_a" / "stdout.log"));
  CHECK(files["stdout.log"].find("{\"x\": 1}") != std::string::npos);
  CHECK(fs::exists(s.dir / "trial_a" / ".tune_sync_mark"));
}

TEST_CASE("tune-agent remote: a supervisor killed is said gone; bad requests are named",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  auto b = launch(s, "b", "trial_b", {"sleep", "30"});
  b.attempt = 2;
  agent.send(exec::agent_launch_request(b));
  auto launched = agent.next();
  REQUIRE(launched);
  REQUIRE(launched->kind == Kind::kLaunched);
  // (its trial, which leads a process group of its own, is ended after it)
  std::string children;
  for (int i = 0; i < 100 && children.empty(); ++i) {
    std::string sup = std::to_string(launched->supervisor);
    children = read("/proc/" + sup + "/task/" + sup + "/children");
    if (children.empty()) ::usleep(10000);
  }
  ::kill(launched->supervisor, SIGKILL);
  auto gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->status == 128 + SIGKILL);
  CHECK_FALSE(fs::exists(s.dir / "trial_b.exit.json"));
  for (int child = std::atoi(children.c_str()); child > 0; child = 0) ::kill(-child, SIGKILL);
  CHECK_FALSE(children.empty());
  agent.send("not json");
  auto error = agent.next();
  REQUIRE(error);
  CHECK(error->kind == Kind::kError);
  CHECK(error->error.find("not a request") != std::string::npos);
  agent.send(R"({"op":"launch","id":"c"})");
  error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("bad launch request") != std::string::npos);
  auto d = launch(s, "d", "trial_d", {"true"});
  d.dir = "relative/dir";
  agent.send(exec::agent_launch_request(d));
  gone = agent.next();
  REQUIRE(gone);
  CHECK((gone->kind == Kind::kGone && gone->supervisor == -1));
  CHECK(gone->error.find("not an absolute trial dir") != std::string::npos);
}

TEST_CASE("tune-agent remote: its supervisors are its forks, found again as a resume finds them",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  agent.send(exec::agent_launch_request(launch(s, "e", "trial_e", {"sleep", "30"})));
  auto launched = agent.next();
  REQUIRE(launched);
  REQUIRE(launched->kind == Kind::kLaunched);
  // A tune-agent process (no exec) that leads its session, and its start time is the log's.
  int sup = launched->supervisor;
  std::string stat = read("/proc/" + std::to_string(sup) + "/stat");
  CHECK(stat.find("(tune-agent)") != std::string::npos);
  exec::AttemptLog log(s.dir / "attempts.log");
  log.refresh();
  auto live = exec::live_attempts(log);
  REQUIRE(live.size() == 1);
  CHECK(live[0].trial_name == "trial_e");
  CHECK(live[0].attempt == 1);
  CHECK(live[0].supervisor == sup);
  // The agent ends (its driver went): the supervisor goes on. A new agent is ready at once, and
  // launches only under the log's lock (a resume reads the log under it, shared).
  ::kill(agent.pid, SIGKILL);
  Agent second(s.dir / "attempts.log");
  auto ready = second.next();
  REQUIRE(ready);
  CHECK(ready->kind == Kind::kReady);
  CHECK(::kill(sup, 0) == 0);
  int reader = ::open((s.dir / "attempts.log.agent-lock").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(reader >= 0);
  REQUIRE(::flock(reader, LOCK_SH) == 0);
  second.send(exec::agent_launch_request(launch(s, "k", "trial_k", {"true"})));
  CHECK_FALSE(second.next(false, 500));
  CHECK_FALSE(fs::exists(s.dir / "trial_k"));  // (the lock comes first)
  ::close(reader);
  auto locked = second.next();
  REQUIRE(locked);
  CHECK(locked->kind == Kind::kLaunched);
  CHECK(locked->id == "k");
  auto k_gone = second.next();
  REQUIRE(k_gone);
  CHECK(k_gone->kind == Kind::kGone);
  exec::signal_supervisor(sup, true);
  for (int i = 0; i < 1000 && !fs::exists(s.dir / "trial_e.exit.json"); ++i) ::usleep(10000);
  CHECK(fs::exists(s.dir / "trial_e.exit.json"));
  // Bad nonces are refused: nobody could believe the exit record.
  for (const char* nonce : {"", "NOT-HEX"}) {
    auto bad = launch(s, "n", "trial_n", {"true"});
    bad.nonce = nonce;
    second.send(exec::agent_launch_request(bad));
    auto error = second.next();
    REQUIRE(error);
    CHECK(error->kind == Kind::kError);
    CHECK(error->error.find("nonce") != std::string::npos);
    CHECK(error->id == "n");
  }
  CHECK_FALSE(fs::exists(s.dir / "trial_n"));
}

TEST_CASE("tune-agent remote: where an attempt's output starts is in its log line and record",
          "[remote_agent]") {
  // A trial dir an earlier attempt (or an earlier experiment of the same name) left output in:
  // a driver that did not write down the launch's answer reads the new attempt from there.
  Scratch s;
  fs::create_directories(s.dir / "trial_r");
  {
    std::ofstream(s.dir / "trial_r" / "stdout.log") << "{\"old\": 1}\n{\"old\": 2}\n";
    std::ofstream(s.dir / "trial_r" / "stdout.times") << "old notes\n";
  }
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  agent.send(exec::agent_launch_request(launch(s, "r", "trial_r", {"sh", "-c", "echo new"})));
  auto launched = agent.next();
  REQUIRE(launched);
  REQUIRE(launched->kind == Kind::kLaunched);
  CHECK(launched->offset == 22);
  for (int i = 0; i < 1000 && !fs::exists(s.dir / "trial_r.exit.json"); ++i) ::usleep(10000);
  auto record = exec::parse_exit_record(read(s.dir / "trial_r.exit.json"), 1);
  REQUIRE(record);
  CHECK(record->stdout_from == 22u);
  CHECK(record->times_from == 10u);
  CHECK(record->stdout_size > 22u);
  exec::AttemptLog log(s.dir / "attempts.log");
  log.refresh();
  const auto* logged = log.find("trial_r", 1);
  REQUIRE(logged);
  CHECK(logged->stdout_from == 22u);
  CHECK(logged->times_from == 10u);
  // (what live_attempts() gives a resume carries them too)
  auto live = exec::live_attempts(log, [](int, uint64_t) { return true; });
  REQUIRE(live.size() == 1);
  CHECK(live[0].stdout_from == 22u);
  CHECK(live[0].times_from == 10u);
}

TEST_CASE("tune-agent remote starts nothing a driver that is gone asked for", "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  // The request and the end of the channel are both there when the agent looks (it is
  // stopped meanwhile): the driver sent it, then went.
  ::kill(agent.pid, SIGSTOP);
  agent.send(exec::agent_launch_request(launch(s, "f", "trial_f", {"sleep", "30"})));
  ::close(agent.to);
  agent.to = -1;
  ::kill(agent.pid, SIGCONT);
  auto gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->supervisor == -1);
  CHECK(gone->error.find("driver is gone") != std::string::npos);
  CHECK_FALSE(fs::exists(s.dir / "trial_f" / "stdout.log"));
}

TEST_CASE("tune-agent remote says when a trial's output grows, at most every 50 ms",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  // 300 lines, one every ~2 ms or more: 300 writes to stdout.log, over at least 0.6 s.
  agent.send(exec::agent_launch_request(
      launch(s, "h", "trial_h",
             {"/bin/sh", "-c",
              "i=0; while [ $i -lt 300 ]; do echo \"{\\\"i\\\": $i}\"; i=$((i+1)); "
              "sleep 0.002; done"})));
  auto launched = agent.next();
  REQUIRE(launched);
  REQUIRE(launched->kind == Kind::kLaunched);
  auto t0 = std::chrono::steady_clock::now();
  auto gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int said = agent.outputs["h#1"];
  INFO("output events: " << said << " in " << took << " s");
  CHECK(said >= 2);
  CHECK(said <= took / 0.050 + 3);  // not one per write
  CHECK(said < 300);
  // Few bytes each: every event carried them, each going on from the last; together they are
  // the attempt's output and its notes, as the files hold them.
  std::string data, times;
  for (const auto& e : agent.output_events) {
    REQUIRE(e.from == static_cast<int64_t>(launched->offset + data.size()));
    REQUIRE(e.times_from == static_cast<int64_t>(launched->times_offset + times.size()));
    data += e.data;
    times += e.times;
    CHECK(e.size == static_cast<int64_t>(launched->offset + data.size()));
  }
  std::string log = read(s.dir / "trial_h" / "stdout.log");
  // (the last writes may come after the last event: "gone" means "look" too)
  CHECK(log.substr(0, data.size()) == data);
  CHECK(data.size() > 1000);
  CHECK(read(s.dir / "trial_h" / "stdout.times").substr(0, times.size()) == times);
  CHECK(times.find("start 1 ") == 0);
}

// Checked against a driver's rule (as ssh_output.cpp has it, written again here): bytes taken
// from an event that reaches where it has read to, else read from the file up to its size.
TEST_CASE("tune-agent remote: an output burst too big to carry is left to the driver to read",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  fs::create_directories(s.dir / "trial_g");
  std::ofstream(s.dir / "trial_g" / "stdout.log") << "earlier attempt\n";
  // 1 MB at once, then small lines.
  agent.send(exec::agent_launch_request(
      launch(s, "g", "trial_g",
             {"/bin/sh", "-c",
              "head -c 1000000 /dev/zero | tr '\\0' x; echo; for i in 1 2 3; do sleep 0.1; echo "
              "\"{\\\"i\\\": $i}\"; done"})));
  auto launched = agent.next();
  REQUIRE(launched);
  REQUIRE(launched->kind == Kind::kLaunched);
  auto gone = agent.next();
  REQUIRE(gone);
  REQUIRE(gone->kind == Kind::kGone);
  std::string log = read(s.dir / "trial_g" / "stdout.log");
  int carried = 0, left = 0;
  CHECK(as_driver_reads(agent.output_events, "g", log, launched->offset, carried, left) ==
        log.substr(launched->offset));
  CHECK(left >= 1);
  CHECK(carried >= 3);  // (the small lines after the burst)
}

TEST_CASE("tune-agent remote answers while the driver reads nothing; what it then says adds up",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  // A trial printing ~1.5 MB in short lines over ~1 s, while the driver reads nothing of the
  // agent's channel (a slow link, or a driver busy elsewhere): its events fill the channel.
  agent.send(exec::agent_launch_request(
      launch(s, "p", "trial_p",
             {"/bin/sh", "-c",
              "i=0; while [ $i -lt 100 ]; do head -c 15000 /dev/zero | tr '\\0' y; echo; "
              "i=$((i+1)); sleep 0.01; done"})));
  ::usleep(1500 * 1000);
  // A launch asked now is made at once all the same (with blocking writes the agent waited
  // for the channel, and started nothing until the driver read).
  agent.send(exec::agent_launch_request(launch(s, "q", "trial_q", {"true"})));
  for (int i = 0; i < 100 && !fs::exists(s.dir / "trial_q"); ++i) ::usleep(20000);
  CHECK(fs::exists(s.dir / "trial_q"));
  int gone = 0;
  while (gone < 2) {
    auto e = agent.next();
    REQUIRE(e);
    if (e->kind == Kind::kGone) ++gone;
  }
  std::string log = read(s.dir / "trial_p" / "stdout.log");
  int carried = 0, left = 0;
  CHECK(as_driver_reads(agent.output_events, "p", log, 0, carried, left) == log);
  CHECK(carried >= 1);
  CHECK(log.size() > 1000000);
}

TEST_CASE("tune-agent remote watches a supervisor it did not start: its output and its end",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  fs::create_directories(s.dir / "trial_w");
  pid_t other = stand_in_supervisor();
  agent.send(exec::agent_watch_request("w", 3, (s.dir / "trial_w").string(), other, 0, 0, 0));
  auto watching = agent.next();
  REQUIRE(watching);
  CHECK(watching->kind == Kind::kWatching);
  CHECK(watching->id == "w");
  CHECK(watching->attempt == 3);
  // Another file of the trial dir written: nothing to say; stdout.log made empty: nothing yet.
  std::ofstream(s.dir / "trial_w" / "other.txt") << "not output\n";
  std::ofstream(s.dir / "trial_w" / "stdout.log").flush();
  CHECK_FALSE(agent.next(true, 300));
  // Output, then more of it within the gap after the first "output": that one at once, one
  // more at the gap's end for the rest.
  // Each carries its bytes, from where the watch said the driver had read to, and the notes
  // of stdout.times with them (written before the bytes, as a supervisor does).
  std::ofstream(s.dir / "trial_w" / "stdout.times") << "start 3 1 1\n9 2 2\n";
  std::ofstream(s.dir / "trial_w" / "stdout.log", std::ios::app) << "{\"x\": 1}\n";
  auto output = agent.next(true);
  REQUIRE(output);
  CHECK(output->kind == Kind::kOutput);
  CHECK(output->id == "w");
  CHECK(output->attempt == 3);
  CHECK(output->size == 9);
  CHECK(output->from == 0);
  CHECK(output->data == "{\"x\": 1}\n");
  CHECK(output->times_from == 0);
  CHECK(output->times == "start 3 1 1\n9 2 2\n");
  std::ofstream(s.dir / "trial_w" / "stdout.times", std::ios::app) << "18 3 3\n";
  std::ofstream(s.dir / "trial_w" / "stdout.log", std::ios::app) << "{\"x\": 2}\n";
  output = agent.next(true);
  REQUIRE(output);
  CHECK(output->kind == Kind::kOutput);
  CHECK(output->from == 9);
  CHECK(output->data == "{\"x\": 2}\n");
  CHECK(output->times_from == 18);
  CHECK(output->times == "18 3 3\n");
  CHECK_FALSE(agent.next(true, 300));  // and nothing more
  ::kill(other, SIGKILL);
  auto gone = agent.next(true);
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->id == "w");
  CHECK(gone->supervisor == other);
  CHECK(gone->status == -1);  // (not the agent's child: its status is not the agent's to know)
  ::waitpid(other, nullptr, 0);
  // One that is gone already is said gone at once; a watch that is not one is refused.
  agent.send(exec::agent_watch_request("x", 1, (s.dir / "trial_w").string(), other, 0, 0, 0));
  gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->id == "x");
  agent.send(exec::agent_watch_request("y", 1, "relative", 1, 0, 0, 0));
  auto error = agent.next();
  REQUIRE(error);
  CHECK(error->kind == Kind::kError);
  CHECK(error->error.find("bad watch request") != std::string::npos);
  CHECK(error->op == "watch");  // (so that a launch waiting for its answer does not take it)
  CHECK(error->id == "y");
  agent.send(R"({"op":5,"id":"z"})");  // (not a string: once a crash of the agent)
  error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("not a request") != std::string::npos);
  agent.send(R"({"op":"watch","id":"z"})");
  error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("bad watch request") != std::string::npos);
}

TEST_CASE("tune-agent remote watches a supervisor only if its start time is the one asked",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  fs::create_directories(s.dir / "trial_w");
  pid_t other = stand_in_supervisor();
  uint64_t started = util::process_start_ticks(other);
  REQUIRE(started > 0);
  // Another start time: the supervisor asked for ended, and another process took its pid
  // (it is not watched, so it can never be signalled through the watch).
  agent.send(
      exec::agent_watch_request("w", 1, (s.dir / "trial_w").string(), other, started + 1, 0, 0));
  auto gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->supervisor == other);
  agent.send(exec::agent_signal_request("w", 1, other, true));
  auto refused = agent.next();
  REQUIRE(refused);
  CHECK(refused->kind == Kind::kError);
  int status = 0;
  CHECK(::waitpid(other, &status, WNOHANG) == 0);  // (it runs on, unsignalled)
  // Its own start time: watched.
  agent.send(exec::agent_watch_request("w", 1, (s.dir / "trial_w").string(), other, started, 0, 0));
  auto watching = agent.next();
  REQUIRE(watching);
  CHECK(watching->kind == Kind::kWatching);
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
}

TEST_CASE("tune-agent remote: a watched trial dir that goes away is said unwatched",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  fs::create_directories(s.dir / "trial_v");
  pid_t other = stand_in_supervisor();
  agent.send(exec::agent_watch_request("v", 1, (s.dir / "trial_v").string(), other, 0, 0, 0));
  auto watching = agent.next();
  REQUIRE(watching);
  CHECK(watching->kind == Kind::kWatching);
  // Replaced by a new dir of the same name: the watch would never see its output again.
  fs::remove_all(s.dir / "trial_v");
  fs::create_directories(s.dir / "trial_v");
  auto unwatched = agent.next();
  REQUIRE(unwatched);
  CHECK(unwatched->kind == Kind::kUnwatched);
  CHECK(unwatched->id == "v");
  CHECK(unwatched->error.find("removed or moved") != std::string::npos);
  ::kill(other, SIGKILL);
  ::waitpid(other, nullptr, 0);
  CHECK_FALSE(agent.next(true, 300));  // (its supervisor is no longer watched either)
}

TEST_CASE("agent event lines that are not the agent's are refused", "[remote_agent]") {
  CHECK_FALSE(exec::parse_agent_event("hello"));
  CHECK_FALSE(exec::parse_agent_event("[1,2]"));
  CHECK_FALSE(exec::parse_agent_event(R"({"event":"dance"})"));
  CHECK_FALSE(exec::parse_agent_event(R"({"event":"gone","supervisor":99999999999})"));
  CHECK_FALSE(exec::parse_agent_event(R"({"event":"launched","offset":-5})"));
  auto e = exec::parse_agent_event(R"({"event":"gone","id":7,"attempt":"x","supervisor":null})");
  REQUIRE(e);  // wrong types read as absent
  CHECK(e->id.empty());
  CHECK(e->attempt == 0);
  CHECK(e->supervisor == -1);
  // An output event's bytes are taken only whole and well formed: else it is a bare "output"
  // (the driver reads the file itself).
  auto out = [](const std::string& fields) {
    return exec::parse_agent_event(R"({"event":"output","id":"a","attempt":1,)" + fields + "}");
  };
  e = out(R"("size":3,"from":0,"data":"YWJj","times_from":4,"times":"")");
  REQUIRE(e);
  CHECK((e->from == 0 && e->data == "abc" && e->times_from == 4 && e->times.empty()));
  for (const char* bad : {R"("size":3,"from":0,"data":"YWJ","times_from":0,"times":"")",
                          R"("size":3,"from":-2,"data":"YWJj","times_from":0,"times":"")",
                          R"("size":3,"from":0,"data":"YWJj","times":"")",
                          R"("size":3,"from":0,"data":"YWJj","times_from":0,"times":7)",
                          R"("size":3,"from":"0","data":"YWJj","times_from":0,"times":"")"}) {
    e = out(bad);
    REQUIRE(e);
    CHECK(e->kind == Kind::kOutput);
    CHECK(e->from == -1);
    CHECK(e->data.empty());
  }
  // A file request's answer names its request, or is no answer.
  e = exec::parse_agent_event(R"({"event":"done","req":12,"error":"refused"})");
  REQUIRE(e);
  CHECK((e->kind == Kind::kDone && e->req == 12 && e->error == "refused"));
  CHECK_FALSE(exec::parse_agent_event(R"({"event":"done"})"));
  CHECK_FALSE(exec::parse_agent_event(R"({"event":"done","req":"12"})"));
  CHECK_FALSE(exec::parse_agent_event(R"({"event":"done","req":-1})"));
}

TEST_CASE("tune-supervisor runs nothing without a nonce on stdin", "[remote_agent]") {
  Scratch s;
  auto args = supervisor_args(s, "trial_g", {"/bin/sh", "-c", "echo ran"});
  std::vector<char*> argv{const_cast<char*>(TUNE_TEST_SUPERVISOR)};
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0), ::dup2(null_fd, 1), ::dup2(null_fd, 2);
    ::execv(TUNE_TEST_SUPERVISOR, argv.data());
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK_FALSE(fs::exists(s.dir / "trial_g" / "stdout.log"));
  CHECK_FALSE(fs::exists(s.dir / "trial_g.exit.json"));
}

TEST_CASE("tune-supervisor --adopt moves a checkpoint from a temp dir on another filesystem",
          "[remote_agent]") {
  Scratch s;  // (under /tmp)
  ShmDir shm("tune-adopt");
  fs::path tmp = shm.dir;
  struct stat a {
  }, b{};
  REQUIRE(::stat(tmp.c_str(), &a) == 0);
  REQUIRE(::stat(s.dir.c_str(), &b) == 0);
  if (a.st_dev == b.st_dev) WARN("/dev/shm and /tmp are one filesystem here: a rename is tested");
  fs::create_directories(s.dir / "trial" / "checkpoint_000001");  // (a leftover: replaced)
  fs::path ck = tmp / "ck";
  fs::create_directories(ck / "sub");
  std::ofstream(ck / "sub" / "state.json") << "{\"i\": 1}";
  std::ofstream(ck / "weights.bin") << std::string(3 << 20, 'w');
  fs::create_symlink("weights.bin", ck / "latest");
  {  // a sparse file of 1 GiB with 4 KiB of data in its middle: copied as that
    int fd = ::open((ck / "sparse.bin").c_str(), O_WRONLY | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 1 << 30) == 0);
    REQUIRE(::pwrite(fd, std::string(4096, 's').data(), 4096, 1 << 29) == 4096);
    ::close(fd);
  }
  std::string out = (s.dir / "out.txt").string();
  std::string cmd = "TMPDIR=" + tmp.string() + " " + TUNE_TEST_SUPERVISOR + " --adopt " +
                    (s.dir / "trial").string() + " " + ck.string() + " checkpoint_000001 > " + out +
                    " 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  CHECK(read(out).find_first_not_of('\n') == std::string::npos);  // (at most newlines)
  fs::path moved = s.dir / "trial" / "checkpoint_000001";
  CHECK(read(moved / "sub" / "state.json") == "{\"i\": 1}");
  CHECK(fs::file_size(moved / "weights.bin") == 3u << 20);
  CHECK(fs::is_symlink(moved / "latest"));
  CHECK(fs::read_symlink(moved / "latest") == "weights.bin");
  struct stat sparse {};
  REQUIRE(::stat((moved / "sparse.bin").c_str(), &sparse) == 0);
  CHECK(sparse.st_size == 1 << 30);
  CHECK(sparse.st_blocks * 512 < (1 << 20));  // (not written out)
  std::string middle(4096, '\0');
  int fd = ::open((moved / "sparse.bin").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  CHECK(::pread(fd, middle.data(), 4096, 1 << 29) == 4096);
  ::close(fd);
  CHECK(middle == std::string(4096, 's'));
  CHECK_FALSE(fs::exists(ck));  // (moved: gone from the temp dir)
  CHECK_FALSE(fs::exists(s.dir / "trial" / "checkpoint_000001.partial"));
  // Outside the trial dir and the temp dir: refused, nothing moved.
  fs::create_directories(s.dir / "elsewhere");
  cmd = "TMPDIR=" + tmp.string() + " " + TUNE_TEST_SUPERVISOR + " --adopt " +
        (s.dir / "trial").string() + " " + (s.dir / "elsewhere").string() +
        " checkpoint_000002 > " + out + " 2>&1";
  CHECK(std::system(cmd.c_str()) != 0);
  CHECK(read(out).find("refused") != std::string::npos);
  CHECK(fs::exists(s.dir / "elsewhere"));
}

TEST_CASE("tune-agent remote moves and deletes checkpoints in children while it goes on",
          "[remote_agent]") {
  Scratch s;  // (under /tmp)
  ShmDir shm("tune-agent-ops");
  fs::path tmp = shm.dir;
  // A checkpoint of 64 MiB in the temp dir, on another filesystem than the trial dir: copied
  // (and fsynced), which takes a while; one in the trial dir itself: renamed.
  fs::path big = tmp / "big";
  make_big_checkpoint(big, 64);
  fs::path trial = s.dir / "trial_a";
  fs::create_directories(trial / "ck2");
  std::ofstream(trial / "ck2" / "state.json") << "{\"i\": 2}";
  fs::create_directories(s.dir / "elsewhere");
  fs::create_directories(s.dir / "trial_c");
  const char* old_tmp = std::getenv("TMPDIR");
  std::string saved = old_tmp ? old_tmp : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  Agent agent(s.dir / "attempts.log");
  old_tmp ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  REQUIRE(agent.next());  // (ready)
  agent.send(
      exec::agent_adopt_request(1, trial.string(), big.string(), "checkpoint_000001", false));
  // Its child is held (SIGSTOP) while it copies, and let go only once the rest has happened.
  pid_t copier = first_child(agent.pid);
  REQUIRE(::kill(copier, SIGSTOP) == 0);
  // (the same trial dir: waits for the first; another one, outside both roots: refused at once)
  agent.send(exec::agent_adopt_request(2, trial.string(), "ck2", "checkpoint_000002", false));
  agent.send(exec::agent_adopt_request(3, (s.dir / "trial_c").string(),
                                       (s.dir / "elsewhere").string(), "checkpoint_000001", false));
  // A launch meanwhile is answered, and its trial ends, while the copy is under way.
  agent.send(exec::agent_launch_request(launch(s, "b", "trial_b", {"true"})));
  std::vector<std::string> order;
  std::map<int64_t, std::string> errors;
  auto take = [&](size_t until) {
    while (order.size() < until) {
      auto e = agent.next(false, 60000);
      REQUIRE(e);
      if (e->kind == Kind::kDone) {
        order.push_back("done " + std::to_string(e->req));
        errors[e->req] = e->error;
      } else {
        order.push_back(e->kind == Kind::kLaunched ? "launched"
                        : e->kind == Kind::kGone   ? "gone"
                                                   : "other");
      }
    }
  };
  take(3);
  std::sort(order.begin(), order.end());
  CHECK(order == std::vector<std::string>{"done 3", "gone", "launched"});
  REQUIRE(::kill(copier, SIGCONT) == 0);
  take(5);
  CHECK(order[3] == "done 1");
  CHECK(order[4] == "done 2");  // (the same dir: in the order asked)
  CHECK(errors[1] == "");
  CHECK(errors[2] == "");
  CHECK(errors[3].find("refused") != std::string::npos);
  CHECK(fs::file_size(trial / "checkpoint_000001" / "weights.bin") == 64u << 20);
  CHECK_FALSE(fs::exists(big));
  CHECK(read(trial / "checkpoint_000002" / "state.json") == "{\"i\": 2}");
  CHECK_FALSE(fs::exists(trial / "ck2"));
  CHECK(fs::exists(s.dir / "elsewhere"));
  // Said again (a driver that died before the answer): done, nothing moved twice.
  agent.send(exec::agent_adopt_request(4, trial.string(), "ck2", "checkpoint_000002", true));
  auto again = agent.next();
  REQUIRE(again);
  CHECK(again->kind == Kind::kDone);
  CHECK(again->req == 4);
  CHECK(again->error == "");
  CHECK(fs::exists(trial / "checkpoint_000002" / "state.json"));
  // Without `again` the same is an error: the reported dir is gone.
  agent.send(exec::agent_adopt_request(5, trial.string(), "ck2", "checkpoint_000002", false));
  auto not_again = agent.next();
  REQUIRE(not_again);
  CHECK(not_again->req == 5);
  CHECK(not_again->error.find("does not exist") != std::string::npos);
  // Deleted; a name that is not one is refused; a request missing its fields is answered.
  agent.send(exec::agent_rm_request(6, trial.string(), "checkpoint_000001"));
  agent.send(exec::agent_rm_request(7, trial.string(), "../elsewhere"));
  agent.send("{\"op\":\"rm\",\"req\":8}");
  std::map<int64_t, std::string> rm;
  for (int i = 0; i < 3; ++i) {
    auto e = agent.next();
    REQUIRE(e);
    REQUIRE(e->kind == Kind::kDone);
    rm[e->req] = e->error;
  }
  CHECK(rm.at(6) == "");
  CHECK_FALSE(fs::exists(trial / "checkpoint_000001"));
  CHECK(rm.at(7).find("refused name") != std::string::npos);
  CHECK(fs::exists(s.dir / "elsewhere"));
  CHECK(rm.at(8).find("bad request") != std::string::npos);
}

TEST_CASE("tune-agent remote kills a file operation's child that is silent too long",
          "[remote_agent]") {
  Scratch s;
  ShmDir shm("tune-agent-silent");
  fs::path tmp = shm.dir;
  fs::path big = tmp / "big";
  make_big_checkpoint(big, 64);
  fs::path trial = s.dir / "trial_a";
  fs::create_directories(trial);
  // (a copy says something every 2 s; here a silence of 1 s is enough to be killed)
  ::setenv("TMPDIR", tmp.c_str(), 1);
  ::setenv("TUNE_TEST_AGENT_SILENT_MS", "1000", 1);
  Agent agent(s.dir / "attempts.log");
  ::unsetenv("TUNE_TEST_AGENT_SILENT_MS");
  ::unsetenv("TMPDIR");
  REQUIRE(agent.next());  // (ready)
  agent.send(
      exec::agent_adopt_request(1, trial.string(), big.string(), "checkpoint_000001", false));
  pid_t child = first_child(agent.pid);
  // (the copy held halfway, so that it leaves checkpoint_000001.partial; the child stopped: as
  // stuck, it says nothing)
  pid_t copier = first_child(child);
  REQUIRE(::kill(copier, SIGSTOP) == 0);
  REQUIRE(::kill(child, SIGSTOP) == 0);
  auto done = agent.next(false, 20000);
  REQUIRE(done);
  CHECK(done->kind == Kind::kDone);
  CHECK(done->req == 1);
  CHECK(done->error.find("said nothing for 1000 ms (stopped or stuck): killed") !=
        std::string::npos);
  CHECK(::kill(child, 0) != 0);  // (gone, and reaped)
  // What the killed copy left is deleted; nothing was moved.
  for (int i = 0; i < 500 && fs::exists(trial / "checkpoint_000001.partial"); ++i) ::usleep(10000);
  CHECK_FALSE(fs::exists(trial / "checkpoint_000001.partial"));
  CHECK_FALSE(fs::exists(trial / "checkpoint_000001"));
  CHECK(fs::exists(big / "weights.bin"));
  // It goes on taking requests.
  fs::create_directories(trial / "ck");
  agent.send(exec::agent_adopt_request(2, trial.string(), "ck", "checkpoint_000002", false));
  auto next = agent.next();
  REQUIRE(next);
  CHECK(next->req == 2);
  CHECK(next->error == "");
  CHECK(fs::is_directory(trial / "checkpoint_000002"));
  // (the copier dies with its parent, unless it was stopped before it asked to: then it stayed,
  // stopped, after the tests)
  ::kill(copier, SIGKILL);
}

namespace {

// Waits (up to 5 s) until `p` holds `want`; what it holds then.
std::string wait_for_text(const fs::path& p, const std::string& want) {
  std::string got;
  for (int i = 0; i < 500; ++i) {
    got = read(p);
    if (got.find(want) != std::string::npos) break;
    ::usleep(10000);
  }
  return got;
}

// A stdin request as the driver sends it: numbered (from 1, rising) in its run.
std::optional<std::string> stdin_request(const std::string& id, int attempt, const std::string& dir,
                                         const std::string& line, uint64_t n = 0,
                                         const std::string& run = "a1b2c3") {
  static uint64_t next = 1000;
  return exec::agent_stdin_request(id, attempt, dir, line, run, n ? n : ++next);
}

bool process_runs(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == 0;  // (a child of the test)
}

}  // namespace

TEST_CASE("tune-agent remote stops only a supervisor it started or watches, of that attempt",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  agent.send(exec::agent_launch_request(launch(s, "a", "trial_a", {"sleep", "30"})));
  auto launched = agent.next();
  REQUIRE(launched);
  REQUIRE(launched->kind == Kind::kLaunched);
  int sup = launched->supervisor;
  // Another attempt's number, or a process the agent neither started nor watches: refused,
  // named, and nothing is signalled (the stand-in lives on).
  pid_t other = stand_in_supervisor();
  agent.send(exec::agent_signal_request("a", 2, sup, true));
  agent.send(exec::agent_signal_request("b", 1, other, true));
  for (auto [id, attempt] : {std::pair{"a", 2}, std::pair{"b", 1}}) {
    auto error = agent.next();
    REQUIRE(error);
    CHECK(error->kind == Kind::kError);
    CHECK(error->op == "signal");
    CHECK(error->id == id);
    CHECK(error->attempt == attempt);  // (so that it is never taken for another attempt's)
    CHECK(error->error.find("no supervisor") != std::string::npos);
  }
  CHECK(process_runs(other));
  CHECK_FALSE(agent.next(false, 300));  // (trial a runs on)
  // Its own: stopped (SIGTERM, the trial's grace is 1 s), and said gone.
  agent.send(exec::agent_signal_request("a", 1, sup, false));
  auto gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->supervisor == sup);
  CHECK(read(s.dir / "trial_a.exit.json").find("driver_stop") != std::string::npos);
  // A watched one (started by an earlier agent): through its pidfd.
  agent.send(exec::agent_watch_request("b", 1, s.dir.string(), other, 0, 0, 0));
  REQUIRE(agent.next()->kind == Kind::kWatching);
  agent.send(exec::agent_signal_request("b", 1, other, false));
  gone = agent.next();
  REQUIRE(gone);
  CHECK(gone->kind == Kind::kGone);
  CHECK(gone->supervisor == other);
  int status = 0;
  REQUIRE(::waitpid(other, &status, 0) == other);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM));
}

TEST_CASE("tune-agent remote writes lines to a step-mode attempt's stdin, never waiting on it",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  auto reader =
      launch(s, "r", "trial_r", {"/bin/sh", "-c", "while read l; do echo \"got $l\"; done"});
  reader.fifo = true;
  // Sent with the launch, before the FIFO is there: looked for until it is.
  agent.send(exec::agent_launch_request(reader));
  std::string dir = (s.dir / "trial_r").string();
  agent.send(*stdin_request("r", 1, dir, "one"));
  agent.send(*stdin_request("r", 1, dir, "two"));
  REQUIRE(agent.next()->kind == Kind::kLaunched);
  CHECK(wait_for_text(s.dir / "trial_r" / "stdout.log", "got two").find("got one\ngot two\n") !=
        std::string::npos);
  CHECK_FALSE(agent.next(false, 100));
  CHECK(agent.written["r#1"] == 2);  // (each said once it went)
  // Not UTF-8, or with a newline in it: not for the agent (the driver uses its shell).
  CHECK_FALSE(stdin_request("r", 1, dir, "a\nb"));
  CHECK_FALSE(stdin_request("r", 1, dir, "\xff"));

  // A trial that reads nothing: 200 KiB of lines do not fit in its pipe, and the agent answers
  // all the same; past 1 MiB waiting, a line is refused (the lines queued before stay queued).
  auto idle = launch(s, "i", "trial_i", {"sleep", "30"});
  idle.fifo = true;
  agent.send(exec::agent_launch_request(idle));
  REQUIRE(agent.next()->kind == Kind::kLaunched);
  std::string dir_i = (s.dir / "trial_i").string();
  auto line = [](int i) {  // 1,023 bytes, numbered
    std::string n = std::to_string(i);
    return n + std::string(1023 - n.size(), 'k');
  };
  for (int i = 0; i < 200; ++i) agent.send(*stdin_request("i", 1, dir_i, line(i)));
  agent.send(exec::agent_signal_request("i", 7, 1, false));  // (any request: its answer)
  auto answer = agent.next(false, 2000);
  REQUIRE(answer);
  CHECK(answer->op == "signal");
  for (int i = 200; i < 1100; ++i) agent.send(*stdin_request("i", 1, dir_i, line(i)));
  int refusals = 0;
  while (auto refused = agent.next(false, 500)) {
    CHECK(refused->op == "stdin");
    CHECK(refused->id == "i");
    CHECK(refused->error.find("bytes wait for it") != std::string::npos);
    CHECK_FALSE(refused->stdin_lost);  // (this line dropped; later ones may go)
    ++refusals;
  }
  int fifo = ::open((s.dir / "trial_i" / "stdin.fifo").c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(fifo >= 0);
  int in_pipe = ::fcntl(fifo, F_GETPIPE_SZ) / 1024;
  CHECK(refusals == 1100 - in_pipe - 1024);  // (1,024 lines of 1,024 bytes queued)
  // Read as the trial would: every line not refused, in order.
  std::string got;
  for (int i = 0; i < 500 && got.size() < size_t(1100 - refusals) * 1024; ++i) {
    char chunk[65536];
    ssize_t n = ::read(fifo, chunk, sizeof chunk);
    if (n > 0)
      got.append(chunk, static_cast<size_t>(n));
    else
      ::usleep(10000);
  }
  ::close(fifo);
  REQUIRE(got.size() == size_t(1100 - refusals) * 1024);
  for (int i = 0; i < 1100 - refusals; ++i)
    REQUIRE(got.substr(size_t(i) * 1024, 1024) == line(i) + "\n");
  CHECK_FALSE(agent.next(false, 300));
  CHECK(agent.written["i#1"] == 1100 - refusals);

  // A FIFO nobody has opened yet (its supervisor has made it and is about to): the line waits
  // for its reader (it was refused at once, "nobody reads it", and a step-mode trial waited for
  // its command for ever).
  fs::create_directories(s.dir / "trial_y");
  REQUIRE(::mkfifo((s.dir / "trial_y" / "stdin.fifo").c_str(), 0600) == 0);
  agent.send(*stdin_request("y", 1, (s.dir / "trial_y").string(), "late"));
  CHECK_FALSE(agent.next(false, 300));
  int late = ::open((s.dir / "trial_y" / "stdin.fifo").c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(late >= 0);
  std::string heard;
  for (int i = 0; i < 200 && heard.find('\n') == std::string::npos; ++i) {
    char chunk[64];
    ssize_t n = ::read(late, chunk, sizeof chunk);
    if (n > 0)
      heard.append(chunk, static_cast<size_t>(n));
    else
      ::usleep(10000);
  }
  ::close(late);
  CHECK(heard == "late\n");

  // Something else in the FIFO's place: a link is not followed, a file is not written to;
  // no FIFO at all: refused after a second.
  fs::create_directories(s.dir / "trial_x");
  std::ofstream(s.dir / "target") << "untouched";
  fs::create_symlink(s.dir / "target", s.dir / "trial_x" / "stdin.fifo");
  std::string dir_x = (s.dir / "trial_x").string();
  agent.send(*stdin_request("x", 1, dir_x, "line"));
  auto error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("symbolic link") != std::string::npos);
  CHECK(error->stdin_lost);  // (no line can go: the driver fails the attempt)
  fs::remove(s.dir / "trial_x" / "stdin.fifo");
  std::ofstream(s.dir / "trial_x" / "stdin.fifo") << "a file";
  agent.send(*stdin_request("x", 1, dir_x, "line"));
  error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("not a FIFO") != std::string::npos);
  CHECK(error->stdin_lost);
  CHECK(read(s.dir / "target") == "untouched");
  CHECK(read(s.dir / "trial_x" / "stdin.fifo") == "a file");
  fs::remove(s.dir / "trial_x" / "stdin.fifo");
  auto t0 = std::chrono::steady_clock::now();
  agent.send(*stdin_request("x", 2, dir_x, "line"));
  error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("not there") != std::string::npos);
  CHECK(error->stdin_lost);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(900));
  // (the two trials stopped, each said gone)
  for (const char* id : {"r", "i"})
    for (const auto& e : agent.relayed)
      if (e.kind == Kind::kStart && e.id == id)
        agent.send(exec::agent_signal_request(id, 1, e.supervisor, true));
  int gone = 0;
  while (auto e = agent.next(false, 3000))
    if (e->kind == Kind::kGone) ++gone;
  CHECK(gone == 2);
}

TEST_CASE("tune-agent remote writes each numbered stdin line once, whoever sends it",
          "[remote_agent]") {
  Scratch s;
  Agent agent(s.dir / "attempts.log");
  REQUIRE(agent.next());
  auto reader =
      launch(s, "d", "trial_d", {"/bin/sh", "-c", "while read l; do echo \"got $l\"; done"});
  reader.fifo = true;
  agent.send(exec::agent_launch_request(reader));
  REQUIRE(agent.next()->kind == Kind::kLaunched);
  std::string dir = (s.dir / "trial_d").string();
  fs::path out = s.dir / "trial_d" / "stdout.log";
  // Line 1 sent again (its "written" lost with a cut link, say), also after line 2 went: it
  // went once; each is said written. Another run's (a resumed driver's) line 1 goes.
  agent.send(*stdin_request("d", 1, dir, "one", 1, "feed"));
  agent.send(*stdin_request("d", 1, dir, "one", 1, "feed"));
  agent.send(*stdin_request("d", 1, dir, "two", 2, "feed"));
  agent.send(*stdin_request("d", 1, dir, "one", 1, "feed"));
  agent.send(*stdin_request("d", 1, dir, "other", 1, "beef"));
  CHECK(wait_for_text(out, "got other") == "got one\ngot two\ngot other\n");
  CHECK_FALSE(agent.next(false, 100));
  CHECK(agent.written["d#1"] == 5);
  CHECK(agent.written_n == std::vector<uint64_t>{1, 1, 2, 1, 1});
  CHECK(read(s.dir / "trial_d" / "stdin.sent") == agent::stdin_record_text({"beef", 1}));

  // What another writer (an agent before this one, the host's shell) recorded is believed.
  std::ofstream(s.dir / "trial_d" / "stdin.sent") << agent::stdin_record_text({"beef", 5});
  agent.send(*stdin_request("d", 1, dir, "four", 4, "beef"));
  agent.send(*stdin_request("d", 1, dir, "six", 6, "beef"));
  CHECK(wait_for_text(out, "got six").ends_with("got other\ngot six\n"));
  // While another writer holds the record's lock, a line waits for it (the agent answers).
  int held = ::open((s.dir / "trial_d" / "stdin.sent").c_str(), O_RDWR);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  agent.send(*stdin_request("d", 1, dir, "seven", 7, "beef"));
  agent.send(exec::agent_signal_request("d", 9, 1, false));  // (any request: its answer)
  auto answer = agent.next(false, 2000);
  REQUIRE(answer);
  CHECK(answer->op == "signal");
  ::usleep(300000);  // (time for the trial to echo a line it got)
  CHECK(read(out).find("seven") == std::string::npos);
  ::flock(held, LOCK_UN);
  ::close(held);
  CHECK(wait_for_text(out, "got seven").ends_with("got six\ngot seven\n"));
  CHECK_FALSE(agent.next(false, 100));
  CHECK(agent.written["d#1"] == 8);

  // A record naming a later line than this one (a trial that wrote it) is said with the
  // number it gave: the driver, which never sent that line, fails the attempt.
  std::ofstream(s.dir / "trial_d" / "stdin.sent") << agent::stdin_record_text({"beef", 99});
  agent.send(*stdin_request("d", 1, dir, "eight", 8, "beef"));
  CHECK_FALSE(agent.next(false, 300));
  CHECK(agent.written_n.back() == 8);
  CHECK(agent.written_already.back() == 99);

  // A link in the record's place is not written through: no line can go, and the driver is
  // told so.
  fs::create_directories(s.dir / "trial_e");
  REQUIRE(::mkfifo((s.dir / "trial_e" / "stdin.fifo").c_str(), 0600) == 0);
  int fifo = ::open((s.dir / "trial_e" / "stdin.fifo").c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(fifo >= 0);
  std::ofstream(s.dir / "target") << "untouched";
  fs::create_symlink(s.dir / "target", s.dir / "trial_e" / "stdin.sent");
  agent.send(*stdin_request("e", 1, (s.dir / "trial_e").string(), "line", 1, "beef"));
  auto error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("stdin.sent") != std::string::npos);
  CHECK(error->stdin_lost);
  CHECK(error->n == 1);
  CHECK(read(s.dir / "target") == "untouched");
  // A hard link to a file elsewhere: the same.
  fs::remove(s.dir / "trial_e" / "stdin.sent");
  fs::create_hard_link(s.dir / "target", s.dir / "trial_e" / "stdin.sent");
  agent.send(*stdin_request("e", 1, (s.dir / "trial_e").string(), "line", 2, "beef"));
  error = agent.next();
  REQUIRE(error);
  CHECK(error->error.find("not a plain file of its own") != std::string::npos);
  CHECK(error->stdin_lost);
  CHECK(read(s.dir / "target") == "untouched");
  char buf[16];
  CHECK(::read(fifo, buf, sizeof buf) <= 0);
  ::close(fifo);
  // A request with a run that is not hex digits is refused.
  agent.send(R"({"op":"stdin","id":"d","attempt":1,"dir":")" + dir +
             R"(","line":"x","run":"a b","n":3})");
  error = agent.next();
  REQUIRE(error);
  CHECK(error->error.starts_with("bad stdin request"));
  CHECK_FALSE(error->stdin_lost);

  for (const auto& e : agent.relayed)
    if (e.kind == Kind::kStart && e.id == "d")
      agent.send(exec::agent_signal_request("d", 1, e.supervisor, true));
  bool gone = false;
  while (auto e = agent.next(false, 3000))
    if (e->kind == Kind::kGone) gone = true;
  CHECK(gone);
}
