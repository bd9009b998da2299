#include "ui/summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ui/text.hpp"
#include "util/strings.hpp"

namespace tune::ui {

using trial::Status;

std::string status_counts(const state::ExperimentState& s) {
  std::map<Status, uint64_t> n;
  for (const auto& t : s.trials) ++n[t.status];
  return status_counts(n, s.total_trials, s.next_index);
}

std::string status_counts(const std::map<Status, uint64_t>& counts, uint64_t total_trials,
                          uint64_t next_index) {
  auto n = counts;
  n[Status::kPending] += total_trials > next_index ? total_trials - next_index : 0;
  std::string out;
  for (Status st :
       {Status::kRunning, Status::kPending, Status::kPaused, Status::kTerminated, Status::kError}) {
    uint64_t c = n[st];
    if (!c) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(c) + " " + trial::status_name(st);
  }
  return out.empty() ? "no trials" : out;
}

const trial::Trial* best_trial(const state::ExperimentState& s, const std::string& metric,
                               bool max_mode, bool include_errored) {
  const trial::Trial* best = nullptr;
  double bv = 0;
  for (const auto& t : s.trials) {
    if (t.status == Status::kError && !include_errored) continue;
    auto it = t.metrics.find(metric);
    if (it == t.metrics.end() || !std::isfinite(it->second.last)) continue;
    double v = it->second.last;
    if (!best || (max_mode ? v > bv : v < bv)) best = &t, bv = v;
  }
  return best;
}

std::string hms(double s) {
  char buf[48];
  if (!(s < 60)) {
    double clamped = std::min(s, 1e9);
    auto t = static_cast<long>(clamped);
    std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.1fs", std::max(0.0, s));
  return buf;
}

std::optional<double> iteration_bound(const spec::Experiment& exp) {
  std::optional<double> bound;
  if (auto it = exp.stop.find("training_iteration"); it != exp.stop.end() && it->second > 0)
    bound = it->second;
  const auto& sc = exp.scheduler;
  if (sc.kind != spec::SchedulerKind::kFifo && sc.time_attr == "training_iteration" && sc.max_t > 0)
    bound = bound ? std::min(*bound, sc.max_t) : sc.max_t;
  return bound;
}

std::optional<double> eta_seconds(const state::ExperimentState& s, const spec::Experiment& exp,
                                  double elapsed_s) {
  if (s.total_trials == 0 || !(elapsed_s > 0)) return std::nullopt;
  auto finished = [](const trial::Trial& t) {
    return t.status == Status::kTerminated || t.status == Status::kError;
  };
  double done = 0, work = 0;
  if (auto bound = iteration_bound(exp)) {
    for (const auto& t : s.trials)
      done += finished(t) ? *bound : std::min(*bound, static_cast<double>(t.iteration));
    work = static_cast<double>(s.total_trials) * *bound;
  } else {
    // No bound: a finished trial is one unit of work, and an unfinished one counts the share
    // of a finished trial's typical length it has run (at most 95%), so the ETA shrinks while
    // trials run instead of growing until the next one ends.
    double finished_iterations = 0, finished_trials = 0;
    for (const auto& t : s.trials)
      if (finished(t)) {
        done += 1;
        finished_trials += 1;
        finished_iterations += static_cast<double>(t.iteration);
      }
    if (finished_iterations > 0) {
      double typical = finished_iterations / finished_trials;
      for (const auto& t : s.trials)
        if (!finished(t)) done += std::min(0.95, static_cast<double>(t.iteration) / typical);
    }
    work = static_cast<double>(s.total_trials);
  }
  if (done >= work) return 0.0;
  if (done <= 0) return std::nullopt;
  double eta = (work - done) * elapsed_s / done;
  if (exp.time_budget_s) eta = std::min(eta, std::max(0.0, *exp.time_budget_s - elapsed_s));
  return eta;
}

std::vector<std::string> summary_parts(const state::ExperimentState& s, const spec::Experiment& exp,
                                       double elapsed_s) {
  std::vector<std::string> parts{"== " + sanitize(s.name) + " == " + status_counts(s)};
  if (exp.metric) {
    if (const auto* b = best_trial(s, *exp.metric, exp.mode == spec::Order::kMax))
      parts.push_back("best " + sanitize(*exp.metric) + "=" +
                      util::format_short(b->metrics.at(*exp.metric).last, 5) + " (" +
                      sanitize(b->id) + ")");
  }
  parts.push_back("elapsed " + hms(elapsed_s));
  if (auto eta = eta_seconds(s, exp, elapsed_s); eta && *eta > 0)
    parts.push_back("eta ~" + hms(*eta));
  return parts;
}

std::string summary_line(const state::ExperimentState& s, const spec::Experiment& exp,
                         double elapsed_s) {
  std::string out;
  for (const auto& p : summary_parts(s, exp, elapsed_s)) out += (out.empty() ? "" : " | ") + p;
  return out;
}

std::string final_summary(const state::ExperimentState& s, const spec::Experiment& exp) {
  std::string out = "experiment '" + sanitize(s.name) + "': " + status_counts(s) + " in " +
                    hms(s.elapsed_s) + "\n";
  if (exp.metric) {
    bool max_mode = exp.mode == spec::Order::kMax;
    std::string metric = sanitize(*exp.metric);
    if (const auto* b = best_trial(s, *exp.metric, max_mode)) {
      out += "best trial: " + sanitize(b->name) + "  " + metric + "=" +
             util::format_short(b->metrics.at(*exp.metric).last, 6) + " (" +
             (max_mode ? "max" : "min") + ")\n  config: " +
             sanitize(b->config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) +
             "\n";
    } else {
      out += "best trial: no trial outside ERROR reported '" + metric + "'\n";
    }
  }
  for (const auto& t : s.trials)
    if (t.status == Status::kError)
      out += "error: " + sanitize(t.name) + ": " + sanitize(t.error) + "\n";
  out += "results: " + sanitize(exp.dir().string()) + "\n";
  return out;
}

}  // namespace tune::ui
