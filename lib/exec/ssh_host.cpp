#include "exec/ssh_host.hpp"
#include "util/base64.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "util/clock.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

namespace {
std::string q(const std::string& s) {
  return util::shell_quote(s);
}
}  // namespace

bool SshHost::broken() const {
  return !session || !ssh_is_connected(session) || ssh_get_error_code(session) == SSH_FATAL;
}

std::string SshHost::err() const {
  return session ? ssh_get_error(session) : "no session";
}

void SshHost::close() {
  if (agent) {
    ssh_channel_close(agent);  // EOF: the agent ends; the supervisors it started go on
    ssh_channel_free(agent);
  }
  agent = nullptr;
  agent_buf.clear();
  if (shell) {
    ssh_channel_close(shell);
    ssh_channel_free(shell);
  }
  shell = nullptr;
  if (sftp) sftp_free(sftp);
  sftp = nullptr;
  if (session) {
    ssh_disconnect(session);
    ssh_free(session);
  }
  session = nullptr;
  if (master > 0) util::kill_and_reap(master);
  master = -1;
  if (!control_path.empty()) ::unlink(control_path.c_str());
}

std::string SshHost::remote_prefix() const {
  return (cfg.user.empty() ? "" : cfg.user + "@") + cfg.host + ":";
}

// The options of every ssh the driver starts for this host. A mux client whose master is gone
// falls back to a connection of its own: with these it checks the host key as the master
// does, and it gives up on a link that died (a banner or an answer that never comes) instead
// of holding a sync, and the trial's exit behind it, for ever.
std::vector<std::string> SshHost::ssh_options() const {
  std::vector<std::string> o = {
      "-o", "BatchMode=yes",
      "-o", "UserKnownHostsFile=" + util::expand_user(cfg.known_hosts).string(),
      "-o", "StrictHostKeyChecking=yes",
      "-o", "ConnectTimeout=10",
      "-o", "ServerAliveInterval=5",
      "-o", "ServerAliveCountMax=3",
      "-p", std::to_string(cfg.port)};
  if (!cfg.identity_file.empty()) {
    o.push_back("-i");
    o.push_back(util::expand_user(cfg.identity_file).string());
  }
  if (!cfg.user.empty()) {
    o.push_back("-l");
    o.push_back(cfg.user);
  }
  return o;
}

namespace {
// One word of rsync's -e command: rsync splits it at spaces and honours single and double
// quotes (no backslashes); inside quotes, the quote doubled stands for itself.
std::string rsync_e_word(const std::string& w) {
  if (w.find_first_of(" \t'\"") == std::string::npos) return w;
  std::string out = "'";
  for (char c : w) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}
}  // namespace

std::string SshHost::ssh_words() const {
  std::string out = "ssh -o ControlMaster=no -o " + rsync_e_word("ControlPath=" + control_path);
  for (const auto& w : ssh_options()) out += " " + rsync_e_word(w);
  return out;
}

Result<void> SshHost::open_shell() {
  auto key = util::random_hex(8);
  if (!key) return fail("cannot draw a random marker: ", key.error().message);
  shell_key = std::move(*key);
  shell = ssh_channel_new(session);
  if (!shell || ssh_channel_open_session(shell) != SSH_OK ||
      ssh_channel_request_exec(shell, "exec /bin/sh") != SSH_OK)
    return fail("cannot open a shell channel: ", err());
  return {};
}

Result<void> SshHost::open_agent() {
  if (agent) {
    ssh_channel_close(agent);
    ssh_channel_free(agent);
  }
  agent_buf.clear();
  agent_err.clear();
  agent_pid = -1;
  ++agent_gen;
  agent = ssh_channel_new(session);
  std::string cmd = "exec " + q(agent_bin) + " remote " + q(attempt_log);
  if (!agent || ssh_channel_open_session(agent) != SSH_OK ||
      ssh_channel_request_exec(agent, cmd.c_str()) != SSH_OK) {
    std::string e = err();
    if (agent) ssh_channel_free(agent);
    agent = nullptr;
    return fail("cannot start tune-agent: ", e);
  }
  // Its first line says it is ready, with its pid (or it fails at once, saying why on stderr).
  auto why = [&](const std::string& what) {
    std::string said = util::printable(agent_err, 300);
    return what + (said.empty() ? "" : ": " + said);
  };
  for (double deadline = util::mono() + 15; util::mono() < deadline;) {
    auto lines = agent_events(500);
    if (!lines) return fail(why("tune-agent " + agent_bin + " did not start"));
    for (const auto& l : *lines)
      if (l.find("\"event\":\"ready\"") != std::string::npos) {
        if (auto at = l.find("\"agent\":"); at != std::string::npos)
          agent_pid = std::atoi(l.c_str() + at + 8);
        return {};
      }
  }
  return fail(why("tune-agent " + agent_bin + " did not answer within 15 s"));
}

bool SshHost::missing() const {
  return sftp && sftp_get_error(sftp) == SSH_FX_NO_SUCH_FILE;
}

bool SshHost::denied() const {
  return sftp && sftp_get_error(sftp) == SSH_FX_PERMISSION_DENIED;
}

bool SshHost::agent_pending() {
  return agent && (agent_buf.find('\n') != std::string::npos || ssh_channel_poll(agent, 0) > 0);
}

int SshHost::socket_fd() const {
  return session && ssh_is_connected(session) ? static_cast<int>(ssh_get_fd(session)) : -1;
}

Result<void> SshHost::agent_send(const std::string& line) {
  if (!agent) return fail(cfg.name, ": no tune-agent");
  std::string out = line + "\n";
  if (ssh_channel_write(agent, out.data(), static_cast<uint32_t>(out.size())) !=
      static_cast<int>(out.size()))
    return fail(cfg.name, ": cannot reach tune-agent: ", err());
  return {};
}

Result<std::vector<std::string>> SshHost::agent_events(int timeout_ms) {
  if (!agent) return fail(cfg.name, ": no tune-agent");
  char tmp[16384];
  bool closed = false;
  size_t taken = 0;
  for (bool first = true; taken < (1u << 20); first = false) {
    // Waits (up to timeout_ms) only while nothing came; then takes what else is here, up to
    // 1 MB a call (a host that floods the channel does not hold the host's thread).
    int n = first && timeout_ms > 0
                ? ssh_channel_read_timeout(agent, tmp, sizeof tmp, 0, timeout_ms)
                : ssh_channel_read_nonblocking(agent, tmp, sizeof tmp, 0);
    if (n > 0) {
      agent_buf.append(tmp, static_cast<size_t>(n));
      taken += static_cast<size_t>(n);
      if (agent_buf.size() > (64u << 20)) agent_buf.clear();  // not the agent's lines
      continue;
    }
    closed = n < 0;
    break;
  }
  // Its stderr (a shell's start-up noise, or why it could not run): kept for messages, and
  // drained, since libssh says a channel is at EOF only once both streams are read.
  for (int n; (n = ssh_channel_read_nonblocking(agent, tmp, sizeof tmp, 1)) > 0;)
    agent_err = (agent_err + std::string(tmp, static_cast<size_t>(n))).substr(0, 4096);
  closed = closed || ssh_channel_is_eof(agent) || !ssh_channel_is_open(agent) ||
           ssh_channel_poll(agent, 0) == SSH_EOF;
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = agent_buf.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(agent_buf.substr(start, nl - start));
  agent_buf.erase(0, start);
  // (the last lines of an agent that ended are handed out first)
  if (closed && lines.empty())
    return fail(cfg.name, ": tune-agent's channel closed",
                agent_err.empty() ? "" : " (" + util::printable(agent_err, 300) + ")");
  return lines;
}

// Runs a command in the kept shell; returns its exit status and output (stdout only).
Result<int> SshHost::shell_run(const std::string& cmd, std::string* out) {
  if (!shell) return run(cmd, out);
  std::string marker = "__tune_done_" + shell_key + "_" + std::to_string(++shell_seq) + "__";
  std::string line = "{ " + cmd + "\n} </dev/null 2>&1; echo \"" + marker + " $?\"\n";
  if (ssh_channel_write(shell, line.data(), static_cast<uint32_t>(line.size())) !=
      static_cast<int>(line.size()))
    return fail(cfg.name, ": ", err());
  char tmp[65536];
  size_t searched = 0;  // (a long output is searched for the marker once, not at every read)
  for (;;) {
    auto at = shell_buf.find(marker + " ", searched);
    // (next time from where a marker could start that this search could not see whole, or
    // from the one found, whose line is not all there yet)
    searched = at != std::string::npos                ? at
               : shell_buf.size() > marker.size() + 1 ? shell_buf.size() - marker.size() - 1
                                                      : 0;
    if (at != std::string::npos) {
      auto nl = shell_buf.find('\n', at);
      if (nl != std::string::npos) {
        int status = std::atoi(shell_buf.c_str() + at + marker.size() + 1);
        if (out) *out = shell_buf.substr(0, at);
        shell_buf.erase(0, nl + 1);
        return status;
      }
    }
    int n = ssh_channel_read_timeout(shell, tmp, sizeof tmp, 0, 10000);
    if (n > 0) {
      shell_buf.append(tmp, static_cast<size_t>(n));
      continue;
    }
    auto failed =
        fail(cfg.name, ": the shell channel ", n == 0 ? "timed out" : "failed", ": ", err());
    // Its answer may still come, and would be taken for the next command's: a new shell for
    // those (or none, if the connection is gone: commands then each get a channel of their own).
    ssh_channel_close(shell);
    ssh_channel_free(shell);
    shell = nullptr;
    shell_buf.clear();
    if (!open_shell()) {
      if (shell) ssh_channel_free(shell);
      shell = nullptr;
    }
    return failed;
  }
}

// Runs a command (through the user's shell on the host); returns its exit status and output.
Result<int> SshHost::run(const std::string& cmd, std::string* out) {
  ssh_channel ch = ssh_channel_new(session);
  if (!ch) return fail(cfg.name, ": ", err());
  if (ssh_channel_open_session(ch) != SSH_OK ||
      ssh_channel_request_exec(ch, cmd.c_str()) != SSH_OK) {
    std::string e = err();
    ssh_channel_free(ch);
    return fail(cfg.name, ": ", e);
  }
  std::string buf;
  char tmp[4096];
  for (;;) {
    int n = ssh_channel_read_timeout(ch, tmp, sizeof tmp, 0, 30000);
    if (n > 0) {
      if (buf.size() < (1u << 20)) buf.append(tmp, static_cast<size_t>(n));
      continue;
    }
    if (n == SSH_ERROR) {
      ssh_channel_free(ch);
      return fail(cfg.name, ": ", err());
    }
    if (n == 0 && (ssh_channel_is_eof(ch) || !ssh_channel_is_open(ch))) break;
    if (n == 0) break;  // timeout
  }
  // stderr, for the message
  for (;;) {
    int n = ssh_channel_read_timeout(ch, tmp, sizeof tmp, 1, 1000);
    if (n <= 0) break;
    if (buf.size() < (1u << 20)) buf.append(tmp, static_cast<size_t>(n));
  }
  ssh_channel_send_eof(ch);
  int status = ssh_channel_get_exit_status(ch);
  ssh_channel_close(ch);
  ssh_channel_free(ch);
  if (out) *out = std::move(buf);
  return status;
}

std::optional<uint64_t> SshHost::size_of(const std::string& path) {
  sftp_attributes a = sftp_stat(sftp, path.c_str());
  if (!a) return std::nullopt;
  uint64_t size = a->size;
  sftp_attributes_free(a);
  return size;
}

std::optional<uint64_t> SshHost::free_bytes(const std::string& path) {
  sftp_statvfs_t v = sftp_statvfs(sftp, path.c_str());
  if (!v) return std::nullopt;
  uint64_t free = v->f_bavail * (v->f_frsize ? v->f_frsize : v->f_bsize);
  sftp_statvfs_free(v);
  return free;
}

std::string SshHost::full_note(const std::string& path) {
  auto free = free_bytes(path);
  if (!free || *free >= (1u << 20)) return "";
  return ": No space left on device (" + std::to_string(*free / 1024) + " KiB free)";
}

// Reads up to `max` bytes of `path` from `offset`.
std::optional<std::string> SshHost::read(const std::string& path, uint64_t offset, size_t max) {
  sftp_file f = sftp_open(sftp, path.c_str(), O_RDONLY, 0);
  if (!f) return std::nullopt;
  std::string data;
  if (sftp_seek64(f, offset) == 0) {
    char buf[65536];
    while (data.size() < max) {
      ssize_t n = sftp_read(f, buf, std::min(sizeof buf, max - data.size()));
      if (n <= 0) break;
      data.append(buf, static_cast<size_t>(n));
    }
  }
  sftp_close(f);
  return data;
}

namespace {
std::string path_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Result<void> SshHost::write(const std::string& path, std::string_view content, int mode) {
  std::string tmp = path + ".tmp";
  sftp_file f = sftp_open(sftp, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (!f) return fail(cfg.name, ": cannot write ", tmp, ": ", err(), full_note(path_dir(path)));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n =
        sftp_write(f, content.data() + done, std::min<size_t>(content.size() - done, 65536));
    if (n <= 0) {
      std::string why = err();
      sftp_close(f);
      sftp_unlink(sftp, tmp.c_str());
      return fail(cfg.name, ": cannot write ", tmp, ": ", why, full_note(path_dir(path)));
    }
    done += static_cast<size_t>(n);
  }
  sftp_close(f);
  sftp_unlink(sftp, path.c_str());
  if (sftp_rename(sftp, tmp.c_str(), path.c_str()) != 0)
    return fail(cfg.name, ": cannot rename ", tmp, ": ", err());
  return {};
}

Result<std::vector<SshHost::RangeRead>> SshHost::read_ranges(const std::vector<Range>& ranges) {
  using Got = RangeRead::Got;
  if (!info.safe_reads) {  // (over SFTP, as before: see SshHostInfo::safe_reads)
    std::vector<RangeRead> reads;
    for (const auto& r : ranges) {
      RangeRead rr;
      if (auto data = read(r.path, r.offset, r.max)) {
        rr.got = Got::kData;
        rr.data = std::move(*data);
      } else {
        rr.got = denied() ? Got::kDenied : missing() ? Got::kMissing : Got::kFailed;
      }
      reads.push_back(std::move(rr));
    }
    return reads;
  }
  // Per range a status line (F: a regular file, then its bytes as one line of base64; M: not
  // there; D: not readable; N: not a regular file, or a link; E: dd failed). dd opens with
  // O_NONBLOCK: a FIFO swapped in after the tests gives nothing, never a wait; each read has
  // 3 s, well inside the 10 s the shell's answer may take.
  std::string cmd = "t=$(mktemp) && { ";
  for (const auto& r : ranges) {
    std::string f = q(r.path);
    cmd += "if [ -L " + f + " ]; then echo N; elif [ ! -e " + f + " ]; then echo M; elif [ ! -f " +
           f + " ]; then echo N; elif [ ! -r " + f + " ]; then echo D; elif timeout 3 dd if=" + f +
           " of=\"$t\" iflag=skip_bytes,count_bytes,nonblock bs=65536 skip=" +
           std::to_string(r.offset) + " count=" + std::to_string(r.max) +
           " status=none 2>/dev/null; then echo F; base64 -w0 < \"$t\"; echo; else echo E; fi; ";
  }
  cmd += "rm -f \"$t\"; }; ";
  std::string out;
  auto st = shell_run(cmd + "true", &out);
  if (!st) return std::unexpected(st.error());
  std::vector<RangeRead> reads;
  size_t at = 0;
  auto next_line = [&]() -> std::optional<std::string_view> {
    if (at >= out.size()) return std::nullopt;
    size_t nl = out.find('\n', at);
    if (nl == std::string::npos) nl = out.size();
    std::string_view line(out.data() + at, nl - at);
    at = nl + 1;
    return line;
  };
  using Got = RangeRead::Got;
  for (size_t i = 0; i < ranges.size(); ++i) {
    auto status = next_line();
    if (!status || status->size() != 1) return fail(cfg.name, ": unexpected answer to a read");
    RangeRead rr;
    rr.got = *status == "F"   ? Got::kData
             : *status == "D" ? Got::kDenied
             : *status == "N" ? Got::kNotFile
             : *status == "E" ? Got::kFailed
                              : Got::kMissing;
    if (rr.got == Got::kData) {
      auto b64 = next_line();
      auto data = b64 ? util::base64_decode(*b64) : std::nullopt;
      if (!data) return fail(cfg.name, ": unexpected answer to a read");
      rr.data = std::move(*data);
    }
    reads.push_back(std::move(rr));
  }
  return reads;
}

}  // namespace tune::exec
