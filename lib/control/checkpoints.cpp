// Checkpoint reconciliation: a trial dir brought in line with what the state names before an
// attempt restarts or re-attaches (checkpoint dirs the state does not name, staging leftovers,
// rows past the restore point), checkpoints that never reached the head from an SSH host, and
// a finished trial's leftovers on resume.
#include <spdlog/spdlog.h>

#include <set>

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
  // It restarts from the newest checkpoint the head holds: one that ran on an SSH host may have
  // newer ones that never reached the head (its host may be gone), and any trial's dir may have
  // been deleted or replaced under it. The missing ones are forgotten first.
  bool remote = !remote_host(t).empty();
  std::error_code ec;
  while (!t.checkpoints.empty() && !fs::is_directory(dir / t.checkpoints.back().dir_name(), ec)) {
    spdlog::warn("trial {}: {} {}: restarting from an earlier one", t.name,
                 t.checkpoints.back().dir_name(),
                 remote ? "never reached the head" : "is missing on disk");
    t.checkpoints.pop_back();
    mark_dirty();
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
  // Those complete on the head (on an SSH host one may be complete where the head cannot see
  // it: its host is asked after the re-attach, where its adoption of a dir already moved
  // succeeds, or by take_adopting_now).
  if (t.adopting.empty()) return;
  fs::path dir = trial_dir(t);
  std::vector<trial::Adopting> left;
  bool added = false;
  for (auto& a : t.adopting) {
    std::error_code ec;
    std::string name = a.checkpoint.dir_name();
    if (fs::symlink_status(dir / name, ec).type() != fs::file_type::directory) {
      left.push_back(std::move(a));
      continue;
    }
    if (insert_checkpoint(t, std::move(a.checkpoint))) {
      added = true;
      spdlog::debug("trial {}: {} was being taken when the driver stopped and is complete: kept",
                    t.name, name);
    }
  }
  t.adopting = std::move(left);
  mark_dirty();
  if (added) apply_retention(t, !t.finished());
}

namespace {

// What became of the checkpoints being taken when the driver stopped, said of the first few
// only, then counted (a state can name thousands).
struct Retakes {
  static constexpr int kNamed = 10;
  explicit Retakes(const trial::Trial& trial) : t(trial) {}
  const trial::Trial& t;
  int named = 0, unsaid = 0, lost = 0;  // checkpoints
  std::string last;                     // the one the last line was about
  bool last_named = false;              // and whether its lines are logged
  // A line about checkpoint `name` (the format: what follows its name).
  template <typename... Args>
  void say(spdlog::level::level_enum level, const std::string& name, fmt::format_string<Args...> f,
           Args&&... args) {
    if (name != last) {
      last = name;
      last_named = named < kNamed;
      ++(last_named ? named : unsaid);
    }
    if (last_named)
      spdlog::log(level, "trial {}: {}{}", t.name, name,
                  fmt::format(f, std::forward<Args>(args)...));
  }
  void lost_one(const std::string& name, const std::string& why) {
    ++lost;
    say(spdlog::level::warn, name, ", being taken when the driver stopped, is lost: {}", why);
  }
  ~Retakes() {
    if (unsaid > 0)
      spdlog::warn(
          "trial {}: ... and {} more checkpoint(s) being taken when the driver stopped "
          "(not named; {} lost in all)",
          t.name, unsaid, lost);
  }
};

}  // namespace

void Controller::retake_adopting(trial::Trial& t, Runtime& rt) {
  if (t.adopting.empty()) return;
  auto left = std::exchange(t.adopting, {});
  mark_dirty();
  Retakes said{t};
  for (auto& a : left) {
    std::string name = a.checkpoint.dir_name();
    said.say(spdlog::level::info, name,
             " was being taken when the driver stopped: taking it again from {}, as it is now",
             a.reported);
    if (auto r = adopt_reported(t, rt, a.reported, std::move(a.checkpoint)); !r)
      said.lost_one(name, r.error().message);
  }
}

void Controller::take_adopting_now(trial::Trial& t) {
  settle_adopting(t);
  if (t.adopting.empty()) return;
  auto left = std::exchange(t.adopting, {});
  mark_dirty();
  fs::path dir = trial_dir(t);
  std::string host = remote_host(t);
  // On an SSH host: those its host moved in are brought to the head now (none is moved there
  // any more: its attempt is gone).
  std::set<std::string> fetched;
  if (!host.empty()) {
    std::vector<std::string> names;
    for (const auto& a : left) names.push_back(a.checkpoint.dir_name());
    for (auto& n : ex_.fetch_checkpoints(host, dir, names)) fetched.insert(std::move(n));
  }
  Retakes said{t};
  bool added = false;
  for (auto& a : left) {
    std::string name = a.checkpoint.dir_name();
    Result<void> r = fetched.count(name)
                         ? Result<void>{}
                         : std::unexpected(Error{"its host " + host + " does not have it either"});
    if (host.empty()) r = checkpoint::adopt(a.reported, exp_.trial.workdir, dir, name);
    if (!r) {
      said.lost_one(name, r.error().message);
      continue;
    }
    said.say(spdlog::level::info, name, " was being taken when the driver stopped: {} {}",
             host.empty() ? "taken from" : "brought from", host.empty() ? a.reported : host);
    added |= insert_checkpoint(t, std::move(a.checkpoint));
  }
  if (added) apply_retention(t, !t.finished());
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
