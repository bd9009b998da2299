#include "ui/live_table.hpp"

#include <map>

#include <spdlog/details/log_msg.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "util/strings.hpp"

namespace tune::ui {

using trial::Status;

namespace {

const char* color_of(Status s) {
  switch (s) {
    case Status::kRunning:
      return "\x1b[36m";
    case Status::kTerminated:
      return "\x1b[32m";
    case Status::kError:
      return "\x1b[31m";
    case Status::kPaused:
      return "\x1b[33m";
    case Status::kPending:
      return "\x1b[2m";
  }
  return "";
}

std::string pad(std::string s, size_t w) {
  if (s.size() > w) s = s.substr(0, w - 1) + "~";
  s.resize(w, ' ');
  return s;
}

std::string hms(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", std::max(0.0, s));
    return buf;
  }
  auto t = static_cast<long>(s);
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

std::string metric_text(const trial::Trial& t, const std::string& m, bool best, bool max_mode) {
  auto it = t.metrics.find(m);
  if (it == t.metrics.end()) return "-";
  double v = best ? (max_mode ? it->second.max : it->second.min) : it->second.last;
  return util::format_short(v, 5);
}

class TableSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  TableSink(LiveTable* table, bool color) : table_(table), color_(color) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (table_) table_->clear();
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::string line(buf.data(), buf.size());
    if (color_ && msg.level >= spdlog::level::warn) {
      const char* c = msg.level >= spdlog::level::err ? "\x1b[31m" : "\x1b[33m";
      line = c + line.substr(0, line.size() - 1) + "\x1b[0m\n";
    }
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  LiveTable* table_;
  bool color_;
};

}  // namespace

TableOptions detect_table_options(bool quiet) {
  TableOptions o;
  o.quiet = quiet;
  o.tty = ::isatty(STDERR_FILENO) != 0;
  const char* no_color = std::getenv("NO_COLOR");
  o.color = o.tty && !(no_color && *no_color);
  o.period_s = o.tty ? 0.5 : 10.0;
  if (const char* p = std::getenv("TUNE_PROGRESS_PERIOD_S"); p && *p)
    o.period_s = std::max(0.05, std::atof(p));
  return o;
}

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

std::string trial_table_header(const std::optional<std::string>& metric, size_t name_w) {
  std::string out = pad("trial", name_w) + "  " + pad("status", 10) + "  " + pad("host", 12) +
                    "  " + pad("iter", 6);
  if (metric) out += "  " + pad(*metric, 10) + "  " + pad("best", 10);
  return out + "  " + pad("time(s)", 8) + "\n";
}

std::string scheduler_of(const state::ExperimentState& s) {
  if (!s.scheduler.is_object()) return "";
  auto it = s.scheduler.find("type");
  return it != s.scheduler.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string trial_note(const trial::Trial& t, std::string_view scheduler) {
  if (t.reason == trial::Reason::kInterrupted) return "interrupted";
  return trial::describe_decision(t, scheduler.empty() ? "scheduler" : scheduler);
}

std::string trial_row(const trial::Trial& t, const std::optional<std::string>& metric,
                      bool max_mode, size_t name_w, bool color, std::string_view scheduler) {
  std::string st = pad(trial::status_name(t.status), 10);
  if (color) st = std::string(color_of(t.status)) + st + "\x1b[0m";
  std::string out = pad(t.name, name_w) + "  " + st + "  " +
                    pad(t.host.empty() ? "-" : t.host, 12) + "  " +
                    pad(std::to_string(t.iteration), 6);
  if (metric)
    out += "  " + pad(metric_text(t, *metric, false, max_mode), 10) + "  " +
           pad(metric_text(t, *metric, true, max_mode), 10);
  out += "  " + pad(util::format_short(t.time_total_s, 4), 8);
  std::string note = trial_note(t, scheduler);
  return (note.empty() ? out : out + "  " + note) + "\n";
}

std::string trial_table(const state::ExperimentState& s, const std::optional<std::string>& metric,
                        bool max_mode, size_t max_rows, bool color) {
  std::vector<const trial::Trial*> rows;
  for (const auto& t : s.trials) rows.push_back(&t);
  // Running first, then errors, then the rest by index.
  auto rank = [](Status st) {
    switch (st) {
      case Status::kRunning:
        return 0;
      case Status::kError:
        return 1;
      case Status::kPaused:
        return 2;
      case Status::kPending:
        return 3;
      case Status::kTerminated:
        return 4;
    }
    return 5;
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](auto* a, auto* b) { return rank(a->status) < rank(b->status); });
  size_t name_w = 12;
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i)
    name_w = std::max(name_w, std::min<size_t>(rows[i]->name.size(), 48));
  std::string out = trial_table_header(metric, name_w);
  size_t shown = 0;
  for (const auto* t : rows) {
    if (shown++ >= max_rows) break;
    out += trial_row(*t, metric, max_mode, name_w, color, scheduler_of(s));
  }
  if (rows.size() > max_rows)
    out += "... " + std::to_string(rows.size() - max_rows) + " more trials\n";
  return out;
}

std::string final_summary(const state::ExperimentState& s, const spec::Experiment& exp) {
  std::string out =
      "experiment '" + s.name + "': " + status_counts(s) + " in " + hms(s.elapsed_s) + "\n";
  if (exp.metric) {
    bool max_mode = exp.mode == spec::Order::kMax;
    if (const auto* b = best_trial(s, *exp.metric, max_mode)) {
      out += "best trial: " + b->name + "  " + *exp.metric + "=" +
             util::format_short(b->metrics.at(*exp.metric).last, 6) + " (" +
             (max_mode ? "max" : "min") + ")\n  config: " + b->config.dump() + "\n";
    } else {
      out += "best trial: no trial outside ERROR reported '" + *exp.metric + "'\n";
    }
  }
  for (const auto& t : s.trials)
    if (t.status == Status::kError) out += "error: " + t.name + ": " + t.error + "\n";
  out += "results: " + exp.dir().string() + "\n";
  return out;
}

double LiveTable::seconds_until_due(double now) const {
  if (opts_.quiet) return 1e9;
  return std::max(0.0, last_draw_ + opts_.period_s - now);
}

void LiveTable::clear() {
  if (!opts_.tty || drawn_lines_ == 0) return;
  std::fprintf(stderr, "\x1b[%zuA\x1b[J", drawn_lines_);
  drawn_lines_ = 0;
}

std::string hosts_line(const state::ExperimentState& s) {
  if (s.hosts.size() < 2 && (s.hosts.empty() || s.hosts.begin()->second == "up")) return "";
  std::map<std::string, int> running;
  for (const auto& t : s.trials)
    if (t.status == trial::Status::kRunning) ++running[t.host];
  std::string out = "hosts:";
  bool first = true;
  for (const auto& [name, st] : s.hosts) {
    out +=
        (first ? " " : ", ") + name + " " + st + " (" + std::to_string(running[name]) + " running)";
    first = false;
  }
  return out + "\n";
}

void LiveTable::update(double now, const state::ExperimentState& s, const spec::Experiment& exp,
                       bool force) {
  if (opts_.quiet) return;
  if (!force && now - last_draw_ < opts_.period_s) return;
  last_draw_ = now;
  std::string text = "== " + s.name + " == " + status_counts(s) + " | elapsed " + hms(s.elapsed_s);
  if (exp.metric) {
    if (const auto* b = best_trial(s, *exp.metric, exp.mode == spec::Order::kMax))
      text += " | best " + *exp.metric + "=" +
              util::format_short(b->metrics.at(*exp.metric).last, 5) + " (" + b->id + ")";
  }
  text += "\n";
  if (!note_.empty()) text += "note: " + note_ + "\n";
  text += hosts_line(s);
  size_t rows = opts_.tty ? opts_.max_rows : 8;
  text += trial_table(s, exp.metric, exp.mode == spec::Order::kMax, rows, opts_.color);
  clear();
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  if (opts_.tty) drawn_lines_ = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::shared_ptr<spdlog::sinks::sink> make_stderr_sink(LiveTable* table, bool color) {
  return std::make_shared<TableSink>(table, color);
}

}  // namespace tune::ui
