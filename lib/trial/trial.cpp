#include "trial/trial.hpp"

#include <cmath>
#include <cstdio>

#include "search/space.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::trial {

void Trial::track_metrics(const json& result) {
  for (auto it = result.begin(); it != result.end(); ++it) {
    if (!it->is_number()) continue;
    const std::string& key = it.key();
    // Bookkeeping the driver fills in: their extremes mean nothing (and would bloat the state).
    if (key == "timestamp" || key == "pid" || key == "time_this_iter_s" ||
        key == "iterations_since_restore")
      continue;
    double v = it->get<double>();
    auto [m, fresh] = metrics.try_emplace(key, MetricStats{v, v, v});
    if (!fresh) {
      m->second.last = v;
      if (v < m->second.min || std::isnan(m->second.min)) m->second.min = v;
      if (v > m->second.max || std::isnan(m->second.max)) m->second.max = v;
    }
  }
}

const char* reason_name(Reason r) {
  switch (r) {
    case Reason::kNone:
      return "";
    case Reason::kInterrupted:
      return "interrupted";
    case Reason::kStopped:
      return "stopped";
    case Reason::kPaused:
      return "paused";
  }
  return "";
}

std::optional<Reason> parse_reason(std::string_view s) {
  for (Reason r : {Reason::kNone, Reason::kInterrupted, Reason::kStopped, Reason::kPaused})
    if (s == reason_name(r)) return r;
  return std::nullopt;
}

const char* cause_name(Cause c) {
  switch (c) {
    case Cause::kNone:
      return "";
    case Cause::kCutoff:
      return "cutoff";
    case Cause::kMedian:
      return "median";
    case Cause::kMaxT:
      return "max_t";
    case Cause::kRung:
      return "rung";
    case Cause::kTurn:
      return "turn";
    case Cause::kExploit:
      return "exploit";
    case Cause::kUser:
      return "user";
  }
  return "";
}

std::optional<Cause> parse_cause(std::string_view s) {
  for (Cause c : {Cause::kNone, Cause::kCutoff, Cause::kMedian, Cause::kMaxT, Cause::kRung,
                  Cause::kTurn, Cause::kExploit, Cause::kUser})
    if (s == cause_name(c)) return c;
  return std::nullopt;
}

std::string describe_decision(const Trial& t, std::string_view scheduler) {
  // pbt: an exploit decided, then the last one carried out (while the trial waits for its
  // restart, after it, and once it ended by itself).
  if (t.cause == Cause::kExploit && t.reason == Reason::kPaused && t.pending_exploit.is_object())
    return "exploited " + t.pending_exploit.value("donor", "") + " @ " +
           util::format_double(t.decided_at);
  if (!t.exploited_from.empty() &&
      (t.reason == Reason::kNone || (t.reason == Reason::kPaused && t.cause == Cause::kExploit)))
    return "exploited " + t.exploited_from + " @ " + util::format_double(t.exploited_at);
  if (t.reason != Reason::kStopped && t.reason != Reason::kPaused) return "";
  if (t.cause == Cause::kUser) return "stopped by tune stop";
  std::string at = util::format_double(t.decided_at);
  if (t.cause == Cause::kMaxT) return "reached max_t at " + at;
  return std::string(t.reason == Reason::kStopped ? "stopped by " : "paused by ") +
         std::string(scheduler) + " at " + at;
}

const char* status_name(Status s) {
  switch (s) {
    case Status::kPending:
      return "PENDING";
    case Status::kRunning:
      return "RUNNING";
    case Status::kPaused:
      return "PAUSED";
    case Status::kTerminated:
      return "TERMINATED";
    case Status::kError:
      return "ERROR";
  }
  return "?";
}

std::optional<Status> parse_status(std::string_view s) {
  for (Status st :
       {Status::kPending, Status::kRunning, Status::kPaused, Status::kTerminated, Status::kError})
    if (s == status_name(st)) return st;
  return std::nullopt;
}

std::string Checkpoint::dir_name() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "checkpoint_%06lld", static_cast<long long>(seq));
  return buf;
}

std::string make_trial_name(const std::string& id,
                            const std::vector<std::pair<std::string, json>>& varying) {
  std::string name = "trial_" + id;
  std::string params;
  for (const auto& [key, v] : varying) {
    std::string text =
        v.is_number_float() ? util::format_short(v.get<double>()) : search::value_text(v);
    if (!params.empty()) params += ",";
    // the last path component keeps names short, as Ray Tune does
    auto dot = key.rfind('.');
    params += (dot == std::string::npos ? key : key.substr(dot + 1)) + "=" + text;
  }
  if (!params.empty()) name += "_" + params;
  return util::safe_component(name, 200);
}

}  // namespace tune::trial
