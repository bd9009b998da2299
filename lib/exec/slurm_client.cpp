#include "exec/slurm_client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/clock.hpp"
#include "util/process.hpp"

extern char** environ;

namespace tune::exec {

namespace {

using util::mono;

std::string trim(std::string_view s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return "";
  size_t b = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(a, b - a + 1));
}

// Slurm's message: the last non-empty line of stderr (else stdout), without "sbatch: error: ".
std::string message_of(const Captured& c, std::string_view cmd) {
  std::string text = trim(c.err.empty() ? c.out : c.err);
  if (auto nl = text.rfind('\n'); nl != std::string::npos) text = trim(text.substr(nl + 1));
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  if (text.empty()) text = "exit status " + std::to_string(c.status);
  return std::string(cmd) + ": " + text;
}

}  // namespace

JobState parse_job_state(std::string_view s) {
  if (s == "PENDING") return JobState::kPending;
  if (s == "RUNNING" || s == "COMPLETING" || s == "CONFIGURING" || s == "SUSPENDED" ||
      s == "STOPPED" || s == "RESIZING" || s == "SIGNALING" || s == "STAGE_OUT")
    return JobState::kRunning;
  if (s == "REQUEUED" || s == "REQUEUE_FED" || s == "REQUEUE_HOLD" || s == "RESV_DEL_HOLD")
    return JobState::kRequeued;
  if (s == "COMPLETED") return JobState::kCompleted;
  if (s == "FAILED" || s == "OUT_OF_MEMORY" || s == "BOOT_FAIL" || s == "DEADLINE" ||
      s == "SPECIAL_EXIT" || s == "REVOKED")
    return JobState::kFailed;
  if (s == "CANCELLED") return JobState::kCancelled;
  if (s == "TIMEOUT") return JobState::kTimeout;
  if (s == "PREEMPTED") return JobState::kPreempted;
  if (s == "NODE_FAIL") return JobState::kNodeFail;
  return JobState::kUnknown;
}

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kRequeued:
      return "REQUEUED";
    case JobState::kCompleted:
      return "COMPLETED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kTimeout:
      return "TIMEOUT";
    case JobState::kPreempted:
      return "PREEMPTED";
    case JobState::kNodeFail:
      return "NODE_FAIL";
    case JobState::kUnknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

bool job_ended(JobState s) {
  return s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled ||
         s == JobState::kTimeout || s == JobState::kPreempted || s == JobState::kNodeFail;
}

std::vector<JobInfo> parse_squeue(std::string_view text) {
  std::vector<JobInfo> jobs;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    std::vector<std::string> f;
    size_t from = 0;
    for (int i = 0; i < 4; ++i) {
      size_t bar = line.find('|', from);
      if (bar == std::string_view::npos) break;
      f.push_back(trim(line.substr(from, bar - from)));
      from = bar + 1;
    }
    if (f.size() != 4) continue;
    f.push_back(trim(line.substr(from)));
    if (f[0].empty() || f[0].find_first_not_of("0123456789_[]-") != std::string::npos) continue;
    JobInfo j;
    j.id = f[0];
    j.state_text = f[1];
    j.state = parse_job_state(f[1]);
    j.reason = f[2];
    j.comment = f[3];
    j.name = f[4];
    jobs.push_back(std::move(j));
  }
  return jobs;
}

std::vector<JobInfo> parse_sacct(std::string_view text) {
  std::vector<JobInfo> jobs;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    std::string_view f[4];
    size_t from = 0;
    int n = 0;
    for (; n < 3; ++n) {
      size_t bar = line.find('|', from);
      if (bar == std::string_view::npos) break;
      f[n] = line.substr(from, bar - from);
      from = bar + 1;
    }
    if (n != 3) continue;
    f[3] = line.substr(from);
    std::string id = trim(f[0]);
    // Whole jobs only (-X; a step's "123.batch" or an array's "123_4" is not one of ours).
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) continue;
    JobInfo j;
    j.id = id;
    std::string state = trim(f[1]);
    j.state_text = state.substr(0, state.find(' '));  // "CANCELLED by 1000"
    j.state = parse_job_state(j.state_text);
    std::string code = trim(f[2]);
    size_t colon = code.find(':');
    auto number = [](const std::string& s) -> std::optional<int> {
      if (s.empty() || s.size() > 3 || s.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
      return std::stoi(s);
    };
    if (colon != std::string::npos) {
      j.exit_code = number(code.substr(0, colon));
      j.signal = number(code.substr(colon + 1));
      if (j.signal == 0) j.signal.reset();
    }
    j.name = trim(f[3]);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

bool sacct_disabled(std::string_view message) {
  return message.find("accounting storage is disabled") != std::string_view::npos;
}

Result<Captured> run_captured(const std::vector<std::string>& argv, double timeout_s) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return fail("pipe: ", std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]), ::close(out[1]);
    return fail("pipe: ", std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_t attr;
  util::init_spawn_attrs(attr, POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]), ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]), ::close(err[0]);
    return fail(argv[0], ": ", rc == ENOENT ? "not found on PATH" : std::strerror(rc));
  }
  Captured c;
  double deadline = mono() + timeout_s;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  bool timed_out = false;
  while (open > 0) {
    double left = deadline - mono();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left * 1000) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
        continue;
      }
      std::string& to = i == 0 ? c.out : c.err;
      if (to.size() < (4u << 20)) to.append(buf, static_cast<size_t>(got));
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return fail(argv[0], ": no answer in ", std::to_string(static_cast<int>(timeout_s)),
                " s (killed)");
  c.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return c;
}

Result<std::string> CommandSlurmClient::submit(const std::vector<std::string>& args,
                                               const fs::path& script) {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(script.string());
  auto r = run_captured(argv, 60);
  if (!r) return std::unexpected(r.error());
  if (r->status != 0) return fail(message_of(*r, "sbatch"));
  // --parsable: "ID" or "ID;CLUSTER"
  std::string id = trim(r->out.substr(0, r->out.find_first_of(";\n")));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    return fail("sbatch: unexpected answer '", trim(r->out).substr(0, 80), "'");
  return id;
}

Result<void> CommandSlurmClient::test_only(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"sbatch", "--test-only"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--wrap=true");
  auto r = run_captured(argv, 60);
  if (!r) return std::unexpected(r.error());
  if (r->status != 0) return fail(message_of(*r, "sbatch --test-only"));
  return {};
}

Result<Accounting> CommandSlurmClient::accounting(const std::vector<std::string>& ids) {
  if (ids.empty()) return Accounting{};
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ",") + id;
  auto r = run_captured(
      {"sacct", "-n", "-P", "-X", "-j", list, "-o", "JobID,State,ExitCode,JobName"}, 60);
  if (!r) return std::unexpected(r.error());
  if (r->status != 0 || sacct_disabled(r->err)) {
    if (sacct_disabled(r->err) || sacct_disabled(r->out)) return Accounting{false, {}};
    return fail(message_of(*r, "sacct"));
  }
  return Accounting{true, parse_sacct(r->out)};
}

Result<std::vector<JobInfo>> CommandSlurmClient::queue() {
  auto r = run_captured({"squeue", "--me", "-h", "-t", "all", "-o", "%i|%T|%r|%k|%j"}, 60);
  if (!r) return std::unexpected(r.error());
  if (r->status != 0) return fail(message_of(*r, "squeue"));
  return parse_squeue(r->out);
}

Result<void> CommandSlurmClient::cancel(const std::vector<std::string>& ids, bool term_batch_only) {
  if (ids.empty()) return {};
  std::vector<std::string> argv = {"scancel", "--quiet"};
  if (term_batch_only) argv.insert(argv.end(), {"--batch", "--signal=TERM"});
  argv.insert(argv.end(), ids.begin(), ids.end());
  auto r = run_captured(argv, 60);
  if (!r) return std::unexpected(r.error());
  if (r->status != 0) return fail(message_of(*r, "scancel"));
  return {};
}

Result<std::string> CommandSlurmClient::start_step(const std::vector<std::string>& args,
                                                   const std::vector<std::string>& command,
                                                   const fs::path& log) {
  std::vector<std::string> argv = {"srun"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), command.begin(), command.end());
  // Detached: an srun that dies takes its step with it (Slurm ends the step at once), so the
  // step's srun must outlive a killed driver. Its pid and start time name it.
  auto pid = util::spawn_detached(argv, log);
  if (!pid) return std::unexpected(pid.error());
  return std::to_string(*pid) + ":" + std::to_string(util::process_start_ticks(*pid));
}

namespace {

// A step's srun as start_step named it: "PID:START" (START: its start time, so that a pid
// reused by another process is never taken for it).
struct SrunHandle {
  pid_t pid = 0;
  uint64_t start = 0;
};
SrunHandle parse_handle(const std::string& id) {
  SrunHandle h;
  size_t colon = id.find(':');
  h.pid = static_cast<pid_t>(std::atol(id.substr(0, colon).c_str()));
  if (colon != std::string::npos) h.start = std::strtoull(id.c_str() + colon + 1, nullptr, 10);
  return h;
}
// Whether the srun still runs: this driver's child not yet reaped, or (a re-attached step,
// started by an earlier driver) a process with that pid and start time.
bool srun_alive(const SrunHandle& h) {
  if (h.pid <= 0) return false;
  int status = 0;
  pid_t got = ::waitpid(h.pid, &status, WNOHANG);
  if (got == 0) return true;
  if (got == h.pid) return false;
  return h.start != 0 && util::process_start_ticks(h.pid) == h.start;
}

}  // namespace

std::vector<std::string> CommandSlurmClient::ended_steps(const std::vector<std::string>& ids) {
  std::vector<std::string> ended;
  for (const auto& id : ids)
    if (!srun_alive(parse_handle(id))) ended.push_back(id);
  return ended;
}

void CommandSlurmClient::signal_steps(const std::vector<std::string>& ids, int sig) {
  for (const auto& id : ids) {
    SrunHandle h = parse_handle(id);
    if (h.pid > 0 && h.start != 0 && util::process_start_ticks(h.pid) == h.start)
      ::kill(h.pid, sig);
  }
}

std::vector<StepInfo> parse_steps(std::string_view text) {
  std::vector<StepInfo> steps;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    size_t bar = line.find('|');
    if (bar == std::string::npos) continue;
    StepInfo s{line.substr(0, bar), trim(line.substr(bar + 1))};
    size_t dot = s.id.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == s.id.size() ||
        s.id.find('.', dot + 1) != std::string::npos ||
        s.id.find_first_not_of("0123456789.") != std::string::npos)
      continue;  // not JOBID.STEPID (a batch or extern step has a name for its number)
    steps.push_back(std::move(s));
  }
  return steps;
}

Result<std::vector<StepInfo>> CommandSlurmClient::job_steps() {
  auto r = run_captured({"squeue", "--me", "-h", "-s", "-o", "%i|%j"}, 60);
  if (!r) return std::unexpected(r.error());
  if (r->status != 0) return fail(message_of(*r, "squeue"));
  return parse_steps(r->out);
}

Result<void> CommandSlurmClient::cancel_steps(const std::vector<std::string>& ids, bool term) {
  if (ids.empty()) return {};
  std::vector<std::string> argv = {"scancel", "--quiet"};
  if (term) argv.push_back("--signal=TERM");
  argv.insert(argv.end(), ids.begin(), ids.end());
  auto r = run_captured(argv, 60);
  if (!r) return std::unexpected(r.error());
  if (r->status != 0) return fail(message_of(*r, "scancel"));
  return {};
}

}  // namespace tune::exec
