// SshHost's connection: the session, the host-key check, authentication, the helpers placed on
// the host, the kept shell, the agent and the rsync master (ssh_host.hpp).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "exec/ssh_host.hpp"
#include "util/cksum.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

constexpr const char* kBinDir = ".tune-bin";  // (beside the experiments, under storage_path)

std::string q(const std::string& s) {
  return util::shell_quote(s);
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
  if (auto placed = place_helpers(opts); !placed) return placed;
  shell_buf.clear();
  if (auto sh = open_shell(); !sh) return sh;
  if (auto a = open_agent(); !a) return a;
  return start_master(opts);
}

// Where things go on the host (the experiment dir, the helpers' dir), its CPUs and GPUs, and
// the supervisor, the agent and the Python helper placed there unless it has them already.
Result<void> SshHost::place_helpers(const SshOptions& opts) {
  std::string root = cfg.storage_path.empty() ? "~/tune_results" : cfg.storage_path;
  if (root.starts_with("~/")) {
    char* home = sftp_canonicalize_path(sftp, ".");
    if (!home) return fail("cannot find the home directory: ", err());
    root = std::string(home) + root.substr(1);
    ssh_string_free_char(home);
  }
  info.name = cfg.name;
  info.exp_dir = root + "/" + opts.exp_name;
  struct Placed {
    const fs::path& local;
    std::string remote;  // (under bin, below)
    int mode;
    std::shared_ptr<const Helper> helper;
  };
  Placed placed[] = {{opts.supervisor, "tune-supervisor", 0755, nullptr},
                     {opts.agent, "tune-agent", 0755, nullptr},
                     {opts.python_helper, "python/tune_trial.py", 0644, nullptr}};
  // Each set of helpers in a dir of its own, named by their contents: runs of another tune
  // version on the same storage_path (a shared home) never replace this run's agent or
  // supervisor, nor it theirs.
  std::string sums_of_all;
  for (auto& p : placed) {
    if (p.local.empty()) continue;
    auto helper = helper_file(p.local);
    if (!helper) return fail(helper.error().message);
    p.helper = *helper;
    sums_of_all += p.helper->sum + "\n";
  }
  char version[9];
  std::snprintf(version, sizeof version, "%08x",
                static_cast<unsigned>(util::posix_cksum(sums_of_all)));
  std::string bin = root + "/" + kBinDir + "/" + version;
  for (auto& p : placed) p.remote = bin + "/" + p.remote;
  info.helpers_dir = bin + "/python";
  supervisor = placed[0].remote;
  agent_bin = placed[1].remote;
  // One command: the dirs, the host's CPUs and GPUs, and the cksum of each helper it has (so
  // that one it has already is not copied again, nor read back over the link to compare).
  // (each answer on a line of its own, labelled: a tool missing there leaves its line out)
  std::string cmd = "mkdir -p -- " + q(info.exp_dir + "/.tune") + " " + q(info.helpers_dir) +
                    " && { echo cpus $(nproc 2>/dev/null); echo gpus $(ls /dev | grep -c "
                    "'^nvidia[0-9]'); { printf x | base64 -w0 && timeout 1 dd if=/dev/null "
                    "iflag=skip_bytes,count_bytes,nonblock bs=65536 status=none; } >/dev/null "
                    "2>&1 && echo reads dd; for f in";
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
    if (line == "reads dd") info.safe_reads = true;
  }
  if (!info.safe_reads)
    spdlog::warn(
        "host {}: no GNU dd, base64 and timeout there: trials' output is read over SFTP, which a "
        "trial that puts a FIFO in place of its stdout.log or stdout.times can stall",
        cfg.name);
  info.cpus = cfg.cpus.value_or(nproc > 0 ? nproc : 1);
  info.gpus = cfg.gpus.value_or(ngpu);
  // The supervisor, the agent and the Python helper, unless the host has them already.
  for (size_t i = 0; i < std::size(placed); ++i) {
    const auto& [local, remote, mode, helper] = placed[i];
    if (!helper) continue;
    if (sums.size() <= i || sums[i] != helper->sum)
      if (auto w = write(remote, helper->content, mode); !w) return w;
    sftp_chmod(sftp, remote.c_str(), static_cast<mode_t>(mode));  // (a copy kept may lack +x)
  }
  lease = info.exp_dir + "/.tune/lease";
  // (one per host name: hosts that share a file system, e.g. a home on NFS, keep apart; the
  // hash tells apart names that differ only in what a file name cannot hold)
  char hash[9];
  std::snprintf(hash, sizeof hash, "%08x", static_cast<unsigned>(util::posix_cksum(cfg.name)));
  attempt_log =
      info.exp_dir + "/.tune/attempts-" + util::safe_component(cfg.name, 100) + "-" + hash + ".log";
  return {};
}

// rsync goes through an OpenSSH master connection that the driver owns.
Result<void> SshHost::start_master(const SshOptions& opts) {
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
    if (!fs::exists(control_path)) {
      fs::path log = opts.head_exp_dir / ".tune" / ("ssh-" + cfg.name + ".log");
      std::string said = util::last_line(log);
      return fail("the ssh master connection for rsync did not come up within 5 s",
                  said.empty() ? " (ssh said nothing: " + log.string() + ")" : ": " + said);
    }
  }
  return {};
}

}  // namespace tune::exec
