// tune-supervisor: runs one trial attempt so that it outlives the driver (SSH worker hosts; on
// the driver's own machine tune-agent forks the same supervisor per attempt instead).
//
//   tune-supervisor TRIAL_DIR ATTEMPT LEASE_FILE ORPHAN_TIMEOUT_S GRACE_S CWD STDIN RECORD --
//   PROGRAM ARGS...
//
// Started by the driver in a new session, with the attempt's nonce (a secret the trial never
// sees) on its stdin. With STDIN=fifo it makes TRIAL_DIR/stdin.fifo and keeps it open (a
// step-mode trial reads its commands there and never sees EOF); with STDIN=null the trial's
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

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "agent/supervise.hpp"
#include "remote_ops.hpp"

namespace {

// The attempt's nonce: hex digits on stdin up to EOF (nothing if stdin is a terminal).
std::string read_nonce() {
  std::string nonce;
  if (::isatty(0)) return nonce;
  char buf[128];
  for (;;) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && nonce.size() < 64; ++i)
      if (std::strchr("0123456789abcdef", buf[i]) && buf[i]) nonce += buf[i];
  }
  return nonce;
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
  a.nonce = read_nonce();
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
