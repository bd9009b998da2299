// The state-write policy: when experiment_state.json is written (dirty and due, or forced by a
// restart or the end of the run), what goes first (buffered result rows, the scheduler's log)
// and the interval after a write (a fixed TUNE_GLOBAL_CHECKPOINT_S period, else ~20x the last
// write's cost: at most ~5% of wall time on writes). Decisions do not force writes: they are
// journalled (scheduling.cpp) and recorded by the next periodic write.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "control/controller.hpp"
#include "sync/upload.hpp"

namespace tune::control {

void Controller::flush_result_logs(double now) {
  for (auto& [id, rt] : running_) {
    if (auto r = rt.log.flush(); !r && now >= rt.next_write_warning) {
      spdlog::warn("trial {}: {} (retrying; logged at most every 30 s)", trial(id).name,
                   r.error().message);
      rt.next_write_warning = now + 30;
    }
  }
}

bool Controller::maybe_save_state(bool force, bool durable) {
  double now = ex_.now();
  if (!force && (!state_dirty_ || now < next_state_write_)) return true;
  // Rows first: a state that counts an iteration whose row is still in a buffer would, after a
  // crash, resume with that row missing from result.json.
  flush_result_logs(now);
  state_.elapsed_s = elapsed_before_ + (now - run_started_);
  // Checkpoints are deleted right after this write: it must survive a power loss too, or an
  // older state could name them.
  durable = durable || !pending_deletions_.empty();
  append_scheduler_log(durable);  // first: the state then counts what the log holds
  state_.scheduler = sched_->save();
  searcher_->prepare_save();  // a snapshot for a later write: this one names the last acked
  state_.search_alg = searcher_->save();
  double t0 = ex_.now();
  auto r = writer_.save(exp_.dir(), state_, durable);
  double cost = ex_.now() - t0;
  ++state_writes_;
  state_write_s_ += cost;
  longest_state_write_ = std::max(longest_state_write_, cost);
  if (!r) {
    check_experiment_dir(now);
    if (lost_) return false;  // said once, by check_experiment_dir
    // Said at once, then at most every 30 s while it lasts (a full disk stays full for a while).
    if (!last_write_failed_ || now >= next_write_error_ || force)
      spdlog::error("cannot save experiment state: {} (the previous state is intact{})",
                    r.error().message, last_write_failed_ ? "; still failing" : "");
    if (!last_write_failed_ || now >= next_write_error_) next_write_error_ = now + 30;
    next_state_write_ = now + 1;
    last_write_failed_ = true;
    return false;
  }
  if (last_write_failed_) spdlog::warn("experiment state saved again");
  state_dirty_ = false;
  last_write_failed_ = false;
  searcher_->state_written();
  if (auto j = journal_.reset(); !j) spdlog::warn("{}", j.error().message);
  journal_replays();  // decisions read again after a crash that the state does not record yet
  // At most ~5% of wall time goes to state writes, unless a fixed period is set.
  double period = opts_.state_period_s ? *opts_.state_period_s : std::max(0.5, 20 * cost);
  next_state_write_ = now + period;
  run_deletions();
  if (opts_.uploader) opts_.uploader->request(false);
  return true;
}

}  // namespace tune::control
