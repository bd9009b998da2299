// The controller's side of the searcher: new trials from its suggestions, its start (after a
// resume's restore, with the trials the state holds), search_alg.restore_from's warm start,
// and a searcher failure turned into the end of the run.
#include <spdlog/spdlog.h>

#include "control/controller.hpp"
#include "search/space.hpp"
#include "search/space_json.hpp"
#include "util/clock.hpp"
#include "util/strings.hpp"

namespace tune::control {

using trial::Status;

trial::Trial* Controller::new_trial() {
  auto cfg = searcher_->suggest(state_.next_index);
  if (cfg.kind == search::Suggestion::Kind::kFinished) {
    spdlog::info("the searcher has no more configs: {} trial(s) in all", state_.next_index);
    state_.total_trials = state_.next_index;
    mark_dirty();
    return nullptr;
  }
  if (cfg.kind == search::Suggestion::Kind::kWait) {
    searcher_waits();
    return nullptr;
  }
  idle_wait_since_.reset();
  trial::Trial t;
  t.index = state_.next_index++;
  char id[32];
  std::snprintf(id, sizeof id, "%05llu", static_cast<unsigned long long>(t.index));
  t.id = id;
  t.name = trial::make_trial_name(t.id, cfg.varying);
  t.config = std::move(cfg.config);
  index_[t.id] = state_.trials.size();
  state_.trials.push_back(std::move(t));
  sched_->on_trial_add(state_.trials.back().id, state_.trials.back().index);
  return &state_.trials.back();
}

// A searcher that answers "wait" while no trial runs waits for results that cannot come: after
// search_alg.timeout_s of that, the run ends as after a hang (exit 1, state saved, resumable).
void Controller::searcher_waits() {
  if (!running_.empty() || !pending_.empty() || !paused_.empty() || searcher_failed_) {
    idle_wait_since_.reset();
    return;
  }
  if (searcher_->busy() && !idle_wait_since_) return;  // no answer yet: a hang is its own error
  double now = util::mono();  // real time, as the searcher's own timeouts (not the executor's)
  if (!idle_wait_since_) idle_wait_since_ = now;
  double limit = exp_.search_alg.external.timeout_s;
  if (now - *idle_wait_since_ < limit) return;
  searcher_failed_ = fmt::format(
      "the searcher has given no config for {} s while no trial runs (it answers "
      "{{\"wait\": true}}), and no result it could wait for will come (search_alg.timeout_s)",
      util::format_double(limit));
  stopping_ = true;
  mark_dirty();
}

void Controller::start_searcher() {
  std::vector<search::KnownTrial> known;
  for (const auto& t : state_.trials) {
    search::KnownTrial k{t.id, t.config, t.finished(), {}};
    if (k.finished)
      k.completion = {t.id, t.config, t.status == Status::kError ? std::nullopt : value_of(t),
                      t.last_result, t.status == Status::kError};
    known.push_back(std::move(k));
  }
  if (auto r = searcher_->start(known); !r) throw Fatal(r.error(), kExitTrialError);
}

void Controller::load_warm_start() {
  if (!exp_.search_alg.restore_from) return;
  const fs::path& from = *exp_.search_alg.restore_from;
  auto earlier = state::load(from);
  if (!earlier) throw Fatal("search_alg.restore_from: " + earlier.error().message, kExitUsage);
  size_t skipped = 0;
  for (const auto& t : earlier->trials) {
    if (!t.finished()) continue;
    // Its config must fit this space: the searcher models this space only.
    auto fits = search::config_from_answer(exp_.space, t.config);
    if (!fits) {
      ++skipped;
      continue;
    }
    bool error = t.status == Status::kError;
    warm_.push_back({"restored-" + t.id, fits->config, error ? std::nullopt : value_of(t),
                     t.last_result, error});
  }
  if (skipped)
    spdlog::warn(
        "search_alg.restore_from: {} finished trial(s) of {} left out: their configs "
        "do not fit this param_space",
        skipped, from.string());
}

void Controller::warm_searcher() {
  for (const auto& c : warm_) searcher_->on_complete(c);
  if (!warm_.empty()) {
    spdlog::info("search_alg.restore_from: the searcher was told {} finished trial(s) of {}",
                 warm_.size(), exp_.search_alg.restore_from->string());
    mark_dirty();
  }
  warm_.clear();
}

void Controller::poll_searcher() {
  if (searcher_->poll()) mark_dirty();
  if (searcher_failed_) return;
  searcher_failed_ = searcher_->failure();
  if (!searcher_failed_) return;
  // Ends the run like a Ctrl-C (trials resume later), then exits 1 with this error.
  spdlog::debug("{}", *searcher_failed_);
  stopping_ = true;
  stop_all(StopWhy::kUser, false);
  mark_dirty();
}

}  // namespace tune::control
