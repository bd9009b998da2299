#include "exec/ssh_executor.hpp"

#include <fcntl.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "exec/exit_record.hpp"
#include "sync/workdir.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

constexpr double kSupervisorCheck = 2.0;  // s between remote supervisor liveness checks
constexpr double kPollPeriod = 0.2;       // remote output and exits are looked at this often
constexpr size_t kReadChunk = 4u << 20;   // per trial per poll
constexpr const char* kBinDir = ".tune-bin";
// Where checkpoints copied by one rsync wait to be published (a .sync_checkpoint_ name: what a
// killed driver left is removed like any other unfinished copy).
constexpr const char* kBatchStaging = ".sync_checkpoint_batch";

double clock_s(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

std::string q(const std::string& s) {
  return util::shell_quote(s);
}

// One worker host: a libssh session with an SFTP channel, and an OpenSSH ControlMaster for
// rsync.
struct Host {
  SshHostConfig cfg;
  SshHostInfo info;
  ssh_session session = nullptr;
  sftp_session sftp = nullptr;
  // A shell kept open on one channel: starting a trial is one line written to it, so the
  // user's shell start-up (.bashrc and all) is paid once per connection, not per trial.
  ssh_channel shell = nullptr;
  std::string shell_buf;
  uint64_t shell_seq = 0;
  std::string supervisor;  // remote path
  std::string lease;       // remote path
  pid_t master = -1;       // ssh -M (for rsync)
  std::string control_path;
  bool workdir_ready = false;  // trial.sync_workdir: copied (or found current) in this run
  int index = 0;
  bool up = false;
  // Down: the connection failed; reconnects run on a helper thread (the loop never waits for
  // them), with backoff. Lost: down for longer than host_timeout_s.
  double down_since = 0, next_retry = 0, backoff = 1;
  bool lost = false;
  std::thread reconnect;
  std::atomic<bool> reconnect_done{false};
  std::atomic<bool> key_changed{false};  // its host key is not the known one: not used again
  Result<void> reconnect_result;
  std::vector<int> superseded;  // supervisors of attempts re-queued elsewhere: stopped on return

  ~Host() {
    if (reconnect.joinable()) reconnect.join();
    close();
  }

  // After a failed operation: is the connection gone (rather than, say, a missing file)?
  bool broken() const {
    return !session || !ssh_is_connected(session) || ssh_get_error_code(session) == SSH_FATAL;
  }

  void close() {
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
    up = false;
  }

  std::string err() const { return session ? ssh_get_error(session) : "no session"; }

  Result<void> open_shell() {
    shell = ssh_channel_new(session);
    if (!shell || ssh_channel_open_session(shell) != SSH_OK ||
        ssh_channel_request_exec(shell, "exec /bin/sh") != SSH_OK)
      return fail("cannot open a shell channel: ", err());
    return {};
  }

  // Runs a command in the kept shell; returns its exit status and output (stdout only).
  Result<int> shell_run(const std::string& cmd, std::string* out = nullptr) {
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
  Result<int> run(const std::string& cmd, std::string* out = nullptr) {
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

  std::optional<uint64_t> size_of(const std::string& path) {
    sftp_attributes a = sftp_stat(sftp, path.c_str());
    if (!a) return std::nullopt;
    uint64_t size = a->size;
    sftp_attributes_free(a);
    return size;
  }

  // Reads up to `max` bytes of `path` from `offset`.
  std::optional<std::string> read(const std::string& path, uint64_t offset, size_t max) {
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

  Result<void> write(const std::string& path, std::string_view content, int mode) {
    std::string tmp = path + ".tmp";
    sftp_file f = sftp_open(sftp, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (!f) return fail(cfg.name, ": cannot write ", tmp, ": ", err());
    size_t done = 0;
    while (done < content.size()) {
      ssize_t n =
          sftp_write(f, content.data() + done, std::min<size_t>(content.size() - done, 65536));
      if (n <= 0) {
        sftp_close(f);
        return fail(cfg.name, ": cannot write ", tmp, ": ", err());
      }
      done += static_cast<size_t>(n);
    }
    sftp_close(f);
    sftp_unlink(sftp, path.c_str());
    if (sftp_rename(sftp, tmp.c_str(), path.c_str()) != 0)
      return fail(cfg.name, ": cannot rename ", tmp, ": ", err());
    return {};
  }
};

struct Run {
  std::string id;
  int attempt = 0;
  Host* host = nullptr;
  std::string dir;      // on the host
  fs::path head_dir;    // on the head
  std::string record;   // on the host: where its supervisor records the exit
  AttemptIdentity who;  // what a genuine record must say
  bool warned_forged = false;
  uint64_t offset = 0;
  ArrivalReader times{0};  // stdout.times on the host
  int sup_pid = -1;
  std::optional<int> child_pid;
  bool pid_asked = false;
  bool exited = false;  // exit record read and all output delivered
  std::optional<ExitInfo> exit;
  std::set<std::string> checkpoints;         // retained, on the host
  std::set<std::string> found_at_attach;     // checkpoint dirs there when re-attached
  std::map<std::string, double> adopted_at;  // checkpoint -> when it was registered
  // sync: a queue of commands; a checkpoint's step is published (renamed) when it succeeds
  struct Step {
    std::vector<std::string> cmd;
    fs::path staging, final_path;    // empty for the files step
    std::vector<std::string> batch;  // checkpoints copied together into `staging` (by name)
  };
  pid_t sync_pid = -1;
  std::optional<Step> current;
  std::vector<Step> sync_steps;
  bool sync_due = false;
  double next_sync = 0;
  double sync_started = 0;
};

}  // namespace

struct SshExecutor::Impl {
  SshOptions opts;
  // Timings for the log (bench/bench.py reads them): trial starts, whole syncs, and the time
  // the loop spent in sync bookkeeping per turn.
  std::vector<double> start_ms, sync_ms;
  double sync_poll_max_ms = 0;
  std::vector<double> publish_ms;  // checkpoint registered -> complete on the head
  uint64_t published_bytes = 0;
  std::vector<std::unique_ptr<Host>> hosts;
  std::unordered_map<std::string, Run> runs;
  double last_poll = 0;

  Host* host(const std::string& name) {
    for (auto& h : hosts)
      if (h->cfg.name == name) return h.get();
    return nullptr;
  }

  // "it sent SHA256:..., known: SHA256:..." (OpenSSH's form of fingerprint), as far as known.
  static std::string key_fingerprints(Host& h) {
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
    (void)ssh_get_server_publickey(h.session, &sent);
    std::string out = "it sent " + fingerprint(sent);
    ssh_key_free(sent);
    // The known keys: this host's lines of known_hosts (plain names; hashed ones cannot be
    // matched without the key being asked for).
    std::string names =
        h.cfg.port == 22 ? h.cfg.host : "[" + h.cfg.host + "]:" + std::to_string(h.cfg.port);
    auto split = [](const std::string& text, char sep) {
      std::vector<std::string> parts;
      size_t start = 0;
      for (size_t at; (at = text.find(sep, start)) != std::string::npos; start = at + 1)
        parts.push_back(text.substr(start, at - start));
      parts.push_back(text.substr(start));
      return parts;
    };
    auto text = util::read_file(util::expand_user(h.cfg.known_hosts), 1 << 20);
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

  std::string ssh_words(const Host& h) const {
    std::string w = "ssh -o ControlMaster=no -o ControlPath=" + h.control_path +
                    " -o BatchMode=yes -p " + std::to_string(h.cfg.port);
    return w;
  }

  // The rsync commands that bring one trial dir to the head: its files (not checkpoints, not
  // staging), then each retained checkpoint the head lacks, into a staging name first.
  // trial.sync_workdir: the workdir's copy on `h` is current before a trial starts there.
  Result<void> ensure_workdir(Host& h) {
    if (!opts.workdir || h.workdir_ready) return {};
    const auto& p = *opts.workdir;
    std::string copy = h.info.exp_dir + "/" + kWorkdirCopy;
    std::string stamp_file = copy + "/.tune_workdir_stamp";
    if (auto there = h.read(stamp_file, 0, 64); there && *there == p.stamp + "\n") {
      spdlog::info("host {}: the copy of {} there is current: not copied again", h.cfg.name,
                   p.workdir.string());
      h.workdir_ready = true;
      return {};
    }
    std::vector<std::string> cmd = {"rsync", "-rlt", "-e", ssh_words(h),
                                    "--exclude=/.tune_workdir_stamp"};
    for (const auto& x : p.excludes) cmd.push_back("--exclude=" + x);
    std::string dst = (h.cfg.user.empty() ? "" : h.cfg.user + "@") + h.cfg.host + ":" + copy + "/";
    cmd.push_back(p.workdir.string() + "/");
    cmd.push_back(dst);
    fs::path log = opts.head_exp_dir / ".tune" / ("workdir-" + std::to_string(h.index) + ".log");
    double t0 = clock_s(CLOCK_MONOTONIC);
    auto rc = util::run_process(cmd, log);
    if (!rc || *rc != 0)
      return fail("cannot copy trial.workdir ", p.workdir.string(), " to ", h.cfg.name, ": ",
                  rc ? util::last_line(log) : rc.error().message);
    if (auto w = h.write(stamp_file, p.stamp + "\n", 0644); !w) return w;
    std::string left;
    for (const auto& x : p.left_out) left += (left.empty() ? "" : ", ") + x;
    spdlog::info("host {}: copied {} to {} ({} files, {:.1f} MB, {:.2f} s){}", h.cfg.name,
                 p.workdir.string(), copy, p.files, static_cast<double>(p.bytes) / 1e6,
                 clock_s(CLOCK_MONOTONIC) - t0, left.empty() ? "" : "; left out: " + left);
    h.workdir_ready = true;
    return {};
  }

  // The command that copies `src` on host `h` to `dst` on the head (rsync over the host's
  // master connection, or the user's syncer template).
  std::vector<std::string> copy_from(const Host& h, const std::string& src, const std::string& dst,
                                     const std::vector<std::string>& extra) const {
    std::string remote = (h.cfg.user.empty() ? "" : h.cfg.user + "@") + h.cfg.host + ":";
    if (opts.syncer != "rsync") return util::fill_template(opts.syncer, remote + src, dst);
    std::vector<std::string> cmd = {"rsync", "-rlt", "-e", ssh_words(h)};
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    cmd.push_back(remote + src);
    cmd.push_back(dst);
    return cmd;
  }

  void plan_sync(Run& r) {
    if (opts.syncer == "none") return;
    Host& h = *r.host;
    std::vector<Run::Step> steps;
    std::error_code ec;
    fs::create_directories(r.head_dir, ec);
    auto rsync = [&](const std::string& src, const std::string& dst,
                     const std::vector<std::string>& extra) {
      return copy_from(h, src, dst, extra);
    };
    // Unchanged since the last sync (nothing in the trial dir newer than its mark, checked by
    // the kept shell in a few ms): no rsync. Otherwise the mark is set first, so that a file
    // written while rsync runs is seen as changed next time.
    std::string check_out;
    auto check =
        h.up ? h.shell_run(
                   "cd -- " + q(r.dir) + " 2>/dev/null || exit 0; if [ -e .tune_sync_mark ] && " +
                       "[ -z \"$(find . \\( -name 'checkpoint_*' -o -name '.staged_checkpoint_*' " +
                       "-o -name '.pending_checkpoint_*' \\) -prune -o -newer .tune_sync_mark " +
                       "-print -quit)\" ]; then echo unchanged; else touch .tune_sync_mark; fi",
                   &check_out)
             : Result<int>(1);
    if (!check) check_out.clear();
    bool unchanged = check && check_out.find("unchanged") != std::string::npos;
    if (!unchanged)
      steps.push_back(
          {rsync(r.dir + "/", r.head_dir.string() + "/",
                 {"--exclude=checkpoint_*", "--exclude=stdin.fifo", "--exclude=.tune_sync_mark",
                  "--exclude=.staged_checkpoint_*", "--exclude=.pending_checkpoint_*",
                  "--exclude=*.tmp", "--exclude=result.json", "--exclude=progress.csv"}),
           {},
           {},
           {}});
    std::vector<std::string> missing;
    for (const auto& c : r.checkpoints)
      if (!fs::exists(r.head_dir / c, ec)) missing.push_back(c);  // complete ones never change
    if (opts.syncer == "rsync" && missing.size() > 1) {
      // One rsync for all of them (each costs an rsync start otherwise, ~0.2 s over ssh).
      fs::path staging = r.head_dir / kBatchStaging;
      (void)util::remove_tree_nofollow(r.head_dir, kBatchStaging);
      fs::create_directories(staging, ec);
      std::string remote = (h.cfg.user.empty() ? "" : h.cfg.user + "@") + h.cfg.host + ":";
      std::vector<std::string> cmd = {"rsync", "-rlt", "-e", ssh_words(h)};
      for (const auto& c : missing) cmd.push_back(remote + r.dir + "/" + c);
      cmd.push_back(staging.string() + "/");
      steps.push_back({std::move(cmd), staging, {}, missing});
      missing.clear();
    }
    for (const auto& c : missing) {
      fs::path staging = r.head_dir / (".sync_" + c);
      (void)util::remove_tree_nofollow(r.head_dir, ".sync_" + c);
      steps.push_back(
          {rsync(r.dir + "/" + c + "/", staging.string() + "/", {}), staging, r.head_dir / c, {}});
    }
    r.sync_steps = std::move(steps);
  }

  void start_next_step(Run& r) {
    while (!r.sync_steps.empty()) {
      r.current = std::move(r.sync_steps.front());
      r.sync_steps.erase(r.sync_steps.begin());
      auto pid = util::spawn_process(r.current->cmd, sync_log(r));
      if (pid) {
        r.sync_pid = *pid;
        return;
      }
      spdlog::warn("trial {}: sync: {}", r.id, pid.error().message);
    }
    r.current.reset();
  }

  fs::path sync_log(const Run& r) const {
    return opts.head_exp_dir / ".tune" / ("sync-" + r.id + ".log");
  }

  // Checkpoints copied together (plan_sync): each appears under its name only if the copy
  // succeeded and retention still keeps it; the rest of the staging dir goes.
  void finish_batch(Run& r, int status, double now) {
    const Run::Step& s = *r.current;
    std::vector<Run::Step> retry;
    for (const auto& n : s.batch) {
      std::error_code ec;
      fs::path from = s.staging / n, to = r.head_dir / n;
      if (!r.checkpoints.count(n) || fs::exists(to, ec)) continue;  // pruned, or there already
      if (status != 0 || !fs::is_directory(from, ec)) {
        // A failed batch publishes nothing (a source that retention pruned meanwhile fails it
        // too): each checkpoint still kept is copied again on its own, right after.
        fs::path staging = r.head_dir / (".sync_" + n);
        (void)util::remove_tree_nofollow(r.head_dir, ".sync_" + n);
        retry.push_back({copy_from(*r.host, r.dir + "/" + n + "/", staging.string() + "/", {}),
                         staging,
                         to,
                         {}});
        continue;
      }
      for (fs::recursive_directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec)) published_bytes += it->file_size(ec);
      fs::rename(from, to, ec);
      if (ec) spdlog::warn("trial {}: cannot publish {}: {}", r.id, to.string(), ec.message());
      if (auto at = r.adopted_at.find(n); at != r.adopted_at.end()) {
        publish_ms.push_back((now - at->second) * 1000);
        r.adopted_at.erase(at);
      }
    }
    (void)util::remove_tree_nofollow(r.head_dir, s.staging.filename().string());
    r.sync_steps.insert(r.sync_steps.begin(), std::make_move_iterator(retry.begin()),
                        std::make_move_iterator(retry.end()));
  }

  // Advances a trial's sync; true while one runs.
  bool poll_sync(Run& r, double now) {
    if (r.sync_pid > 0) {
      auto status = util::try_wait(r.sync_pid);
      if (!status && now - r.sync_started > opts.sync_timeout) {
        // A pull that hangs (a stalled link, a stuck syncer) is killed; the next period's sync
        // copies what it missed. An ended trial's last sync is not retried: its exit waits.
        spdlog::warn("trial {}: sync from {} ran longer than sync_timeout ({} s): killed; {}", r.id,
                     r.host->cfg.name, util::format_double(opts.sync_timeout),
                     r.exited ? "the trial's last files may be missing on the head"
                              : "retried at the next sync period");
        drop_sync(r);
        r.sync_steps.clear();
        r.next_sync = now + opts.sync_period;
        return false;
      }
      if (!status) return true;
      r.sync_pid = -1;
      bool pruned = r.current && !r.current->final_path.empty() &&
                    !r.checkpoints.count(r.current->final_path.filename().string());
      if (r.current && !r.current->batch.empty()) {
        finish_batch(r, *status, now);
      } else if (*status != 0 && pruned) {
        // deleted by retention while it was being copied: nothing to bring back
        (void)util::remove_tree_nofollow(r.head_dir, r.current->staging.filename().string());
      } else if (*status != 0) {
        spdlog::warn("trial {}: sync from {} failed (exit {}): {}", r.id, r.host->cfg.name, *status,
                     util::last_line(sync_log(r)));
        if (r.current && !r.current->staging.empty())
          (void)util::remove_tree_nofollow(r.head_dir, r.current->staging.filename().string());
      } else if (pruned) {
        // copied, but retention deleted it meanwhile: it must not reappear on the head
        (void)util::remove_tree_nofollow(r.head_dir, r.current->staging.filename().string());
      } else if (r.current && !r.current->final_path.empty()) {
        // A checkpoint copied completely: only now does it appear under its name.
        std::error_code ec;
        if (!fs::exists(r.current->final_path, ec)) {
          for (fs::recursive_directory_iterator it(r.current->staging, ec), end; !ec && it != end;
               it.increment(ec))
            if (it->is_regular_file(ec)) published_bytes += it->file_size(ec);
          fs::rename(r.current->staging, r.current->final_path, ec);
          auto name = r.current->final_path.filename().string();
          if (auto at = r.adopted_at.find(name); at != r.adopted_at.end()) {
            publish_ms.push_back((now - at->second) * 1000);
            r.adopted_at.erase(at);
          }
        }
        if (ec)
          spdlog::warn("trial {}: cannot publish {}: {}", r.id, r.current->final_path.string(),
                       ec.message());
      }
      r.current.reset();
      if (!r.sync_steps.empty()) {
        start_next_step(r);
        return r.sync_pid > 0;
      }
      sync_ms.push_back((now - r.sync_started) * 1000);
      r.next_sync = now + opts.sync_period;
    }
    if (r.sync_due || (now >= r.next_sync && !r.exited)) {
      r.sync_due = false;
      r.next_sync = now + opts.sync_period;
      r.sync_started = now;
      plan_sync(r);
      start_next_step(r);
      if (r.sync_pid <= 0) sync_ms.push_back((clock_s(CLOCK_MONOTONIC) - now) * 1000);
      return r.sync_pid > 0;
    }
    return false;
  }

  // Connects (or reconnects) a host: session, host-key check, auth, SFTP, its dirs, the
  // supervisor, the rsync master. Touches only `h` (runs on a helper thread when reconnecting).
  Result<void> open_host(Host& h) {
    h.session = ssh_new();
    if (!h.session) return fail("cannot create an SSH session");
    long timeout = 5;  // connect, and every blocking operation: a dead link is noticed
    int port = h.cfg.port;
    ssh_options_set(h.session, SSH_OPTIONS_HOST, h.cfg.host.c_str());
    ssh_options_set(h.session, SSH_OPTIONS_PORT, &port);
    if (!h.cfg.user.empty()) ssh_options_set(h.session, SSH_OPTIONS_USER, h.cfg.user.c_str());
    ssh_options_set(h.session, SSH_OPTIONS_TIMEOUT, &timeout);
    std::string kh = util::expand_user(h.cfg.known_hosts).string();
    ssh_options_set(h.session, SSH_OPTIONS_KNOWNHOSTS, kh.c_str());
    ssh_options_set(h.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
    if (ssh_connect(h.session) != SSH_OK) return fail("cannot connect: ", h.err());
    // A dead link must fail operations within seconds rather than hang the driver's loop:
    // unacknowledged data times out after 5 s, an idle connection is probed after 2 s.
    if (int fd = ssh_get_fd(h.session); fd >= 0) {
      int user_timeout_ms = 5000, on = 1, idle = 2, intvl = 1, cnt = 3;
      ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
      ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    }
    switch (ssh_session_is_known_server(h.session)) {
      case SSH_KNOWN_HOSTS_OK:
        break;
      case SSH_KNOWN_HOSTS_CHANGED:
      case SSH_KNOWN_HOSTS_OTHER:
        h.key_changed = true;
        return fail("its host key differs from the one in ", kh, " (", key_fingerprints(h),
                    "): refused (possible man-in-the-middle; remove the old key if the host "
                    "was reinstalled)");
      case SSH_KNOWN_HOSTS_UNKNOWN:
      case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (ssh_session_update_known_hosts(h.session) != SSH_OK)
          return fail("cannot record its host key in ", kh, ": ", h.err());
        spdlog::info("{}: new host key recorded in {}", h.cfg.name, kh);
        break;
      default:
        return fail("cannot check its host key: ", h.err());
    }
    int rc = SSH_AUTH_DENIED;
    if (!h.cfg.identity_file.empty()) {
      ssh_key key = nullptr;
      std::string path = util::expand_user(h.cfg.identity_file).string();
      if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK)
        return fail("cannot read identity_file ", path);
      rc = ssh_userauth_publickey(h.session, nullptr, key);
      ssh_key_free(key);
    } else {
      rc = ssh_userauth_agent(h.session, nullptr);
      if (rc != SSH_AUTH_SUCCESS) rc = ssh_userauth_publickey_auto(h.session, nullptr, nullptr);
    }
    if (rc != SSH_AUTH_SUCCESS) return fail("public-key authentication failed: ", h.err());
    h.sftp = sftp_new(h.session);
    if (!h.sftp || sftp_init(h.sftp) != SSH_OK) return fail("cannot start SFTP: ", h.err());
    // Where things go on the host.
    std::string root = h.cfg.storage_path.empty() ? "~/tune_results" : h.cfg.storage_path;
    if (root.starts_with("~/")) {
      char* home = sftp_canonicalize_path(h.sftp, ".");
      if (!home) return fail("cannot find the home directory: ", h.err());
      root = std::string(home) + root.substr(1);
      ssh_string_free_char(home);
    }
    h.info.name = h.cfg.name;
    h.info.exp_dir = root + "/" + opts.exp_name;
    std::string bin = root + "/" + kBinDir;
    h.info.helpers_dir = bin + "/python";
    std::string out;
    auto st = h.run("mkdir -p -- " + q(h.info.exp_dir + "/.tune") + " " + q(h.info.helpers_dir) +
                        " && nproc && ls /dev | grep -c '^nvidia[0-9]' ; true",
                    &out);
    if (!st || *st != 0)
      return fail("cannot create ", h.info.exp_dir, ": ", st ? out : st.error().message);
    int nproc = std::atoi(out.c_str());
    auto nl = out.find('\n');
    int ngpu = nl == std::string::npos ? 0 : std::atoi(out.c_str() + nl + 1);
    h.info.cpus = h.cfg.cpus.value_or(nproc > 0 ? nproc : 1);
    h.info.gpus = h.cfg.gpus.value_or(ngpu);
    // The supervisor and the Python helper, unless the host has them already.
    h.supervisor = bin + "/tune-supervisor";
    for (auto [local, remote, mode] :
         {std::tuple{opts.supervisor, h.supervisor, 0755},
          std::tuple{opts.python_helper, h.info.helpers_dir + "/tune_trial.py", 0644}}) {
      if (local.empty()) continue;
      auto content = util::read_file(local, 64u << 20);
      if (!content) return fail(content.error().message);
      if (h.size_of(remote) == content->size()) {
        auto there = h.read(remote, 0, content->size());
        if (there && *there == *content) continue;
      }
      if (auto w = h.write(remote, *content, mode); !w) return w;
      sftp_chmod(h.sftp, remote.c_str(), static_cast<mode_t>(mode));
    }
    h.lease = h.info.exp_dir + "/.tune/lease";
    h.shell_buf.clear();
    if (auto sh = h.open_shell(); !sh) return sh;
    // rsync goes through an OpenSSH master connection that the driver owns.
    if (opts.syncer == "rsync") {
      // Under the experiment's .tune dir (one driver at a time holds it), unless that path is
      // too long for a Unix socket; a socket a killed master left is removed before the start.
      // The master itself gets SIGTERM when the driver dies (util::spawn_process).
      h.control_path =
          (opts.head_exp_dir / ".tune" / ("ssh-" + std::to_string(h.index) + ".sock")).string();
      if (h.control_path.size() > 100)
        h.control_path = "/tmp/tune-cm-" +
                         std::to_string(std::hash<std::string>{}(opts.head_exp_dir.string())) +
                         "-" + std::to_string(h.index);
      if (fs::exists(h.control_path)) {  // a master an earlier driver (or connection) left
        std::string stop = "ssh -o ControlPath=" + util::shell_quote(h.control_path) +
                           " -O exit localhost >/dev/null 2>&1";
        (void)!std::system(stop.c_str());
        ::unlink(h.control_path.c_str());
      }
      std::vector<std::string> cmd = {"ssh",
                                      "-M",
                                      "-N",
                                      "-o",
                                      "ControlPath=" + h.control_path,
                                      "-o",
                                      "BatchMode=yes",
                                      "-o",
                                      "UserKnownHostsFile=" + kh,
                                      "-o",
                                      "StrictHostKeyChecking=yes",
                                      "-o",
                                      "ServerAliveInterval=5",
                                      "-p",
                                      std::to_string(h.cfg.port)};
      if (!h.cfg.identity_file.empty()) {
        cmd.push_back("-i");
        cmd.push_back(util::expand_user(h.cfg.identity_file).string());
      }
      if (!h.cfg.user.empty()) {
        cmd.push_back("-l");
        cmd.push_back(h.cfg.user);
      }
      cmd.push_back(h.cfg.host);
      auto pid =
          util::spawn_process(cmd, opts.head_exp_dir / ".tune" / ("ssh-" + h.cfg.name + ".log"));
      if (!pid) return fail(pid.error().message);
      h.master = *pid;
      for (int i = 0; i < 100 && !fs::exists(h.control_path); ++i) ::usleep(50000);
      if (!fs::exists(h.control_path))
        return fail("the ssh master connection for rsync did not come up: ",
                    util::last_line(opts.head_exp_dir / ".tune" / ("ssh-" + h.cfg.name + ".log")));
    }
    return {};
  }

  std::vector<Event> host_events;

  // The processes on `h` that run a tune-supervisor in the host's own mount namespace (hosts
  // that share a pid namespace, as test hosts do, do not see each other's), as "PID ARGS..."
  // lines (argv joined by spaces); nullopt if the host could not be asked. A supervisor is not
  // dumpable (its nonce), so only root can read its namespace: one that cannot be read counts
  // (the trial dir in its command line tells hosts apart then).
  static std::optional<std::string> supervisor_processes(Host& h) {
    std::string out;
    auto st = h.shell_run(
        "m=$(readlink /proc/$$/ns/mnt); for p in $(pgrep -f tune-supervisor 2>/dev/null); do "
        "n=$(readlink /proc/$p/ns/mnt 2>/dev/null); "
        "{ [ -z \"$n\" ] || [ \"$n\" = \"$m\" ]; } && printf '%s %s\\n' \"$p\" "
        "\"$(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null)\"; done; true",
        &out);
    if (!st) return std::nullopt;
    return out;
  }

  // An attempt of `l` on host `h`: its dir there and on the head, reading from l's offset.
  Run new_run(const Launch& l, Host* h) const {
    Run r;
    r.id = l.trial_id;
    r.attempt = l.attempt;
    r.host = h;
    r.dir = h->info.exp_dir + "/" + l.trial_dir.filename().string();
    r.head_dir = opts.head_exp_dir / l.trial_dir.filename();
    r.offset = l.stdout_offset;
    r.times = ArrivalReader(l.attempt);
    std::string name = l.trial_dir.filename().string();
    r.record = h->info.exp_dir + "/" + record_path(name);
    r.who.nonce = attempt_nonce(opts.record_key, name, l.attempt);
    return r;
  }

  // Stops a trial's sync, if one runs, and drops what it was copying.
  void drop_sync(Run& r) {
    if (r.sync_pid <= 0) return;
    util::kill_and_reap(r.sync_pid);
    r.sync_pid = -1;
    if (r.current && !r.current->staging.empty())
      (void)util::remove_tree_nofollow(r.head_dir, r.current->staging.filename().string());
    r.current.reset();
  }

  // Copies of checkpoints that a sync killed with an earlier driver left half done.
  static void remove_sync_leftovers(const fs::path& head_dir) {
    std::error_code ec;
    std::vector<std::string> stale;
    for (fs::directory_iterator it(head_dir, ec), end; !ec && it != end; it.increment(ec))
      if (auto name = it->path().filename().string(); name.starts_with(".sync_checkpoint_"))
        stale.push_back(name);
    for (const auto& name : stale) (void)util::remove_tree_nofollow(head_dir, name);
  }

  // The head's stdout.log and stderr.log go to the host first when the host's copies are
  // shorter (the trial ran elsewhere before), so that the host's files, which the syncs bring
  // back over the head's, keep every earlier attempt.
  void push_logs(Host& h, const Run& r) {
    for (const char* log : {"stdout.log", "stderr.log"}) {
      uint64_t here = util::file_size_or_zero(r.head_dir / log);
      if (here == 0 || h.size_of(r.dir + "/" + log).value_or(0) >= here) continue;
      (void)h.shell_run("mkdir -p -- " + q(r.dir));
      auto content = util::read_file(r.head_dir / log);
      auto w = content ? h.write(r.dir + "/" + log, *content, 0644)
                       : Result<void>(std::unexpected(content.error()));
      if (!w)
        spdlog::warn(
            "trial {}: cannot copy {} to {}: earlier attempts' output stays on the "
            "head only: {}",
            r.id, log, h.cfg.name, w.error().message);
    }
  }

  void mark_down(Host& h, double now) {
    if (!h.up) return;
    h.up = false;
    h.down_since = now;
    h.backoff = 1;
    h.next_retry = now + h.backoff;
    spdlog::warn("host {}: connection lost ({}); reconnecting, its trials keep running there",
                 h.cfg.name, h.err());
    host_events.emplace_back(std::in_place_type<HostEvent>, HostEvent{h.cfg.name, false});
  }

  // Checks a host after an operation failed.
  void check(Host& h) {
    if (h.up && h.broken()) mark_down(h, clock_s(CLOCK_MONOTONIC));
  }

  // Reconnects down hosts in the background; re-queues the trials of hosts lost for longer
  // than host_timeout_s.
  void tend_hosts(double now, std::vector<Event>& exits) {
    for (auto& hp : hosts) {
      Host& h = *hp;
      if (h.up) continue;
      if (h.reconnect.joinable() && h.reconnect_done) {
        h.reconnect.join();
        if (h.reconnect_result) {
          h.up = true;
          spdlog::warn("host {}: reconnected after {:.1f} s", h.cfg.name, now - h.down_since);
          for (int pid : h.superseded)  // attempts re-queued elsewhere meanwhile
            (void)h.shell_run("kill -TERM " + std::to_string(pid) + " 2>/dev/null; true");
          h.superseded.clear();
          h.lost = false;
          host_events.emplace_back(std::in_place_type<HostEvent>, HostEvent{h.cfg.name, true});
          continue;
        }
        if (h.key_changed) {
          spdlog::error("host {}: {}; it is not used again in this run", h.cfg.name,
                        h.reconnect_result.error().message);
        } else {
          spdlog::debug("host {}: reconnect failed: {}", h.cfg.name,
                        h.reconnect_result.error().message);
        }
        h.backoff = std::min(h.backoff * 2, 10.0);
        h.next_retry = now + h.backoff;
      }
      if (!h.lost && (h.key_changed || now - h.down_since > opts.host_timeout_s)) {
        h.lost = true;
        if (h.key_changed)
          spdlog::warn("host {}: its host key changed: its trials are re-queued", h.cfg.name);
        else
          spdlog::warn("host {}: unreachable for {:.0f} s: its trials are re-queued", h.cfg.name,
                       now - h.down_since);
        for (auto it = runs.begin(); it != runs.end();) {
          Run& r = it->second;
          if (r.host != &h || r.exited) {
            ++it;
            continue;
          }
          if (r.sup_pid > 0) h.superseded.push_back(r.sup_pid);
          ExitInfo info;
          info.attempt = r.attempt;
          info.reason = "host_lost";
          info.error = h.key_changed ? "host " + h.cfg.name + ": its host key changed"
                                     : "host " + h.cfg.name + " unreachable for " +
                                           util::format_short(now - h.down_since) + " s";
          exits.emplace_back(std::in_place_type<ExitEvent>, ExitEvent{it->first, info});
          drop_sync(r);
          it = runs.erase(it);
        }
      }
      if (!h.reconnect.joinable() && now >= h.next_retry && !h.key_changed) {
        h.close();
        h.reconnect_done = false;
        h.reconnect = std::thread([this, &h] {
          h.reconnect_result = open_host(h);
          h.reconnect_done = true;
        });
      }
    }
  }

  // Every kSupervisorCheck seconds, per host: are the supervisors of its running attempts
  // alive? One that is gone without an exit record (killed, or it could not write the record,
  // e.g. on a full disk) ends its attempt as supervisor_died, instead of a wait forever.
  double last_supervisor_check = 0;
  void check_supervisors(double now) {
    if (now - last_supervisor_check < kSupervisorCheck) return;
    last_supervisor_check = now;
    for (auto& host : hosts) {
      Host& h = *host;
      if (!h.up) continue;
      std::string cmd;
      std::vector<Run*> asked;
      for (auto& [id, r] : runs) {
        if (r.host != &h || r.exit || r.exited || r.sup_pid <= 0) continue;
        // "G PID" if gone: no such process, or a zombie (by its state in /proc/PID/stat; not
        // by its command line, which is the shell's until the supervisor is exec'd); else,
        // while the trial's pid is not known, "C PID CHILD" (to end it if need be).
        std::string p = std::to_string(r.sup_pid);
        cmd +=
            "s=$(sed 's/.*) //' /proc/" + p + "/stat 2>/dev/null | cut -c1); " +
            "if [ -z \"$s\" ] || [ \"$s\" = Z ] || [ \"$s\" = X ]; then echo G " + p + "; else " +
            (r.child_pid
                 ? std::string(":")
                 : "echo C " + p + " $(cat /proc/" + p + "/task/" + p + "/children 2>/dev/null)") +
            "; fi; ";
        asked.push_back(&r);
      }
      if (asked.empty()) continue;
      std::string out;
      auto st = h.shell_run(cmd + "true", &out);
      if (!st || *st != 0) continue;  // the host is checked by tend_hosts
      std::set<int> gone;
      std::map<int, int> children;
      for (size_t at = 0; at < out.size();) {
        size_t nl = out.find('\n', at);
        if (nl == std::string::npos) nl = out.size();
        int pid = 0, child = 0;
        char kind = 0;
        int n = std::sscanf(out.c_str() + at, "%c %d %d", &kind, &pid, &child);
        if (n >= 2 && kind == 'G') gone.insert(pid);
        if (n == 3 && kind == 'C' && child > 0) children[pid] = child;
        at = nl + 1;
      }
      for (Run* r : asked) {
        if (auto c = children.find(r->sup_pid); c != children.end()) r->child_pid = c->second;
        if (!gone.count(r->sup_pid)) continue;
        read_exit(*r);  // it may have written the record just before it exited
        if (r->exit) continue;
        ExitInfo info;
        info.attempt = r->attempt;
        info.reason = "supervisor_died";
        info.error = "the trial's supervisor on " + h.cfg.name +
                     " is gone without recording the trial's exit (killed, or the host's disk "
                     "is full)";
        info.pid = r->child_pid;
        spdlog::warn("trial {}: {}{}", r->head_dir.filename().string(), info.error,
                     r->child_pid ? "; ending its trial, pid " + std::to_string(*r->child_pid)
                                  : std::string("; ending its trial's session"));
        // Its trial may still run: end it, so that a retry never runs beside it. The
        // supervisor led its own session, which the trial's processes stay in (pkill -s), and
        // the trial leads its own process group (when its pid is known).
        std::string end = "pkill -KILL -s " + std::to_string(r->sup_pid) + " 2>/dev/null; ";
        if (r->child_pid && *r->child_pid > 0)
          end += "kill -KILL -" + std::to_string(*r->child_pid) + " 2>/dev/null; ";
        (void)h.shell_run(end + "true");
        r->exit = std::move(info);
      }
    }
  }

  // This attempt's exit, if its supervisor recorded it; a record it did not write is ignored,
  // with a warning once per attempt.
  void read_exit(Run& r) {
    ExitInfo info;
    switch (check_exit_record(r.host->read(r.record, 0, 1 << 20), r.attempt, r.who, info)) {
      case RecordCheck::kGenuine:
        r.exit = std::move(info);
        if (r.exit->pid) r.child_pid = r.exit->pid;
        break;
      case RecordCheck::kForged:
        if (!r.warned_forged)
          spdlog::warn(
              "trial {}: ignoring an exit record for attempt {} that its supervisor did not "
              "write ({} on {}); the trial is still supervised",
              r.head_dir.filename().string(), r.attempt, r.record, r.host->cfg.name);
        r.warned_forged = true;
        break;
      case RecordCheck::kAbsent:
        break;
    }
  }
};

SshExecutor::SshExecutor(SshOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
}

namespace {
double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

SshExecutor::~SshExecutor() {
  auto& impl = *impl_;
  if (!impl.start_ms.empty())
    spdlog::info(
        "ssh timings: {} starts, median {:.2f} ms; {} syncs, median {:.2f} ms; longest "
        "sync bookkeeping in one loop turn {:.2f} ms; {} checkpoints published, {} bytes, "
        "median {:.2f} ms after registration",
        impl.start_ms.size(), median_of(impl.start_ms), impl.sync_ms.size(),
        median_of(impl.sync_ms), impl.sync_poll_max_ms, impl.publish_ms.size(),
        impl.published_bytes, median_of(impl.publish_ms));
  for (auto& [id, r] : impl_->runs) impl.drop_sync(r);
}

std::vector<SshHostInfo> SshExecutor::connect(const std::vector<SshHostConfig>& configs) {
  auto& impl = *impl_;
  std::vector<SshHostInfo> ready;
  int index = 0;
  for (const auto& cfg : configs) {
    auto h = std::make_unique<Host>();
    h->cfg = cfg;
    h->index = index;
    auto why = impl.open_host(*h);
    ++index;
    if (!why) {
      spdlog::error("host {}: {}; it is left out", cfg.name, why.error().message);
      continue;
    }
    h->up = true;
    ready.push_back(h->info);
    impl.hosts.push_back(std::move(h));
  }
  renew_lease();
  return ready;
}

Result<void> SshExecutor::start(const Launch& l) {
  auto& impl = *impl_;
  Host* h = impl.host(l.host);
  if (!h) return fail("unknown host ", l.host);
  if (auto made = prepare_trial_dir(l); !made) return made;  // the head's copy
  Run r = impl.new_run(l, h);
  if (auto it = impl.runs.find(l.trial_id); it != impl.runs.end()) {
    r.checkpoints = it->second.checkpoints;
    impl.drop_sync(it->second);
  }
  impl.remove_sync_leftovers(r.head_dir);
  // trial.sync_workdir: the trial runs in the workdir's copy there, and words of its command
  // that name a path inside the workdir name the same path in the copy.
  std::string cwd = l.cwd.string();
  std::vector<std::string> argv = l.argv;
  if (impl.opts.workdir && h->up) {
    if (auto w = impl.ensure_workdir(*h); !w) {
      impl.check(*h);
      if (h->up) return w;  // else: host_lost below, re-queued
    }
    std::string from = impl.opts.workdir->workdir.string();
    std::string to = h->info.exp_dir + "/" + kWorkdirCopy;
    auto remap = [&](std::string& s) {
      if (s == from)
        s = to;
      else if (s.starts_with(from + "/"))
        s = to + s.substr(from.size());
    };
    remap(cwd);
    for (auto& a : argv) remap(a);
  }
  // params.json, then the supervisor in the background; each word quoted for the host's shell.
  // The attempt's output starts where stdout.log ends now on the host (the head's copy may
  // lag, or be missing while the host has one from an earlier run): it prints that first.
  std::string cmd = "mkdir -p -- " + q(r.dir) + " && rm -f -- " + q(r.record) +
                    " && { stat -c %s -- " + q(r.dir + "/stdout.log") +
                    " 2>/dev/null || echo 0; } && ( env";
  for (const auto& [k, v] : l.env) cmd += " " + q(k + "=" + v);
  cmd += " " + q(h->supervisor) + " " + q(r.dir) + " " + std::to_string(l.attempt) + " " +
         q(h->lease) + " " + util::format_double(impl.opts.orphan_timeout_s) + " " +
         util::format_double(impl.opts.grace_s) + " " + q(cwd) + " " +
         (l.stdin_fifo ? "fifo" : "null") + " " + q(r.record) + " --";
  for (const auto& a : argv) cmd += " " + q(a);
  // (a subshell: the supervisor is orphaned to init at once, never a child of the kept shell;
  // the nonce reaches its stdin through a here-document, never a command line)
  cmd += " <<'TUNE_NONCE' >/dev/null 2>&1 & echo $! )\n" + r.who.nonce + "\nTUNE_NONCE";
  if (auto params = util::read_file(l.trial_dir / "params.json", 1u << 20)) {
    (void)h->shell_run("mkdir -p -- " + q(r.dir));
    if (auto w = h->write(r.dir + "/params.json", *params, 0644); !w)
      spdlog::warn("{}", w.error().message);
  }
  // A host that went down just now: the attempt ends as host_lost and is re-queued.
  auto lost = [&](const std::string& why) -> Result<void> {
    impl.check(*h);
    r.exit = ExitInfo{};
    r.exit->attempt = l.attempt;
    r.exit->reason = "host_lost";
    r.exit->error = why;
    r.exited = true;
    impl.runs[l.trial_id] = std::move(r);
    return {};
  };
  if (!h->up) return lost("host " + h->cfg.name + " is unreachable");
  impl.push_logs(*h, r);
  // A restore point the host lacks (the trial ran elsewhere before) is pushed there first.
  if (auto it = l.env.find("TUNE_RESTORE_CHECKPOINT"); it != l.env.end()) {
    std::string name = fs::path(it->second).filename().string();
    if (!h->size_of(it->second)) {
      std::string dst =
          (h->cfg.user.empty() ? "" : h->cfg.user + "@") + h->cfg.host + ":" + r.dir + "/";
      (void)h->shell_run("mkdir -p -- " + q(r.dir));
      auto rc = util::run_process(
          {"rsync", "-rlt", "-e", impl.ssh_words(*h), (r.head_dir / name).string(), dst},
          impl.opts.head_exp_dir / ".tune" / ("push-" + r.id + ".log"));
      if (!rc || *rc != 0)
        return lost("cannot push " + name + " to " + h->cfg.name + ": " +
                    util::last_line(impl.opts.head_exp_dir / ".tune" / ("push-" + r.id + ".log")));
      r.checkpoints.insert(name);
    }
  }
  std::string out;
  double t0 = now();
  auto st = h->shell_run(cmd, &out);
  impl.start_ms.push_back((now() - t0) * 1000);
  if (!st) return lost(st.error().message);
  if (*st != 0)
    return fail(h->cfg.name, ": cannot start the supervisor: ", util::printable(out, 300));
  r.offset = std::strtoull(out.c_str(), nullptr, 10);
  auto nl = out.find('\n');
  r.sup_pid = nl == std::string::npos ? -1 : std::atoi(out.c_str() + nl + 1);
  if (r.sup_pid <= 0)
    return fail(h->cfg.name, ": the supervisor did not start: ", util::printable(out, 300));
  r.who.supervisor = r.sup_pid;
  impl.runs[l.trial_id] = std::move(r);
  return {};
}

Result<Attached> SshExecutor::attach(const Launch& l) {
  auto& impl = *impl_;
  Host* h = impl.host(l.host);
  if (!h || !h->up) return Attached::kGone;  // restarts (from the head's latest checkpoint)
  Run r = impl.new_run(l, h);
  // Its supervisor, by command line (as locally): "<supervisor> <trial dir> <attempt> ..."
  auto procs = Impl::supervisor_processes(*h);
  if (!procs) {
    impl.check(*h);
    return Attached::kGone;
  }
  std::string out = std::move(*procs);
  std::string needle = h->supervisor + " " + r.dir + " " + std::to_string(l.attempt) + " ";
  for (size_t start = 0; start < out.size();) {
    size_t nl = out.find('\n', start);
    std::string line = out.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (line.find(needle) != std::string::npos) r.sup_pid = std::atoi(line.c_str());
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  Attached found = Attached::kRunning;
  impl.remove_sync_leftovers(r.head_dir);
  if (r.sup_pid > 0) r.who.supervisor = r.sup_pid;
  if (r.sup_pid <= 0) {
    impl.read_exit(r);
    if (!r.exit) return Attached::kGone;
    found = Attached::kEnded;
  }
  // The checkpoints it has there (for the syncs).
  if (auto ls = h->shell_run("cd -- " + q(r.dir) + " 2>/dev/null && ls -d checkpoint_* 2>/dev/null",
                             &out);
      ls && *ls == 0)
    for (size_t start = 0; start < out.size();) {
      size_t nl = out.find('\n', start);
      std::string name =
          out.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if (!name.empty()) r.found_at_attach.insert(name);
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  impl.runs[l.trial_id] = std::move(r);
  return found;
}

void SshExecutor::send(const std::string& trial_id, std::string_view line) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end() || it->second.exit || !it->second.host->up) return;
  auto& r = it->second;
  // One line into the trial's FIFO (the supervisor holds it open, so opening it never blocks;
  // it may not exist for a moment right after the start).
  std::string fifo = q(r.dir + "/stdin.fifo");
  auto st =
      r.host->shell_run("for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do [ -p " +
                            fifo + " ] && break; sleep 0.05; done; [ -p " + fifo +
                            " ] && printf '%s\\n' " + q(std::string(line)) + " > " + fifo,
                        nullptr);
  if (!st)
    impl_->check(*r.host);
  else if (*st != 0)
    spdlog::warn("trial {}: cannot send a command to its stdin on {}", trial_id, r.host->cfg.name);
}

Result<void> SshExecutor::make_staging(const std::string& trial_id, const fs::path&,
                                       const std::string& name) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end()) return fail("internal: no remote run for ", trial_id);
  auto& r = it->second;
  std::string out;
  auto st = r.host->shell_run(q(r.host->supervisor) + " --rm " + q(r.dir) + " " + q(name) +
                                  " && mkdir -- " + q(r.dir + "/" + name),
                              &out);
  if (!st) {
    impl_->check(*r.host);
    return std::unexpected(st.error());
  }
  if (*st != 0) return fail(r.host->cfg.name, ": ", util::printable(out, 300));
  return {};
}

void SshExecutor::stop(const std::string& trial_id, bool now) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end() || it->second.exit || it->second.sup_pid <= 0) return;
  auto& r = it->second;
  if (!r.host->up) return;  // unreachable: it stops itself when its lease runs out
  if (!r.host->shell_run(std::string("kill -") + (now ? "USR1" : "TERM") + " " +
                         std::to_string(r.sup_pid) + " 2>/dev/null; true"))
    impl_->check(*r.host);
}

std::vector<Event> SshExecutor::wait(double timeout_s) {
  auto& impl = *impl_;
  std::vector<Event> outputs, exits;
  double t = now();
  if (t - impl.last_poll < kPollPeriod) {
    if (timeout_s > 0) ::usleep(static_cast<useconds_t>(std::min(timeout_s, kPollPeriod) * 1e6));
    t = now();
    if (t - impl.last_poll < kPollPeriod) return {};
  }
  impl.last_poll = t;
  impl.tend_hosts(t, exits);
  impl.check_supervisors(t);
  std::vector<std::string> done;
  for (auto& [id, r] : impl.runs) {
    Host& h = *r.host;
    bool read_some = false;
    if (!r.exited && h.up) {
      if (!r.exit) impl.read_exit(r);  // before reading: once it exists, the output is final
      auto size = h.size_of(r.dir + "/stdout.log");
      if (!size) impl.check(h);
      if (size && *size > r.offset) {
        auto data = h.read(r.dir + "/stdout.log", r.offset,
                           static_cast<size_t>(std::min<uint64_t>(*size - r.offset, kReadChunk)));
        if (!data) impl.check(h);
        if (data && !data->empty()) {
          r.offset += data->size();
          OutputEvent ev(id, std::move(*data));
          // When it arrived, on the host's clocks (its notes are written before the output;
          // none, or an unreadable file: the controller times it as it reads it).
          if (auto notes = h.read(r.dir + "/stdout.times", r.times.offset(), kReadChunk))
            r.times.feed(*notes, ev.arrivals, ev.started);
          outputs.emplace_back(std::move(ev));
          read_some = true;  // exit only once all output is read
        }
      }
      if (r.exit && h.up && !read_some) {
        r.exited = true;
        r.sync_due = true;  // the end-of-trial sync, before the exit is reported
      }
    }
    // A trial's exit is reported after its end-of-trial sync, so its files are on the head.
    // Its syncs advance whether or not it printed (a trial that prints at every poll once
    // starved them: checkpoints reached the head ~9 s late with sync_period 1).
    double before = now();
    bool syncing = h.up ? impl.poll_sync(r, t) : r.sync_pid > 0 && !util::try_wait(r.sync_pid);
    impl.sync_poll_max_ms = std::max(impl.sync_poll_max_ms, (now() - before) * 1000);
    if (r.exited && !syncing) {
      exits.emplace_back(std::in_place_type<ExitEvent>, ExitEvent{id, *r.exit});
      done.push_back(id);
    }
  }
  for (const auto& id : done) impl.runs.erase(id);
  std::vector<Event> all = std::move(impl.host_events);
  impl.host_events.clear();
  for (auto& e : outputs) all.push_back(std::move(e));
  for (auto& e : exits) all.push_back(std::move(e));
  return all;
}

std::optional<int> SshExecutor::pid(const std::string& trial_id) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end()) return std::nullopt;
  auto& r = it->second;
  // Asked of the host once per attempt (it is filled in on every result until known).
  if (!r.child_pid && !r.pid_asked && r.sup_pid > 0 && r.host->up) {
    r.pid_asked = true;
    std::string out;
    auto st = r.host->shell_run("cat /proc/" + std::to_string(r.sup_pid) + "/task/" +
                                    std::to_string(r.sup_pid) + "/children 2>/dev/null",
                                &out);
    if (st && *st == 0 && std::atoi(out.c_str()) > 0)
      r.child_pid = r.who.pid = std::atoi(out.c_str());
  }
  return r.child_pid;
}

double SshExecutor::now() {
  return clock_s(CLOCK_MONOTONIC);
}
double SshExecutor::wall_time() {
  return clock_s(CLOCK_REALTIME);
}
std::string SshExecutor::host_name() {
  return util::host_name();
}

void SshExecutor::renew_lease() {
  for (auto& h : impl_->hosts) {
    if (!h->up) continue;
    if (!h->session) continue;
    timespec now = lease_stamp();
    timeval tv[2];
    tv[0].tv_sec = now.tv_sec;
    tv[0].tv_usec = now.tv_nsec / 1000;
    tv[1] = tv[0];
    if (sftp_utimes(h->sftp, h->lease.c_str(), tv) != 0) {
      sftp_file f = sftp_open(h->sftp, h->lease.c_str(), O_WRONLY | O_CREAT, 0644);
      if (f)
        sftp_close(f);
      else
        impl_->check(*h);
    }
  }
}

Result<void> SshExecutor::adopt(const std::string& trial_id, const std::string& reported,
                                const fs::path& cwd, const fs::path&, const std::string& dest) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end()) return fail("internal: no remote run for ", trial_id);
  auto& r = it->second;
  if (!r.host->up) return fail("host ", r.host->cfg.name, " is unreachable");
  if (r.found_at_attach.erase(dest)) {
    // moved in by the driver that crashed; this line is being read again
    r.checkpoints.insert(dest);
    return {};
  }
  std::string path = reported;
  if (!path.empty() && path[0] != '/') path = cwd.string() + "/" + path;
  std::string out;
  auto st = r.host->shell_run(
      q(r.host->supervisor) + " --adopt " + q(r.dir) + " " + q(path) + " " + q(dest), &out);
  if (!st) {
    impl_->check(*r.host);
    return std::unexpected(st.error());
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (*st != 0) return fail(util::printable(out, 300));
  r.checkpoints.insert(dest);
  r.adopted_at[dest] = now();
  return {};
}

void SshExecutor::remove_checkpoint(const std::string& host, const fs::path& head_trial_dir,
                                    const std::string& name) {
  Host* h = impl_->host(host);
  if (!h || !h->up) return;
  std::string dir = h->info.exp_dir + "/" + head_trial_dir.filename().string();
  std::string out;
  auto st = h->shell_run(q(h->supervisor) + " --rm " + q(dir) + " " + q(name), &out);
  if (!st || *st != 0)
    spdlog::warn("host {}: cannot delete {}/{}: {}", host, dir, name,
                 st ? out : st.error().message);
  for (auto& [id, r] : impl_->runs)
    if (r.host == h && r.dir == dir) r.checkpoints.erase(name);
}

std::vector<std::string> SshExecutor::fetch_checkpoints(const std::string& host,
                                                        const fs::path& head_trial_dir,
                                                        const std::vector<std::string>& names) {
  std::vector<std::string> fetched;
  Host* h = impl_->host(host);
  if (!h || !h->up || impl_->opts.syncer == "none") return fetched;
  std::string dir = h->info.exp_dir + "/" + head_trial_dir.filename().string();
  fs::path log =
      impl_->opts.head_exp_dir / ".tune" / ("fetch-" + head_trial_dir.filename().string() + ".log");
  for (const auto& name : names) {
    if (!name.starts_with("checkpoint_") || name.find('/') != std::string::npos) continue;
    std::string staging = ".sync_" + name;
    (void)util::remove_tree_nofollow(head_trial_dir, staging);
    auto rc = util::run_process(
        impl_->copy_from(*h, dir + "/" + name + "/", (head_trial_dir / staging).string() + "/",
                         {"--timeout=30"}),
        log);
    std::error_code ec;
    if (rc && *rc == 0) fs::rename(head_trial_dir / staging, head_trial_dir / name, ec);
    if (!rc || *rc != 0 || ec) {
      spdlog::warn("{}: cannot bring {} from {}: {}", head_trial_dir.filename().string(), name,
                   host, ec ? ec.message() : util::last_line(log));
      (void)util::remove_tree_nofollow(head_trial_dir, staging);
      continue;
    }
    fetched.push_back(name);
  }
  return fetched;
}

std::vector<LiveAttempt> SshExecutor::live_attempts() {
  std::vector<LiveAttempt> out;
  for (auto& host : impl_->hosts) {
    Host& h = *host;
    if (!h.up) continue;
    // A supervisor's command line: SUPERVISOR TRIAL_DIR ATTEMPT ... (apps/tune-supervisor);
    // trial names hold no spaces. A zombie has an empty one and does not match.
    auto procs = Impl::supervisor_processes(h);
    if (!procs) continue;
    const std::string& ps = *procs;
    std::string prefix = h.supervisor + " " + h.info.exp_dir + "/";
    for (size_t at = 0; at < ps.size();) {
      size_t nl = ps.find('\n', at);
      if (nl == std::string::npos) nl = ps.size();
      std::string_view line(ps.data() + at, nl - at);
      at = nl + 1;
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      size_t space = line.find(' ');
      if (space == std::string_view::npos) continue;
      int pid = std::atoi(std::string(line.substr(0, space)).c_str());
      std::string_view args = line.substr(space + 1);
      if (pid <= 0 || !args.starts_with(prefix)) continue;
      args.remove_prefix(prefix.size());
      size_t end = args.find(' ');
      if (end == std::string_view::npos || args.substr(0, end).find('/') != std::string::npos)
        continue;
      LiveAttempt a;
      a.host = h.cfg.name;
      a.trial_name = std::string(args.substr(0, end));
      a.attempt = std::atoi(std::string(args.substr(end + 1, 10)).c_str());
      a.supervisor = pid;
      if (a.attempt > 0) out.push_back(std::move(a));
    }
  }
  return out;
}

void SshExecutor::end_attempts(const std::vector<LiveAttempt>& which, double grace_s) {
  std::map<Host*, std::string> pids;  // host -> "PID PID ..."
  for (const auto& a : which)
    if (Host* h = impl_->host(a.host); h && h->up) pids[h] += " " + std::to_string(a.supervisor);
  for (auto& [h, list] : pids) {
    // Running supervisors among them (not gone, not zombies), one per line.
    std::string alive =
        "for p in" + list +
        "; do s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); "
        "[ -n \"$s\" ] && [ \"$s\" != Z ] && [ \"$s\" != X ] && echo $p; done; true";
    auto left = [&] {
      std::string out;
      auto st = h->shell_run(alive, &out);
      return st ? out : std::string();  // unreachable now: nothing more to do there
    };
    auto wait_until = [&](double seconds) {
      for (double waited = 0; !left().empty() && waited < seconds; waited += 0.25)
        ::usleep(250'000);
    };
    (void)h->shell_run("kill -TERM" + list + " 2>/dev/null; true");
    wait_until(grace_s + 5);
    (void)h->shell_run("kill -USR1" + list + " 2>/dev/null; true");
    wait_until(5);
    if (std::string still = left(); !still.empty()) {
      spdlog::warn("host {}: supervisors of an earlier driver still run: ending their sessions",
                   h->cfg.name);
      std::string kill;
      for (size_t at = 0; at < still.size();) {
        size_t nl = still.find('\n', at);
        if (nl == std::string::npos) nl = still.size();
        kill +=
            "pkill -KILL -s " + std::to_string(std::atoi(still.c_str() + at)) + " 2>/dev/null; ";
        at = nl + 1;
      }
      (void)h->shell_run(kill + "true");
    }
  }
}

void SshExecutor::checkpoint_registered(const std::string& trial_id) {
  auto it = impl_->runs.find(trial_id);
  if (it != impl_->runs.end() && impl_->opts.sync_on_checkpoint) it->second.sync_due = true;
}

uint64_t SshExecutor::output_offset(const std::string& trial_id) {
  auto it = impl_->runs.find(trial_id);
  return it == impl_->runs.end() ? 0 : it->second.offset;
}

bool SshExecutor::owns(const std::string& trial_id) const {
  return impl_->runs.count(trial_id) != 0;
}

bool SshExecutor::busy() const {
  return !impl_->runs.empty();
}

}  // namespace tune::exec
