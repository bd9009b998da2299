// Checkpoint reconciliation: a trial dir brought in line with what the state names before an
// attempt restarts or re-attaches (checkpoint dirs the state does not name, staging leftovers,
// rows past the restore point), checkpoints that never reached the head from an SSH host, and
// a finished trial's leftovers on resume.
#include <spdlog/spdlog.h>

#include "checkpoint/adopt.hpp"
#include "control/controller.hpp"
#include "control/dir_names.hpp"
#include "trial/result_log.hpp"
#include "util/fs.hpp"

namespace tune::control {

using json = nlohmann::json;

std::vector<std::string> Controller::missing_on_head(const trial::Trial& t) const {
  std::vector<std::string> missing;
  if (remote_host(t).empty()) return missing;
  fs::path dir = trial_dir(t);
  std::error_code ec;
  for (const auto& c : t.checkpoints)
    if (!fs::is_directory(dir / c.dir_name(), ec)) missing.push_back(c.dir_name());
  return missing;
}

void Controller::fetch_all_remote_only() {
  std::vector<std::pair<trial::Trial*, std::vector<std::string>>> todo;
  size_t total = 0, done = 0;
  for (auto& t : state_.trials) {
    if (running_.count(t.id)) continue;
    auto missing = missing_on_head(t);
    if (missing.empty()) continue;
    total += missing.size();
    todo.emplace_back(&t, std::move(missing));
  }
  for (auto& [t, missing] : todo) {
    fetch_remote_only(*t, missing);
    done += missing.size();
    if (opts_.fetch_progress) opts_.fetch_progress(done, total);
  }
}

void Controller::fetch_remote_only(trial::Trial& t, const std::vector<std::string>& missing) {
  std::string host = remote_host(t);
  fs::path dir = trial_dir(t);
  spdlog::info("trial {}: bringing {} checkpoint(s) from {} that never reached the head", t.name,
               missing.size(), host);
  auto got = ex_.fetch_checkpoints(host, dir, missing);
  for (const auto& name : got) spdlog::info("trial {}: {} brought from {}", t.name, name, host);
}

void Controller::prepare_restart(trial::Trial& t) {
  fs::path dir = trial_dir(t);
  // A trial that ran on an SSH host restarts from the newest checkpoint the head holds (its
  // host may be gone); newer ones that never reached the head are forgotten.
  if (!remote_host(t).empty()) {
    std::error_code ec;
    while (!t.checkpoints.empty() && !fs::is_directory(dir / t.checkpoints.back().dir_name(), ec)) {
      spdlog::warn("trial {}: {} never reached the head: restarting from an earlier one", t.name,
                   t.checkpoints.back().dir_name());
      t.checkpoints.pop_back();
    }
  }
  const trial::Checkpoint* c = t.latest_checkpoint();
  int64_t keep = c ? c->iteration : 0;
  std::vector<json> kept;
  auto rows = trial::ResultLog::truncate_after(dir, keep, &kept);
  if (!rows) spdlog::warn("trial {}: {}", t.name, rows.error().message);
  t.iteration = t.restore_iteration = keep;
  t.time_total_s = t.time_base = c ? c->time_total_s : 0;
  // last/min/max cover the results kept, not the dropped ones.
  if (rows) {
    t.metrics.clear();
    t.last_result = json::object();
    for (auto& row : kept) {
      t.track_metrics(row);
      t.last_result = std::move(row);
    }
  }
  reconcile_checkpoints(t, false, nullptr);
}

bool Controller::insert_checkpoint(trial::Trial& t, trial::Checkpoint c) {
  auto at = std::find_if(t.checkpoints.begin(), t.checkpoints.end(),
                         [&](const trial::Checkpoint& k) { return k.seq >= c.seq; });
  if (at != t.checkpoints.end() && at->seq == c.seq) return false;
  t.checkpoints.insert(at, std::move(c));
  return true;
}

void Controller::settle_adopting(trial::Trial& t) {
  // On an SSH host the dir may be complete where the head cannot see it: asked after the
  // re-attach (retake_adopting: the host's adoption of a dir already moved succeeds).
  if (t.adopting.empty() || !remote_host(t).empty()) return;
  fs::path dir = trial_dir(t);
  std::vector<trial::Adopting> left;
  for (auto& a : t.adopting) {
    std::error_code ec;
    std::string name = a.checkpoint.dir_name();
    if (fs::symlink_status(dir / name, ec).type() != fs::file_type::directory) {
      left.push_back(std::move(a));
      continue;
    }
    if (insert_checkpoint(t, std::move(a.checkpoint)))
      spdlog::info("trial {}: {} was being taken when the driver stopped and is complete: kept",
                   t.name, name);
  }
  t.adopting = std::move(left);
  mark_dirty();
}

namespace {

// Says that a checkpoint being taken when the driver stopped is lost: the first few, then how
// many more (a state can name thousands).
void say_lost(const trial::Trial& t, const std::string& name, const std::string& why, size_t& n,
              size_t of) {
  constexpr size_t kSaid = 10;
  if (n < kSaid)
    spdlog::warn("trial {}: {}, being taken when the driver stopped, is lost: {}", t.name, name,
                 why);
  else if (n == kSaid)
    spdlog::warn("trial {}: ... and more of the {} being taken are lost (not named)", t.name, of);
  ++n;
}

}  // namespace

void Controller::retake_adopting(trial::Trial& t, Runtime& rt) {
  if (t.adopting.empty()) return;
  auto left = std::exchange(t.adopting, {});
  mark_dirty();
  size_t lost = 0;
  for (auto& a : left) {
    std::string name = a.checkpoint.dir_name();
    spdlog::info(
        "trial {}: {} was being taken when the driver stopped: taking it again from {}, as it "
        "is now",
        t.name, name, a.reported);
    if (auto r = adopt_reported(t, rt, a.reported, std::move(a.checkpoint)); !r)
      say_lost(t, name, r.error().message, lost, left.size());
  }
}

void Controller::take_adopting_now(trial::Trial& t) {
  settle_adopting(t);
  if (t.adopting.empty()) return;
  auto left = std::exchange(t.adopting, {});
  mark_dirty();
  fs::path dir = trial_dir(t);
  bool here = remote_host(t).empty();
  size_t lost = 0;
  for (auto& a : left) {
    std::string name = a.checkpoint.dir_name();
    Result<void> r = std::unexpected(Error{"its attempt on " + remote_host(t) + " is gone"});
    if (here) r = checkpoint::adopt(a.reported, exp_.trial.workdir, dir, name);
    if (!r) {
      say_lost(t, name, r.error().message, lost, left.size());
      continue;
    }
    spdlog::info(
        "trial {}: {} was being taken when the driver stopped: taken from {}, as it is "
        "now",
        t.name, name, a.reported);
    insert_checkpoint(t, std::move(a.checkpoint));
  }
}

void Controller::reconcile_checkpoints(trial::Trial& t, bool keep_newer, Runtime* rt) {
  fs::path dir = trial_dir(t);
  std::set<std::string> named;
  // A trial re-attached on an SSH host has checkpoints that reach the head only with its next
  // sync: missing here does not mean gone.
  bool only_on_host = keep_newer && !remote_host(t).empty();
  std::erase_if(t.checkpoints, [&](const trial::Checkpoint& c) {
    std::error_code ec;
    if (only_on_host ||
        fs::symlink_status(dir / c.dir_name(), ec).type() == fs::file_type::directory) {
      named.insert(c.dir_name());
      return false;
    }
    spdlog::warn("trial {}: {} is named in the state but missing on disk: forgotten", t.name,
                 c.dir_name());
    mark_dirty();
    return true;
  });
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!is_leftover(name, keep_newer)) {
      int64_t seq = checkpoint_seq_of(name);
      if (seq < 0 || named.count(name)) continue;  // not one of ours, or kept
      if (keep_newer && seq > t.checkpoint_seq) {
        if (rt) rt->adopted_before.insert(name);
        continue;
      }
    }
    spdlog::debug("trial {}: removing stray {}", t.name, name);
    delete_later(dir, name);
  }
}

void Controller::clean_finished(const trial::Trial& t) {
  // A deletion the previous driver had not finished when it died leaves checkpoint dirs that
  // no state names; a finished trial's set never changes, so its dir is walked on the worker.
  std::set<std::string> named;
  for (const auto& c : t.checkpoints) named.insert(c.dir_name());
  fs::path dir = trial_dir(t);
  std::string name = t.name;
  worker_.submit([dir, named, name](const std::atomic<bool>&) -> Result<std::string> {
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(dir, ec)))  // never cleaned through one
      return "trial " + name + ": its dir is a symbolic link: not cleaned";
    std::vector<std::string> doomed;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string n = it->path().filename().string();
      if (is_leftover(n, false) || (checkpoint_seq_of(n) >= 0 && !named.count(n)))
        doomed.push_back(std::move(n));
    }
    std::string removed;
    for (const auto& n : doomed) {
      if (auto r = util::remove_tree_nofollow(dir, n); !r) return std::unexpected(r.error());
      removed += (removed.empty() ? "" : ", ") + n;
    }
    if (removed.empty()) return removed;
    return "trial " + name + ": removed " + removed + " (left over from an unfinished deletion)";
  });
}

}  // namespace tune::control
