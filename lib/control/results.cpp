// The controller's handling of trial output: result lines in both modes (step mode's commands
// are in step.cpp), driver-filled result fields, stop rules, and checkpoint registration and
// retention.
#include <spdlog/spdlog.h>

#include <cmath>
#include <ctime>

#include "checkpoint/adopt.hpp"
#include "control/controller.hpp"
#include "report/tfevents.hpp"
#include "trial/result_line.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::control {

using json = nlohmann::json;
using trial::Status;

namespace {

std::string ray_date(double wall) {
  auto t = static_cast<time_t>(wall);
  tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H-%M-%S", &tm);
  return buf;
}

// The numeric values of a result, nested ones flattened (what checkpoints remember for ranking).
json numeric_metrics(const json& result) {
  json m = json::object();
  json flat = result;  // a nested metric ranks as "a/b"
  trial::flatten_result(flat);
  for (auto it = flat.begin(); it != flat.end(); ++it)
    if (it->is_number() || it->is_boolean()) m[it.key()] = *it;
  return m;
}

}  // namespace

void Controller::on_output(const exec::OutputEvent& ev) {
  auto it = running_.find(ev.trial_id);
  if (it == running_.end()) return;  // output of an attempt we no longer track
  auto& t = trial(ev.trial_id);
  Runtime& rt = it->second;
  if (rt.dir_identity.first == 0 && rt.dir_identity.second == 0) note_trial_dir(t, rt);
  // The executor says where this attempt's output starts (SSH: learnt once it started).
  if (ev.from && rt.splitter.pending() == 0 && *ev.from != t.stdout_offset) {
    t.stdout_offset = *ev.from;
    mark_dirty();
  }
  if (ev.started && !rt.host_started) {
    rt.host_started = *ev.started;
    // Re-attached after results of this attempt were recorded: the latest one's arrival.
    double since =
        rt.iterations_since_restore > 0 ? std::max(0.0, t.time_total_s - rt.time_base) : 0.0;
    rt.host_last = {ev.started->wall + since, ev.started->mono + since};
  }
  rt.arrivals.insert(rt.arrivals.end(), ev.arrivals.begin(), ev.arrivals.end());
  uint64_t end = t.stdout_offset;  // where the line the splitter holds (if any) starts
  uint64_t consumed = rt.splitter.feed(
      ev.data,
      [&](std::string_view line) {
        end += line.size() + 1;
        rt.line_end = end;
        on_line(t, rt, line);
      },
      [&](uint64_t len) {
        end += len + 1;
        spdlog::warn("trial {}: a stdout line of {} bytes exceeds the 16 MiB limit: not parsed",
                     t.name, len);
      });
  t.stdout_offset += consumed;
  // Notes that end inside lines already read are needed by no later line: a trial that prints
  // only non-result lines must not make them pile up.
  while (!rt.arrivals.empty() && rt.arrivals.front().end <= t.stdout_offset) {
    rt.passed = rt.arrivals.front().at;
    rt.arrivals.pop_front();
  }
}

std::optional<exec::HostTime> Controller::arrival_of_line(Runtime& rt) {
  if (!rt.host_started) return std::nullopt;
  while (!rt.arrivals.empty() && rt.arrivals.front().end < rt.line_end) {
    rt.passed = rt.arrivals.front().at;
    rt.arrivals.pop_front();
  }
  if (!rt.arrivals.empty()) return rt.arrivals.front().at;
  // No note covers it (a line the driver completed at the exit, or notes that lag): the
  // latest time known of the host, so that its clock alone is used.
  return rt.passed.value_or(*rt.host_started);
}

void Controller::on_line(trial::Trial& t, Runtime& rt, std::string_view line) {
  // Only JSON objects are results; anything else (print debugging, binary junk) stays in
  // stdout.log and is otherwise ignored.
  trial::LineIssue issue;
  auto parsed = trial::parse_result_line(line, &issue);
  if (auto note = t.line_issues.note(issue, rt.splitter.lines()))
    spdlog::warn("trial {}: {}", t.name, *note);
  if (!parsed) return;
  json obj = std::move(*parsed);

  if (exp_.trial.mode == spec::TrialMode::kFunction) {
    if (rt.stop_why != StopWhy::kNone) return;  // results after a stop are not recorded
    record_result(t, rt, std::move(obj));
    return;
  }
  // Step mode: the reply to the command in flight.
  switch (rt.pending) {
    case StepOp::kStep: {
      rt.pending = StepOp::kNone;
      record_result(t, rt, obj);
      step_next(t, rt, t.last_result);
      break;
    }
    case StepOp::kSave:
      if (obj.contains("saved"))
        step_saved(t, rt, obj);
      else
        spdlog::warn("trial {}: expected {{\"saved\": ...}} after a save, got another line",
                     t.name);
      break;
    case StepOp::kStop:
    case StepOp::kNone:
      break;  // nothing asked: ignore
  }
}

void Controller::record_result(trial::Trial& t, Runtime& rt, json result) {
  double now = ex_.now();
  double wall = ex_.wall_time();
  if (!rt.pid) rt.pid = ex_.pid(t.id);
  std::optional<std::string> reported_checkpoint;
  if (auto it = result.find("checkpoint"); it != result.end()) {
    if (it->is_string())
      reported_checkpoint = it->get<std::string>();
    else if (!it->is_null())
      spdlog::warn("trial {}: \"checkpoint\" must be a directory path string", t.name);
    result.erase(it);
  }
  bool done = false;
  if (auto it = result.find("done"); it != result.end() && it->is_boolean()) done = it->get<bool>();
  rt.iterations_since_restore += 1;
  t.iteration += 1;
  t.fail_streak = 0;
  double total = rt.time_base + (now - rt.started);
  double this_iter = now - rt.last_result_at;
  if (auto at = arrival_of_line(rt)) {  // the trial's times, on its host's clocks
    total = rt.time_base + std::max(0.0, at->mono - rt.host_started->mono);
    this_iter = std::max(0.0, at->mono - rt.host_last.mono);
    wall = at->wall;
    rt.host_last = *at;
  }
  result["training_iteration"] = t.iteration;
  result["time_this_iter_s"] = this_iter;
  result["time_total_s"] = total;
  result["timestamp"] = static_cast<int64_t>(wall);
  result["date"] = ray_date(wall);
  result["trial_id"] = t.id;
  result["hostname"] = t.host;
  if (rt.pid)
    result["pid"] = *rt.pid;
  else
    result["pid"] = nullptr;
  result["iterations_since_restore"] = rt.iterations_since_restore;
  result["done"] = done;
  rt.last_result_at = now;
  t.time_total_s = total;

  if (reported_checkpoint) take_checkpoint(t, rt, *reported_checkpoint, result);

  if (!rt.log
           .is_open()) {  // opened at the first result: a trial that reports nothing gets no files
    if (auto r = rt.log.open(trial_dir(t)); !r)
      spdlog::warn("trial {}: {}", t.name, r.error().message);
  }
  // The same rows into a TensorBoard event file (made at its first write), once per opened log.
  if (exp_.tensorboard && rt.log.is_open() && !rt.log.has_sink())
    rt.log.set_sink(std::make_unique<report::EventWriter>(trial_dir(t), host_name_));
  // The result that meets a stop criterion is the trial's last: it says done, as Ray's does.
  // result.json keeps what the trial wrote; stop rules, metrics and ranking see nested values
  // flattened ({"val": {"acc": ..}} as "val/acc"), as Ray Tune does.
  json flat = result;
  trial::flatten_result(flat);
  bool criterion = should_stop(flat);
  if (criterion) result["done"] = flat["done"] = true;
  if (!criterion && !done) {
    consult_scheduler(t, rt, flat);  // nested metrics are seen flattened, as by the stop rules
    replay_decision(t, rt, flat);    // (a resume reading again what it decided before a crash)
    if (auto d = flat.find("decision"); d != flat.end()) {
      result["decision"] = *d;
      result["done"] = flat["done"];
    }
  }
  rt.log.append(result);
  notify(TrialEvent::kResult, t, result);
  t.track_metrics(flat);
  t.last_result = std::move(flat);
  searcher_->on_result(t.id, t.last_result);
  mark_dirty();
  if (exp_.trial.mode == spec::TrialMode::kFunction) {
    if (criterion)
      request_stop(t, rt, StopWhy::kCriterion);
    else if (done)
      request_stop(t, rt, StopWhy::kDone);
    else
      act_on_decision(t, rt);
  }
}

bool Controller::should_stop(const json& result) const {
  for (const auto& [key, threshold] : exp_.stop) {
    auto it = result.find(key);
    if (it != result.end() && it->is_number() && it->get<double>() >= threshold) return true;
  }
  return false;
}

void Controller::register_checkpoint(trial::Trial& t, Runtime& rt, int64_t seq,
                                     const json& result) {
  trial::Checkpoint c;
  c.seq = seq;
  c.iteration = t.iteration;
  c.time_total_s = t.time_total_s;
  c.metrics = numeric_metrics(result);
  t.checkpoint_seq = std::max(t.checkpoint_seq, seq);
  add_checkpoint(t, rt, std::move(c));
}

void Controller::add_checkpoint(trial::Trial& t, Runtime& rt, trial::Checkpoint c) {
  if (std::any_of(t.checkpoints.begin(), t.checkpoints.end(),
                  [&](const trial::Checkpoint& k) { return k.seq == c.seq; })) {
    spdlog::warn("trial {}: {} is registered already: not twice", t.name, c.dir_name());
    return;
  }
  rt.last_checkpoint_iteration = std::max(rt.last_checkpoint_iteration, c.iteration);
  spdlog::info("trial {}: checkpoint {} at iteration {}", t.name, c.dir_name(), c.iteration);
  if (const auto& attr = exp_.checkpoint.score_attribute) {
    auto it = c.metrics.find(*attr);
    if (it == c.metrics.end() || !it->is_number() || !std::isfinite(it->get<double>()))
      spdlog::warn("trial {}: {} has no numeric '{}' in its result: it ranks worst", t.name,
                   c.dir_name(), *attr);
  }
  // In seq order (copies finish in the order they were asked for, after any earlier move).
  auto at = std::find_if(t.checkpoints.begin(), t.checkpoints.end(),
                         [&](const trial::Checkpoint& k) { return k.seq > c.seq; });
  json detail = {{"checkpoint", c.dir_name()}, {"iteration", c.iteration}};
  t.checkpoints.insert(at, std::move(c));
  notify(TrialEvent::kCheckpoint, t, detail);
  apply_retention(t, true);
  ex_.checkpoint_registered(t.id);
  mark_dirty();
}

json Controller::checkpoint_metrics(const json& result) {
  return numeric_metrics(result);
}

void Controller::apply_retention(trial::Trial& t, bool can_run) {
  // (a missing score was warned about once, when the checkpoint was registered)
  auto doomed = checkpoint::select_for_deletion(t.checkpoints, policy_, can_run);
  // A checkpoint a pending exploit will copy stays until it is copied (pbt).
  if (!doomed.empty() && exp_.scheduler.kind == spec::SchedulerKind::kPbt)
    for (int64_t seq : pinned_checkpoints(t)) std::erase(doomed, seq);
  if (doomed.empty()) return;
  std::erase_if(t.checkpoints, [&](const trial::Checkpoint& c) {
    if (std::find(doomed.begin(), doomed.end(), c.seq) == doomed.end()) return false;
    pending_deletions_.push_back({trial_dir(t), c.dir_name(), remote_host(t)});
    if (!remote_host(t).empty()) ex_.checkpoint_dropped(t.id, c.dir_name());
    return true;
  });
  mark_dirty();
}

}  // namespace tune::control
