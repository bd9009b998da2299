// The controller's file work on trial dirs: taking over reported checkpoints and deleting the
// ones retention dropped (leftovers: checkpoints.cpp). Anything that may take long (a copy
// across filesystems, deleting a tree) runs on the file worker, off the loop; the loop itself
// only renames.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "checkpoint/adopt.hpp"
#include "control/controller.hpp"
#include "control/dir_names.hpp"
#include "util/fs.hpp"

namespace tune::control {

using json = nlohmann::json;

void Controller::delete_later(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(dir, ec))) {  // replaced while the run went on
    spdlog::warn("not deleting {}: {} is a symbolic link now", name, dir.string());
    return;
  }
  // Renamed on the loop (one syscall), so the name can be taken again at once; the tree is
  // then deleted on the worker, never following a symlink.
  std::string trash = std::string(kTrashPrefix) + name;
  std::string target = name;
  if (::rename((dir / name).c_str(), (dir / trash).c_str()) == 0) {
    target = trash;
  } else if (errno == ENOENT) {
    return;
  } else {
    spdlog::debug("cannot rename {} for deletion: {}", (dir / name).string(), std::strerror(errno));
  }
  worker_.submit([dir, target](const std::atomic<bool>&) -> Result<std::string> {
    if (auto r = util::remove_tree_nofollow(dir, target); !r) return std::unexpected(r.error());
    return std::string();
  });
}

void Controller::run_deletions() {
  // Only after a state write: the state on disk never names a checkpoint that is gone.
  for (const auto& [dir, name, host] : pending_deletions_) {
    if (!host.empty()) ex_.remove_checkpoint(host, dir, name);
    delete_later(dir, name);
    spdlog::debug("deleting {}/{}", dir.filename().string(), name);
  }
  pending_deletions_.clear();
}

void Controller::rewind_checkpoints(trial::Trial& t, const std::string& name) {
  auto keep = std::find_if(t.checkpoints.begin(), t.checkpoints.end(),
                           [&](const trial::Checkpoint& c) { return c.dir_name() == name; });
  auto from = keep == t.checkpoints.end() ? t.checkpoints.begin() : std::next(keep);
  for (auto it = from; it != t.checkpoints.end(); ++it) {
    spdlog::info("trial {}: {} forgotten: the trial restarts from {}", t.name, it->dir_name(),
                 name.empty() ? "scratch" : name);
    pending_deletions_.push_back({trial_dir(t), it->dir_name(), remote_host(t)});
  }
  if (from == t.checkpoints.end()) return;
  t.checkpoints.erase(from, t.checkpoints.end());
  mark_dirty();
}

namespace {

// Tests only: $TUNE_TEST_ADOPT_DELAY_S seconds of waiting before each adoption on the file
// worker, so that a test can kill the driver while one is under way.
void test_adopt_delay(const std::atomic<bool>& cancel) {
  static const double delay = [] {
    const char* v = std::getenv("TUNE_TEST_ADOPT_DELAY_S");
    return v ? std::atof(v) : 0.0;
  }();
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(delay);
  while (delay > 0 && !cancel && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

void Controller::take_checkpoint(trial::Trial& t, Runtime& rt, const std::string& reported,
                                 json& result) {
  trial::Checkpoint c;
  c.seq = t.checkpoint_seq + 1;
  c.iteration = t.iteration;
  c.time_total_s = t.time_total_s;
  c.metrics = checkpoint_metrics(result);
  std::string dest = c.dir_name();
  result["checkpoint_dir_name"] = dest;
  t.checkpoint_seq = c.seq;
  if (rt.adopted_before.erase(dest))  // moved in by the driver that crashed: read again
    return add_checkpoint(t, rt, std::move(c));
  if (auto r = adopt_reported(t, rt, reported, std::move(c)); !r) {
    spdlog::warn("trial {}: {}", t.name, r.error().message);
    result.erase("checkpoint_dir_name");
    t.checkpoint_seq -= 1;  // nothing bears the number
  }
}

Result<void> Controller::adopt_reported(trial::Trial& t, Runtime& rt, const std::string& reported,
                                        trial::Checkpoint c) {
  std::string dest = c.dir_name();
  if (!remote_host(t).empty()) {  // on its host, by the host's own tools
    auto task = ex_.adopt_task(t.id, reported, exp_.trial.workdir, trial_dir(t), dest);
    if (!task) {
      if (auto r = ex_.adopt(t.id, reported, exp_.trial.workdir, trial_dir(t), dest); !r) return r;
      add_checkpoint(t, rt, std::move(c));
      return {};
    }
    // Off the loop (it waits on the host's link), registered when done, in order with the
    // trial's other adoptions; the trial's exit waits for it.
    adopt_off_loop(t, rt, std::move(task), std::move(c), reported);
    return {};
  }
  fs::path dir = trial_dir(t);
  auto src = checkpoint::locate(reported, {dir, exp_.dir(), exp_.trial.workdir});
  if (!src) return std::unexpected(src.error());
  if (src->how == checkpoint::Source::How::kMove && rt.copies_in_flight == 0) {
    if (auto r = checkpoint::move_in(*src, dir, dest); !r) return r;
    add_checkpoint(t, rt, std::move(c));
    return {};
  }
  // A copy (or a move queued behind one, to keep the order): done on the worker, registered
  // when it completes; the trial's exit waits for it.
  uint64_t job = worker_.submit(
      [src = *src, dir, dest](const std::atomic<bool>& cancel) -> Result<std::string> {
        test_adopt_delay(cancel);
        auto r = src.how == checkpoint::Source::How::kMove
                     ? checkpoint::move_in(src, dir, dest)
                     : checkpoint::copy_in(src, dir, dest, cancel);
        if (!r) return std::unexpected(r.error());
        return std::string();
      });
  track_adoption(t, rt, job, std::move(c), reported);
  return {};
}

void Controller::adopt_off_loop(trial::Trial& t, Runtime& rt, std::function<Result<void>()> task,
                                trial::Checkpoint c, const std::string& reported) {
  uint64_t job = worker_.submit(
      [task = std::move(task)](const std::atomic<bool>& cancel) -> Result<std::string> {
        test_adopt_delay(cancel);
        if (auto r = task(); !r) return std::unexpected(r.error());
        return std::string();
      });
  track_adoption(t, rt, job, std::move(c), reported);
}

void Controller::track_adoption(trial::Trial& t, Runtime& rt, uint64_t job, trial::Checkpoint c,
                                const std::string& reported) {
  rt.copies_in_flight += 1;
  t.adopting.push_back({c, reported});
  adoptions_[job] = {t.id, std::move(c)};
  mark_dirty();
}

const trial::Checkpoint* Controller::arriving_checkpoint(const std::string& trial) const {
  const trial::Checkpoint* newest = nullptr;
  for (const auto& [job, a] : adoptions_)
    if (a.trial_id == trial && (!newest || a.checkpoint.seq > newest->seq)) newest = &a.checkpoint;
  return newest;
}

void Controller::on_file_jobs_done() {
  for (auto& d : worker_.take_done()) {
    auto it = adoptions_.find(d.id);
    if (it == adoptions_.end()) {  // a deletion or a clean-up
      if (!d.result)
        spdlog::warn("{}", d.result.error().message);
      else if (!d.result->empty())
        spdlog::info("{}", *d.result);
      continue;
    }
    auto [id, c] = std::move(it->second);
    adoptions_.erase(it);
    auto& t = trial(id);
    // One that gave up because the run is ending (a second Ctrl-C) stays named as being
    // taken: the next run takes it again from the trial's original.
    if (d.result || !worker_.cancelled()) {
      std::erase_if(t.adopting,
                    [&](const trial::Adopting& a) { return a.checkpoint.seq == c.seq; });
      mark_dirty();
    }
    auto rit = running_.find(id);
    if (rit == running_.end()) {  // (not expected: its exit waits for it; kept all the same)
      if (d.result && insert_checkpoint(t, c)) apply_retention(t, !t.finished());
      continue;
    }
    Runtime& rt = rit->second;
    rt.copies_in_flight -= 1;
    if (d.result)
      add_checkpoint(t, rt, std::move(c));
    else if (worker_.cancelled())
      spdlog::warn(
          "trial {}: checkpoint {} was cut short as the run ends: the next run takes "
          "it again",
          t.name, c.dir_name());
    else
      spdlog::warn("trial {}: checkpoint {} not taken: {}", t.name, c.dir_name(),
                   d.result.error().message);
    if (rt.copies_in_flight == 0 && rt.deferred_exit) {
      exec::ExitInfo info = std::move(*rt.deferred_exit);
      rt.deferred_exit.reset();
      on_exit(id, info);
    }
  }
}

}  // namespace tune::control
