#include "exec/ssh_host.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "util/cksum.hpp"
#include "util/clock.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

namespace {
constexpr const char* kBinDir = ".tune-bin";
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
  std::string marker = "__tune_done_" + std::to_string(++shell_seq) + "__";
  std::string line = "{ " + cmd + "\n} </dev/null 2>&1; echo \"" + marker + " $?\"\n";
  if (ssh_channel_write(shell, line.data(), static_cast<uint32_t>(line.size())) !=
      static_cast<int>(line.size()))
    return fail(cfg.name, ": ", err());
  char tmp[4096];
  for (;;) {
    if (auto at = shell_buf.find(marker + " "); at != std::string::npos) {
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
    return fail(cfg.name, ": the shell channel ", n == 0 ? "timed out" : "failed", ": ", err());
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

// A helper of the head's, read once per file as it is (by size and mtime) for all the hosts a
// run connects to, not once per host: its bytes, and what `cksum < FILE` prints for them.
struct Helper {
  std::string key;      // size and mtime when read
  std::string content;  // (shared by every host's copy: 100 hosts once held 100 of each)
  std::string sum;      // "CRC SIZE"
};
Result<std::shared_ptr<const Helper>> helper_file(const fs::path& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Helper>> helpers;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return fail("cannot read ", path.string(), ": ", std::strerror(errno));
  // (a file put in its place with the same size and mtime, e.g. by `install -p`, has another
  // inode or a later ctime)
  std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + " " +
                    std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
                    std::to_string(st.st_mtim.tv_nsec) + " " + std::to_string(st.st_ctim.tv_sec) +
                    "." + std::to_string(st.st_ctim.tv_nsec);
  std::lock_guard lock(mutex);
  if (auto it = helpers.find(path.string()); it != helpers.end() && it->second->key == key)
    return it->second;
  auto content = util::read_file(path, 64u << 20);
  if (!content) return fail(content.error().message);
  auto h = std::make_shared<Helper>();
  h->key = key;
  h->sum = std::to_string(util::posix_cksum(*content)) + " " + std::to_string(content->size());
  h->content = std::move(*content);
  helpers[path.string()] = h;
  return std::shared_ptr<const Helper>(h);
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

std::string SshHost::key_fingerprints() {
  auto fingerprint = [](ssh_key key) -> std::string {
    unsigned char* hash = nullptr;
    size_t len = 0;
    if (!key || ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) != 0)
      return "?";
    char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
    std::string out = text ? text : "?";
    ssh_string_free_char(text);
    ssh_clean_pubkey_hash(&hash);
    return std::string(ssh_key_type_to_char(ssh_key_type(key))) + " " + out;
  };
  ssh_key sent = nullptr;
  (void)ssh_get_server_publickey(session, &sent);
  std::string out = "it sent " + fingerprint(sent);
  ssh_key_free(sent);
  // The known keys: this host's lines of known_hosts (plain names; hashed ones cannot be
  // matched without the key being asked for).
  std::string names = cfg.port == 22 ? cfg.host : "[" + cfg.host + "]:" + std::to_string(cfg.port);
  auto split = [](const std::string& text, char sep) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t at; (at = text.find(sep, start)) != std::string::npos; start = at + 1)
      parts.push_back(text.substr(start, at - start));
    parts.push_back(text.substr(start));
    return parts;
  };
  auto text = util::read_file(util::expand_user(cfg.known_hosts), 1 << 20);
  for (const auto& line : split(text.value_or(""), '\n')) {
    auto words = split(line, ' ');
    if (words.size() < 3) continue;
    auto hosts = split(words[0], ',');
    if (std::find(hosts.begin(), hosts.end(), names) == hosts.end()) continue;
    ssh_key known = nullptr;
    if (ssh_pki_import_pubkey_base64(words[2].c_str(), ssh_key_type_from_name(words[1].c_str()),
                                     &known) == 0)
      out += ", known: " + fingerprint(known);
    ssh_key_free(known);
  }
  return out;
}

Result<void> SshHost::open(const SshOptions& opts, double timeout_s) {
  close();
  key_changed = false;
  shell_buf.clear();
  session = ssh_new();
  if (!session) return fail("cannot create an SSH session");
  // connect, and every blocking operation: a dead link is noticed
  long timeout = std::lround(std::clamp(timeout_s, 1.0, 5.0));
  int port = cfg.port;
  ssh_options_set(session, SSH_OPTIONS_HOST, cfg.host.c_str());
  ssh_options_set(session, SSH_OPTIONS_PORT, &port);
  if (!cfg.user.empty()) ssh_options_set(session, SSH_OPTIONS_USER, cfg.user.c_str());
  ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &timeout);
  std::string kh = util::expand_user(cfg.known_hosts).string();
  ssh_options_set(session, SSH_OPTIONS_KNOWNHOSTS, kh.c_str());
  ssh_options_set(session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
  if (ssh_connect(session) != SSH_OK) return fail("cannot connect: ", err());
  // A dead link must fail operations within seconds rather than hang the driver's loop:
  // unacknowledged data times out after 5 s, an idle connection is probed after 2 s.
  if (int fd = ssh_get_fd(session); fd >= 0) {
    int user_timeout_ms = 5000, on = 1, idle = 2, intvl = 1, cnt = 3;
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  }
  switch (ssh_session_is_known_server(session)) {
    case SSH_KNOWN_HOSTS_OK:
      break;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      key_changed = true;
      return fail("its host key differs from the one in ", kh, " (", key_fingerprints(),
                  "): refused (possible man-in-the-middle; remove the old key if the host "
                  "was reinstalled)");
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      if (ssh_session_update_known_hosts(session) != SSH_OK)
        return fail("cannot record its host key in ", kh, ": ", err());
      spdlog::info("{}: new host key recorded in {}", cfg.name, kh);
      break;
    default:
      return fail("cannot check its host key: ", err());
  }
  int rc = SSH_AUTH_DENIED;
  if (!cfg.identity_file.empty()) {
    ssh_key key = nullptr;
    std::string path = util::expand_user(cfg.identity_file).string();
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK)
      return fail("cannot read identity_file ", path);
    rc = ssh_userauth_publickey(session, nullptr, key);
    ssh_key_free(key);
  } else {
    rc = ssh_userauth_agent(session, nullptr);
    if (rc != SSH_AUTH_SUCCESS) rc = ssh_userauth_publickey_auto(session, nullptr, nullptr);
  }
  if (rc != SSH_AUTH_SUCCESS) return fail("public-key authentication failed: ", err());
  sftp = sftp_new(session);
  if (!sftp || sftp_init(sftp) != SSH_OK) return fail("cannot start SFTP: ", err());
  // Where things go on the host.
  std::string root = cfg.storage_path.empty() ? "~/tune_results" : cfg.storage_path;
  if (root.starts_with("~/")) {
    char* home = sftp_canonicalize_path(sftp, ".");
    if (!home) return fail("cannot find the home directory: ", err());
    root = std::string(home) + root.substr(1);
    ssh_string_free_char(home);
  }
  info.name = cfg.name;
  info.exp_dir = root + "/" + opts.exp_name;
  std::string bin = root + "/" + kBinDir;
  info.helpers_dir = bin + "/python";
  supervisor = bin + "/tune-supervisor";
  agent_bin = bin + "/tune-agent";
  struct Placed {
    const fs::path& local;
    std::string remote;
    int mode;
  };
  const Placed placed[] = {{opts.supervisor, supervisor, 0755},
                           {opts.agent, agent_bin, 0755},
                           {opts.python_helper, info.helpers_dir + "/tune_trial.py", 0644}};
  // One command: the dirs, the host's CPUs and GPUs, and the cksum of each helper it has (so
  // that one it has already is not copied again, nor read back over the link to compare).
  // (each answer on a line of its own, labelled: a tool missing there leaves its line out)
  std::string cmd = "mkdir -p -- " + q(info.exp_dir + "/.tune") + " " + q(info.helpers_dir) +
                    " && { echo cpus $(nproc 2>/dev/null); echo gpus $(ls /dev | grep -c "
                    "'^nvidia[0-9]'); for f in";
  for (const auto& p : placed) cmd += " " + q(p.remote);
  cmd += "; do echo sum $(cksum < \"$f\" 2>/dev/null); done; }";
  std::string out;
  auto st = run(cmd, &out);
  if (!st || *st != 0)
    return fail("cannot create ", info.exp_dir, ": ", st ? out : st.error().message);
  int nproc = 0, ngpu = 0;
  std::vector<std::string> sums;
  for (const auto& line : util::lines_of(out)) {
    if (line.starts_with("cpus ")) nproc = std::clamp(std::atoi(line.c_str() + 5), 0, 1 << 20);
    if (line.starts_with("gpus ")) ngpu = std::clamp(std::atoi(line.c_str() + 5), 0, 1 << 10);
    if (line.starts_with("sum ")) sums.push_back(line.substr(4));
  }
  info.cpus = cfg.cpus.value_or(nproc > 0 ? nproc : 1);
  info.gpus = cfg.gpus.value_or(ngpu);
  // The supervisor, the agent and the Python helper, unless the host has them already.
  for (size_t i = 0; i < std::size(placed); ++i) {
    const auto& [local, remote, mode] = placed[i];
    if (local.empty()) continue;
    auto helper = helper_file(local);
    if (!helper) return fail(helper.error().message);
    if (sums.size() <= i || sums[i] != (*helper)->sum)
      if (auto w = write(remote, (*helper)->content, mode); !w) return w;
    sftp_chmod(sftp, remote.c_str(), static_cast<mode_t>(mode));  // (a copy kept may lack +x)
  }
  lease = info.exp_dir + "/.tune/lease";
  // (one per host name: hosts that share a file system, e.g. a home on NFS, keep apart; the
  // hash tells apart names that differ only in what a file name cannot hold)
  char hash[9];
  std::snprintf(hash, sizeof hash, "%08x", static_cast<unsigned>(util::posix_cksum(cfg.name)));
  attempt_log =
      info.exp_dir + "/.tune/attempts-" + util::safe_component(cfg.name, 100) + "-" + hash + ".log";
  shell_buf.clear();
  if (auto sh = open_shell(); !sh) return sh;
  if (auto a = open_agent(); !a) return a;
  // rsync goes through an OpenSSH master connection that the driver owns.
  if (opts.syncer == "rsync") {
    // Under the experiment's .tune dir (one driver at a time holds it), unless that path is
    // too long for a Unix socket; a socket a killed master left is removed before the start.
    // The master itself gets SIGTERM when the driver dies (util::spawn_process).
    control_path =
        (opts.head_exp_dir / ".tune" / ("ssh-" + std::to_string(index) + ".sock")).string();
    if (control_path.size() > 100)
      control_path = "/tmp/tune-cm-" +
                     std::to_string(std::hash<std::string>{}(opts.head_exp_dir.string())) + "-" +
                     std::to_string(index);
    if (fs::exists(control_path)) {  // a master an earlier driver (or connection) left
      std::string stop = "ssh -o ControlPath=" + util::shell_quote(control_path) +
                         " -O exit localhost >/dev/null 2>&1";
      (void)!std::system(stop.c_str());
      ::unlink(control_path.c_str());
    }
    std::vector<std::string> cmd = {"ssh", "-M", "-N", "-o", "ControlPath=" + control_path};
    auto common = ssh_options();
    cmd.insert(cmd.end(), common.begin(), common.end());
    cmd.push_back(cfg.host);
    auto pid = util::spawn_process(cmd, opts.head_exp_dir / ".tune" / ("ssh-" + cfg.name + ".log"));
    if (!pid) return fail(pid.error().message);
    master = *pid;
    // (on the host's I/O thread: the loop does not wait for this)
    for (int i = 0; i < 100 && !fs::exists(control_path); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!fs::exists(control_path))
      return fail("the ssh master connection for rsync did not come up: ",
                  util::last_line(opts.head_exp_dir / ".tune" / ("ssh-" + cfg.name + ".log")));
  }
  return {};
}

}  // namespace tune::exec
