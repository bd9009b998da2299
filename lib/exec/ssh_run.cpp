#include "exec/ssh_run.hpp"

#include <spdlog/spdlog.h>
#include <time.h>

#include <utility>

#include "exec/ssh_changes.hpp"
#include "util/clock.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

// A trial's name, as the driver's other lines give it (its dir on the head), else its id.
std::string trial_name(const Run& r) {
  return r.head_dir.empty() ? r.id : r.head_dir.filename().string();
}

// Where checkpoints copied by one rsync wait to be published (a .sync_checkpoint_ name: what a
// killed driver left is removed like any other unfinished copy).
constexpr const char* kBatchStaging = ".sync_checkpoint_batch";

using util::mono;

}  // namespace

void SshStats::add(const SshStats& o) {
  start_ms.insert(start_ms.end(), o.start_ms.begin(), o.start_ms.end());
  sync_ms.insert(sync_ms.end(), o.sync_ms.begin(), o.sync_ms.end());
  first_output_ms.insert(first_output_ms.end(), o.first_output_ms.begin(), o.first_output_ms.end());
  publish_ms.insert(publish_ms.end(), o.publish_ms.begin(), o.publish_ms.end());
  sync_poll_max_ms = std::max(sync_poll_max_ms, o.sync_poll_max_ms);
  published_bytes += o.published_bytes;
  looks += o.looks;
  records_read += o.records_read;
  pid_asks += o.pid_asks;
  carried += o.carried;
  carried_bytes += o.carried_bytes;
  inline_syncs += o.inline_syncs;
  sent_looks += o.sent_looks;
  agent_file_ops += o.agent_file_ops;
  shell_file_ops += o.shell_file_ops;
}

std::vector<std::string> copy_from(const SyncContext& c, const std::string& src,
                                   const std::string& dst, const std::vector<std::string>& extra) {
  std::string remote = c.host.remote_prefix();
  if (c.opts.syncer != "rsync") return util::fill_template(c.opts.syncer, remote + src, dst);
  // (--sparse: a trial's sparse file, whose holes the host's copy kept, does not fill the
  // head's disk)
  std::vector<std::string> cmd = {
      "rsync", "-rlt", "--sparse", util::kRsyncExactTimes, "-e", c.host.ssh_words()};
  cmd.insert(cmd.end(), extra.begin(), extra.end());
  cmd.push_back(remote + src);
  cmd.push_back(dst);
  return cmd;
}

// The checkpoints a sync copies: those kept that the head lacks. A sync that a checkpoint
// asked for copies only the newest kept one (a trial that checkpoints faster than its copies
// go skips the ones in between; the next full sync, periodic or at the trial's end, copies any
// of those retention still keeps).
std::vector<std::string> checkpoints_to_copy(const Run& r, bool full) {
  std::vector<std::string> missing;
  std::error_code ec;
  if (!full) {
    if (!r.checkpoints.empty() && !fs::exists(r.head_dir / *r.checkpoints.rbegin(), ec))
      missing.push_back(*r.checkpoints.rbegin());  // (names sort by number: zero-padded)
    return missing;
  }
  for (const auto& c : r.checkpoints)
    if (!fs::exists(r.head_dir / c, ec)) missing.push_back(c);  // complete ones never change
  return missing;
}

namespace {

// The rsync commands that bring one trial dir to the head: the retained checkpoints it lacks
// (checkpoints_to_copy), each into a staging name first, then its files (not checkpoints, not
// staging). Checkpoints go first: they are what a lost host would cost.
void plan_sync(SyncContext& c, Run& r, bool full) {
  if (c.opts.syncer == "none") return;
  SshHost& h = c.host;
  std::vector<Run::Step> steps;
  std::error_code ec;
  fs::create_directories(r.head_dir, ec);
  auto rsync = [&](const std::string& src, const std::string& dst,
                   const std::vector<std::string>& extra) { return copy_from(c, src, dst, extra); };
  // Unchanged since the last sync (nothing in the trial dir newer than its mark, checked by
  // the kept shell in a few ms): no rsync. Otherwise the mark is set first, so that a file
  // written while rsync runs is seen as changed next time. An ended attempt's few small changes
  // come in the answer and are written here (ssh_changes.hpp): no rsync either.
  // The agent that started it may have sent that answer as it ended: then no round trip is
  // spent asking. (An answer once taken is not taken again: it moved the host's mark.)
  bool inline_files = r.exited && c.opts.syncer == "rsync" && h.info.safe_reads;
  std::string answer;
  // A sync that runs before the attempt's end is handed on (its last output still being read)
  // looks for itself and moves the mark: the answer, older than what it copies, is dropped.
  if (!inline_files) r.exit_changes.reset();
  bool sent = inline_files && r.exit_changes;
  if (sent) {
    answer = *std::exchange(r.exit_changes, std::nullopt);
    c.stats.sent_looks += 1;
  }
  auto look = sent ? Result<int>(0) : h.shell_run(changes_command(r.dir, inline_files), &answer);
  Changes changes = look ? parse_changes(answer) : Changes{};
  if (changes.kind == Changes::Kind::kFiles) {
    if (auto written = write_changed_files(r.head_dir, changes.files); written) {
      c.stats.inline_syncs += 1;
    } else {
      spdlog::debug("trial {}: {}; rsync copies the files", trial_name(r), written.error().message);
      changes.kind = Changes::Kind::kRsync;
    }
  }
  std::optional<Run::Step> files;
  if (changes.kind == Changes::Kind::kRsync) {
    // (--force: a dir the trial replaced by a file is replaced on the head too; nothing of the
    // head's own is in a dir of the trial's, as the excludes name only what a sync never copies)
    std::vector<std::string> excludes = {"--force"};
    for (const char* x : kSyncExcludes) excludes.push_back(std::string("--exclude=") + x);
    files = Run::Step{rsync(r.dir + "/", r.head_dir.string() + "/", excludes), {}, {}, {}};
  }
  std::vector<std::string> missing = checkpoints_to_copy(r, full);
  // One the head has a copy of already (seed_checkpoint): only what differs crosses the link.
  std::vector<std::string> seeded;
  if (c.opts.syncer == "rsync")
    std::erase_if(missing, [&](const std::string& n) {
      bool seed = fs::is_directory(fs::symlink_status(r.head_dir / (".sync_" + n), ec));
      if (seed) seeded.push_back(n);
      return seed;
    });
  for (const auto& n : seeded) {
    fs::path staging = r.head_dir / (".sync_" + n);
    steps.push_back({rsync(r.dir + "/" + n + "/", staging.string() + "/", {"--delete", "-c"}),
                     staging,
                     r.head_dir / n,
                     {}});
  }
  if (c.opts.syncer == "rsync" && missing.size() > 1) {
    // One rsync for all of them (each costs an rsync start otherwise, ~0.2 s over ssh).
    fs::path staging = r.head_dir / kBatchStaging;
    (void)util::remove_tree_nofollow(r.head_dir, kBatchStaging);
    fs::create_directories(staging, ec);
    std::string remote = h.remote_prefix();
    std::vector<std::string> cmd = {"rsync", "-rlt",       "--sparse", util::kRsyncExactTimes,
                                    "-e",    h.ssh_words()};
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
  if (files) steps.push_back(std::move(*files));
  r.sync_steps = std::move(steps);
}

fs::path sync_log(const SyncContext& c, const Run& r) {
  return c.opts.head_exp_dir / ".tune" / ("sync-" + r.id + ".log");
}

void start_next_step(SyncContext& c, Run& r) {
  while (!r.sync_steps.empty()) {
    r.current = std::move(r.sync_steps.front());
    r.sync_steps.erase(r.sync_steps.begin());
    auto pid = util::spawn_process(r.current->cmd, sync_log(c, r));
    if (pid) {
      r.sync_pid = *pid;
      return;
    }
    spdlog::warn("trial {}: sync: {}", trial_name(r), pid.error().message);
  }
  r.current.reset();
}

// Checkpoints copied together (plan_sync): each appears under its name only if the copy
// succeeded and retention still keeps it; the rest of the staging dir goes.
void finish_batch(SyncContext& c, Run& r, int status, double now) {
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
      retry.push_back(
          {copy_from(c, r.dir + "/" + n + "/", staging.string() + "/", {}), staging, to, {}});
      continue;
    }
    for (fs::recursive_directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec)) c.stats.published_bytes += it->file_size(ec);
    fs::rename(from, to, ec);
    if (ec) spdlog::warn("trial {}: cannot publish {}: {}", r.id, to.string(), ec.message());
    if (auto at = r.adopted_at.find(n); at != r.adopted_at.end()) {
      c.stats.publish_ms.push_back((now - at->second) * 1000);
      r.adopted_at.erase(at);
    }
  }
  (void)util::remove_tree_nofollow(r.head_dir, s.staging.filename().string());
  r.sync_steps.insert(r.sync_steps.begin(), std::make_move_iterator(retry.begin()),
                      std::make_move_iterator(retry.end()));
}

}  // namespace

bool poll_sync(SyncContext& c, Run& r, double now, bool may_start) {
  if (!r.seeds_later.empty() && !(r.sync_pid > 0 && r.current && r.current->staging.empty()))
    for (const auto& [moved, name] : std::exchange(r.seeds_later, {}))
      if (r.checkpoints.count(name)) seed_checkpoint(r, moved, name);
  if (r.sync_pid > 0) {
    auto status = util::try_wait(r.sync_pid);
    if (!status && now - r.sync_started > c.opts.sync_timeout) {
      // A pull that hangs (a stalled link, a stuck syncer) is killed; the next period's sync
      // copies what it missed. An ended trial's last sync is not retried: its exit waits.
      spdlog::warn("trial {}: sync from {} ran longer than sync_timeout ({} s): killed; {}",
                   trial_name(r), c.host.cfg.name, util::format_double(c.opts.sync_timeout),
                   r.exited ? "the trial's last files may be missing on the head"
                            : "retried at the next sync period");
      drop_sync(r);
      r.sync_steps.clear();
      r.next_sync = now + c.opts.sync_period;
      return false;
    }
    if (!status) return true;
    r.sync_pid = -1;
    bool pruned = r.current && !r.current->final_path.empty() &&
                  !r.checkpoints.count(r.current->final_path.filename().string());
    if (r.current && !r.current->batch.empty()) {
      finish_batch(c, r, *status, now);
    } else if (*status != 0 && pruned) {
      // deleted by retention while it was being copied: nothing to bring back
      (void)util::remove_tree_nofollow(r.head_dir, r.current->staging.filename().string());
    } else if (*status != 0) {
      spdlog::warn("trial {}: sync from {} failed (exit {}): {}", trial_name(r), c.host.cfg.name,
                   *status, util::last_line(sync_log(c, r)));
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
          if (it->is_regular_file(ec)) c.stats.published_bytes += it->file_size(ec);
        fs::rename(r.current->staging, r.current->final_path, ec);
        auto name = r.current->final_path.filename().string();
        if (auto at = r.adopted_at.find(name); at != r.adopted_at.end()) {
          c.stats.publish_ms.push_back((now - at->second) * 1000);
          r.adopted_at.erase(at);
        }
      }
      if (ec)
        spdlog::warn("trial {}: cannot publish {}: {}", r.id, r.current->final_path.string(),
                     ec.message());
    }
    r.current.reset();
    if (!r.sync_steps.empty()) {
      start_next_step(c, r);
      return r.sync_pid > 0;
    }
    c.stats.sync_ms.push_back((now - r.sync_started) * 1000);
    r.next_sync = now + c.opts.sync_period;
  }
  if (may_start && r.sync_wanted(now)) {
    // (once its attempt has ended, every sync is full: a checkpoint adopted after the end-of-
    // trial sync was planned asks for one more, which must copy it even if it is not the newest)
    bool full = r.sync_full || now >= r.next_sync || r.exited;
    r.sync_due = r.sync_full = false;
    r.next_sync = now + c.opts.sync_period;
    r.sync_started = now;
    plan_sync(c, r, full);
    start_next_step(c, r);
    if (r.sync_pid <= 0) c.stats.sync_ms.push_back((mono() - now) * 1000);
    return r.sync_pid > 0;
  }
  return false;
}

void seed_checkpoint(Run& r, const std::string& moved, const std::string& name) {
  std::string rel = moved.starts_with(r.dir + "/") ? moved.substr(r.dir.size() + 1) : "";
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  // Only a dir of the trial dir's own (no symlink on the way), while no files step runs.
  if (rel.empty() || rel[0] == '.' || rel.find('/') != std::string::npos) return;
  if (r.sync_pid > 0 && r.current && r.current->staging.empty()) {  // it may be copying it
    r.seeds_later.emplace_back(moved, name);
    return;
  }
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(r.head_dir / rel, ec))) return;
  (void)util::remove_tree_nofollow(r.head_dir, ".sync_" + name);
  fs::rename(r.head_dir / rel, r.head_dir / (".sync_" + name), ec);
}

void drop_checkpoint(SyncContext& c, Run& r, const std::string& name) {
  r.checkpoints.erase(name);
  r.adopted_at.erase(name);
  if (!r.current || r.current->staging.filename() != ".sync_" + name)
    (void)util::remove_tree_nofollow(r.head_dir, ".sync_" + name);  // a seed, never copied
  // Does a copy step (queued or under way) still have something retention keeps?
  auto still_wanted = [&](Run::Step& s) {
    if (s.staging.empty()) return true;  // the files step
    if (!s.batch.empty()) {
      std::erase(s.batch, name);
      return !s.batch.empty();
    }
    return s.final_path.filename() != name;
  };
  std::erase_if(r.sync_steps, [&](Run::Step& s) { return !still_wanted(s); });
  if (r.sync_pid <= 0 || !r.current || still_wanted(*r.current)) return;
  spdlog::debug("trial {}: copy of {} stopped: retention dropped it", trial_name(r), name);
  drop_sync(r);
  start_next_step(c, r);
  if (r.sync_pid <= 0) r.next_sync = mono() + c.opts.sync_period;
}

void drop_sync(Run& r) {
  if (r.sync_pid <= 0) return;
  util::kill_and_reap(r.sync_pid);
  r.sync_pid = -1;
  if (r.current && !r.current->staging.empty())
    (void)util::remove_tree_nofollow(r.head_dir, r.current->staging.filename().string());
  r.current.reset();
}

void remove_sync_leftovers(const fs::path& head_dir) {
  std::error_code ec;
  std::vector<std::string> stale;
  for (fs::directory_iterator it(head_dir, ec), end; !ec && it != end; it.increment(ec))
    if (auto name = it->path().filename().string(); name.starts_with(".sync_checkpoint_"))
      stale.push_back(name);
  for (const auto& name : stale) (void)util::remove_tree_nofollow(head_dir, name);
}

}  // namespace tune::exec
