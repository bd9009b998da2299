// One SSH worker host's connection: a libssh session with an SFTP channel for files,
// a shell kept open for commands, and an OpenSSH ControlMaster that rsync goes through. Used
// only from the host's own I/O thread (ssh_executor.cpp): every call here may block on the
// network for seconds.
#pragma once

#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "exec/ssh_executor.hpp"
#include "util/error.hpp"

namespace tune::exec {

struct SshHost {
  SshHostConfig cfg;
  SshHostInfo info;
  int index = 0;  // its place in the experiment's host list (names its master socket)
  ssh_session session = nullptr;
  sftp_session sftp = nullptr;
  // A shell kept open on one channel: starting a trial is one line written to it, so the
  // user's shell start-up (.bashrc and all) is paid once per connection, not per trial.
  ssh_channel shell = nullptr;
  std::string shell_buf;
  uint64_t shell_seq = 0;
  // In the marker that ends each command's answer: drawn anew for each shell, so that output a
  // trial controls (a file's name or bytes in an answer) cannot end an answer early.
  std::string shell_key;
  // The host's tune-agent (`tune-agent remote`) on a channel of its own: each launch is one
  // request line, each answer an event line (apps/tune-agent/remote.hpp).
  ssh_channel agent = nullptr;
  std::string agent_buf;
  std::string agent_err;    // what it wrote on stderr (the first 4 KB)
  int agent_pid = -1;       // its pid there, from its first line
  int agent_gen = 0;        // how many agents this connection started (names the current one)
  std::string supervisor;   // remote path (tune-supervisor: file operations there)
  std::string agent_bin;    // remote path
  std::string lease;        // remote path
  std::string attempt_log;  // remote path: where the supervisors the agent forks name themselves
  pid_t master = -1;        // ssh -M (for rsync)
  std::string control_path;
  bool key_changed = false;  // its host key is not the known one: it is not used again

  SshHost() = default;
  SshHost(const SshHost&) = delete;
  SshHost& operator=(const SshHost&) = delete;
  ~SshHost() { close(); }

  // Connects: session, host-key check (unknown: recorded; changed: refused, key_changed set),
  // public-key auth, SFTP, the experiment dir, the supervisor and Python helper placed, the
  // kept shell, the rsync master. `timeout_s` (1 to 5) bounds the connect and each operation.
  [[nodiscard]] Result<void> open(const SshOptions& opts, double timeout_s = 5);
  void close();
  // After a failed operation: is the connection gone (rather than, say, a missing file)?
  [[nodiscard]] bool broken() const;
  [[nodiscard]] std::string err() const;

  // Runs a command in the kept shell; returns its exit status and output (stdout and stderr).
  [[nodiscard]] Result<int> shell_run(const std::string& cmd, std::string* out = nullptr);
  // Whether the last SFTP call failed because the file is not there.
  [[nodiscard]] bool missing() const;
  // After a failed SFTP operation: was it refused (permission denied)?
  [[nodiscard]] bool denied() const;
  // Whether the agent's channel holds input already read off the socket.
  [[nodiscard]] bool agent_pending();
  // The connection's socket (-1: not connected), for waiting on its input.
  [[nodiscard]] int socket_fd() const;
  // Sends one request line to the host's agent.
  [[nodiscard]] Result<void> agent_send(const std::string& line);
  // The agent's event lines that arrive within `timeout_ms` (0: those already here). Fails when
  // the agent's channel is gone (the agent ended, or the connection).
  [[nodiscard]] Result<std::vector<std::string>> agent_events(int timeout_ms);
  // (Re)starts the host's agent; waits for it to say it is ready.
  [[nodiscard]] Result<void> open_agent();
  // Runs a command on a new exec channel (through the user's shell on the host).
  [[nodiscard]] Result<int> run(const std::string& cmd, std::string* out = nullptr);
  // Bytes free for this user on the filesystem holding `path` (statvfs over SFTP), if known.
  std::optional<uint64_t> free_bytes(const std::string& path);
  // "" or, where that filesystem is (nearly) full, ": No space left on device (N KiB free)".
  std::string full_note(const std::string& path);
  [[nodiscard]] std::optional<uint64_t> size_of(const std::string& path);
  // Reads up to `max` bytes of `path` from `offset`.
  [[nodiscard]] std::optional<std::string> read(const std::string& path, uint64_t offset,
                                                size_t max);
  // Byte ranges of files a trial can replace (its output, its notes, its exit record), read
  // with one command of the kept shell: a FIFO there is never opened for a blocking read (an
  // SFTP open of one waits for a writer, and holds every later request of the connection), a
  // link is not followed, and each read is bounded in time.
  struct Range {
    std::string path;
    uint64_t offset = 0;
    size_t max = 0;
  };
  struct RangeRead {
    enum class Got { kData, kMissing, kDenied, kNotFile, kFailed } got = Got::kMissing;
    std::string data;
  };
  [[nodiscard]] Result<std::vector<RangeRead>> read_ranges(const std::vector<Range>& ranges);
  // Writes `path` through a temporary name and a rename.
  [[nodiscard]] Result<void> write(const std::string& path, std::string_view content, int mode);

  // "user@host:" for rsync; the ssh command rsync runs (over the master connection).
  [[nodiscard]] std::string remote_prefix() const;
  [[nodiscard]] std::vector<std::string> ssh_options() const;
  [[nodiscard]] std::string ssh_words() const;

 private:
  Result<void> open_shell();
  // open()'s parts after authentication (ssh_host_open.cpp).
  Result<void> place_helpers(const SshOptions& opts);
  Result<void> start_master(const SshOptions& opts);
  // "it sent SHA256:..., known: SHA256:..." (OpenSSH's form of fingerprint), as far as known.
  std::string key_fingerprints();
};

}  // namespace tune::exec
