// tune-supervisor: runs one trial attempt so that it outlives the driver (a Slurm job's batch
// program; on the driver's machine and on SSH hosts tune-agent forks the same supervisor per
// attempt instead).
//
//   tune-supervisor TRIAL_DIR ATTEMPT LEASE_FILE ORPHAN_TIMEOUT_S GRACE_S CWD STDIN RECORD --
//   PROGRAM ARGS...
//
// Started by the driver in a new session, with the attempt's nonce (a secret the trial never
// sees) on its stdin (in a Slurm job: the job's key, from which it derives the nonce of this run
// of the job; see attempt_nonce below). With STDIN=fifo it makes TRIAL_DIR/stdin.fifo and keeps it
// open (a step-mode trial reads its commands there and never sees EOF); with STDIN=null the trial's
// stdin is /dev/null. It starts PROGRAM in its own process group with stdout/stderr appended to
// TRIAL_DIR/stdout.log and stderr.log (after an "=== attempt N ===" line when an earlier attempt
// wrote there), and when the trial's process ends it kills and reaps every process the attempt
// left (it is a child subreaper), then records the exit in RECORD atomically, with the nonce,
// its own pid and the trial's pid and start time (lib/agent/supervise.hpp). Its own argv names
// the trial dir and attempt, which is how a live supervisor is found again.
//
// Signals: SIGTERM or SIGINT = stop the trial (SIGTERM to its group, SIGKILL after GRACE_S);
// SIGUSR1 = kill it now. If LEASE_FILE's mtime is older than ORPHAN_TIMEOUT_S (the driver is
// gone), it stops the trial the same way and records that it did.
//
// On worker hosts the same binary does the file operations the driver needs there
// (remote_ops.hpp).
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "agent/nonce.hpp"
#include "agent/supervise.hpp"
#include "remote_ops.hpp"

namespace {

// What stdin holds, up to EOF (at most 256 bytes; nothing if stdin is a terminal).
std::string read_stdin() {
  std::string text;
  if (::isatty(0)) return text;
  char buf[128];
  for (;;) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(std::min<ssize_t>(n, 256 - ssize_t(text.size()))));
  }
  return text;
}

// A decimal number of at most 9 digits, or -1.
long decimal(const char* s) {
  if (!s || !*s || std::strlen(s) > 9 || std::strspn(s, "0123456789") != std::strlen(s)) return -1;
  return std::atol(s);
}

// The attempt's nonce from what stdin holds: the nonce itself (hex digits), or, in a Slurm job,
// `slurm-job:FIRST:JOBKEY`: the job's first attempt and its key, from which the nonce of this
// run of the job derives (its id and SLURM_RESTART_COUNT). This run is attempt FIRST + the
// restart count; an ATTEMPT argument saying otherwise is refused (nullopt, with a message).
std::optional<std::string> attempt_nonce(const std::string& in, const char* attempt) {
  std::string nonce;
  static constexpr std::string_view kSlurm = "slurm-job:";
  if (in.compare(0, kSlurm.size(), kSlurm) != 0) {
    for (char c : in)
      if (nonce.size() < 64 && c && std::strchr("0123456789abcdef", c)) nonce += c;
    return nonce;
  }
  std::string rest = in.substr(kSlurm.size());
  size_t colon = rest.find(':');
  std::string first = rest.substr(0, colon);
  std::string key = colon == std::string::npos ? "" : rest.substr(colon + 1, 32);
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* count = std::getenv("SLURM_RESTART_COUNT");
  long a0 = decimal(first.c_str()), k = count ? decimal(count) : 0, att = decimal(attempt);
  if (a0 < 1 || k < 0 || decimal(job) < 0 || !tune::agent::valid_nonce_key(key) || att != a0 + k) {
    std::fprintf(stderr,
                 "tune-supervisor: attempt %s is not run %s of a Slurm job first run as attempt "
                 "%s (SLURM_JOB_ID=%s): not run\n",
                 attempt, count ? count : "0", first.c_str(), job ? job : "");
    return std::nullopt;
  }
  return tune::agent::slurm_run_nonce(key, job, k);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && argv[1][0] == '-' && argv[1][1] == '-') return remote_op(argc, argv);
  if (argc < 11 || std::strcmp(argv[9], "--") != 0 || !*argv[2] ||
      std::strspn(argv[2], "0123456789") != std::strlen(argv[2]) ||
      (std::strcmp(argv[7], "fifo") != 0 && std::strcmp(argv[7], "null") != 0)) {
    std::fprintf(stderr,
                 "usage: tune-supervisor TRIAL_DIR ATTEMPT LEASE_FILE ORPHAN_TIMEOUT_S GRACE_S CWD "
                 "fifo|null RECORD -- PROGRAM ARGS... (the attempt's nonce on stdin)\n");
    return 2;
  }
  // Its memory and environment stay unreadable to the trial (same user): the nonce is secret.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  tune::agent::Attempt a;
  auto nonce = attempt_nonce(read_stdin(), argv[2]);
  if (!nonce) return 2;
  if (nonce->empty()) {
    // (whoever started it went before giving it one, e.g. an agent killed mid-launch: nobody
    // would believe its exit record, so nobody waits for this attempt)
    std::fprintf(stderr, "tune-supervisor: no attempt nonce on stdin: not run\n");
    return 2;
  }
  a.nonce = std::move(*nonce);
  a.dir = argv[1];
  a.attempt = argv[2];
  a.lease = argv[3];
  a.orphan_timeout = std::atof(argv[4]);
  a.grace = std::atof(argv[5]);
  a.cwd = argv[6];
  a.use_fifo = std::strcmp(argv[7], "fifo") == 0;
  a.prog = argv + 10;
  tune::agent::Sinks sinks;
  sinks.record_file = argv[8];
  return tune::agent::supervise(a, sinks);
}
