#include "ui/live_table.hpp"

#include "ui/progress_bar.hpp"

#include <spdlog/details/log_msg.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "ui/terminal.hpp"
#include "ui/text.hpp"

namespace tune::ui {

using trial::Status;

namespace {

constexpr size_t kDefaultRows = 20;   // Ray's max_progress_rows
constexpr size_t kPlainChanges = 20;  // status lines per plain block before "... and N more"

class TableSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  TableSink(LiveTable* table, bool color) : table_(table), color_(color) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (table_) table_->clear();
    ProgressBar::erase_current();
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

std::vector<size_t> line_widths(const std::string& text) {
  std::vector<size_t> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = text.substr(start, nl - start);
    // Colors take no cells: drop SGR sequences (the only escapes a rendered table holds).
    std::string plain;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\x1b') {
        while (i < line.size() && line[i] != 'm') ++i;
        continue;
      }
      plain += line[i];
    }
    out.push_back(display_width(plain));
  }
  return out;
}

}  // namespace

TableOptions detect_table_options(bool quiet, std::optional<double> max_report_frequency) {
  TableOptions o;
  o.quiet = quiet;
  // A dumb terminal (Emacs' shell, some CI runners) cannot move the cursor: plain lines.
  o.tty = stderr_can_redraw();
  const char* no_color = std::getenv("NO_COLOR");
  o.color = o.tty && !(no_color && *no_color);
  o.period_s = max_report_frequency.value_or(o.tty ? kTtyPeriodS : kPlainPeriodS);
  if (const char* p = std::getenv("TUNE_PROGRESS_PERIOD_S"); p && *p)
    o.period_s = std::max(0.05, std::atof(p));
  o.changes_period_s = std::min(1.0, o.period_s);
  return o;
}

LiveTable::LiveTable(TableOptions opts, std::string* out) : opts_(std::move(opts)), out_(out) {
  if (opts_.tty && !opts_.quiet && !out_) watch_resizes();
}

double LiveTable::elapsed(const control::RunSnapshot& snap) {
  if (!clock_) clock_.emplace(snap.now, snap.state.elapsed_s);
  return clock_->second + std::max(0.0, snap.now - clock_->first);
}

std::string LiveTable::render(const control::RunSnapshot& snap, size_t width, size_t height) const {
  const auto& s = snap.state;
  double el = clock_ ? clock_->second + std::max(0.0, snap.now - clock_->first) : s.elapsed_s;
  width = std::max<size_t>(width, 20);
  // The summary's parts, on as few lines as the width allows.
  std::string head, line;
  for (const auto& part : summary_parts(s, snap.exp, el)) {
    if (!line.empty() && display_width(line) + 3 + display_width(part) > width) {
      head += fit_end(line, width) + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " | ") + part;
  }
  head += fit_end(line, width) + "\n";
  if (!note_.empty()) head += fit_end("note: " + note_, width) + "\n";
  if (std::string hosts = hosts_line(s); !hosts.empty())
    head += fit_end(hosts.substr(0, hosts.size() - 1), width) + "\n";
  TableView view = view_of(snap.exp, opts_.columns);
  view.scheduler = scheduler_of(s);
  view.color = opts_.color;
  size_t max_rows = snap.exp.progress_reporter.max_rows.value_or(kDefaultRows);
  // Title, "... more" and the cursor's line stay on screen with the header.
  size_t header_lines = static_cast<size_t>(std::count(head.begin(), head.end(), '\n'));
  size_t room = height > header_lines + 3 ? height - header_lines - 3 : 1;
  max_rows = std::max<size_t>(1, std::min(max_rows, room));
  auto rows = table_order(s, view);
  size_t hidden = rows.size() > max_rows ? rows.size() - max_rows : 0;
  rows.resize(rows.size() - hidden);
  return head + trial_table(rows, view, width, hidden);
}

std::string LiveTable::status_changes(const control::RunSnapshot& snap) {
  std::string out;
  if (note_ != told_note_) {
    told_note_ = note_;
    if (!note_.empty()) out += "note: " + sanitize(note_) + "\n";
  }
  // The hosts' line when a host went down or up (not when its count of running trials moved).
  std::string hosts;
  for (const auto& [name, st] : snap.state.hosts) hosts += name + '\0' + st + '\n';
  if (hosts != told_hosts_) {
    told_hosts_ = std::move(hosts);
    out += hosts_line(snap.state);
  }
  std::string sched = scheduler_of(snap.state);
  size_t told = 0, more = 0;
  for (const auto& t : snap.state.trials) {
    auto [it, fresh] = seen_.try_emplace(t.id, t.status);
    if (!fresh && it->second == t.status) continue;
    it->second = t.status;
    if (fresh && t.status == Status::kPending) continue;
    if (told++ >= kPlainChanges) {
      ++more;
      continue;
    }
    std::string note = trial_note(t, sched);
    out += "trial " + sanitize(t.name) + ": " + trial::status_name(t.status) + " at iter " +
           std::to_string(t.iteration) + (note.empty() ? "" : " (" + sanitize(note) + ")") + "\n";
  }
  if (more) out += "... and " + std::to_string(more) + " more trials changed status\n";
  return out;
}

std::string LiveTable::heartbeat(const control::RunSnapshot& snap) {
  std::string out =
      summary_line(snap.state, snap.exp, clock_ ? elapsed(snap) : snap.state.elapsed_s) + "\n";
  TableView view = view_of(snap.exp, opts_.columns);
  view.scheduler = scheduler_of(snap.state);
  std::vector<const trial::Trial*> running;
  for (const auto* t : table_order(snap.state, view))
    if (t->status == Status::kRunning) running.push_back(t);
  if (running.empty()) return out;
  size_t max_rows = snap.exp.progress_reporter.max_rows.value_or(kDefaultRows);
  size_t hidden = running.size() > max_rows ? running.size() - max_rows : 0;
  running.resize(running.size() - hidden);
  size_t width = opts_.width ? *opts_.width : output_width(STDERR_FILENO);
  return out + trial_table(running, view, width, hidden);
}

double LiveTable::seconds_until_due(double now) const {
  if (opts_.quiet) return 1e9;
  if (opts_.tty && resize_pending()) return 0;
  double due = last_draw_ + opts_.period_s;
  if (!opts_.tty) due = std::min(due, last_scan_ + opts_.changes_period_s);
  return std::max(0.0, due - now);
}

void LiveTable::write(const std::string& text) {
  if (out_) {
    *out_ += text;
    return;
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void LiveTable::clear() {
  if (!opts_.tty || drawn_widths_.empty()) return;
  // After a resize the terminal may have wrapped the lines drawn for the old width.
  size_t width = opts_.width ? *opts_.width : terminal_columns(STDERR_FILENO).value_or(80);
  size_t rows = 0;
  for (size_t w : drawn_widths_)
    rows += std::max<size_t>(1, (w + width - 1) / std::max<size_t>(width, 1));
  write("\x1b[" + std::to_string(rows) + "A\x1b[J");
  drawn_widths_.clear();
}

void LiveTable::draw(const control::RunSnapshot& snap) {
  last_draw_ = snap.now;
  (void)elapsed(snap);
  size_t width = opts_.width ? *opts_.width : terminal_columns(STDERR_FILENO).value_or(80);
  size_t height = opts_.height ? *opts_.height : terminal_rows(STDERR_FILENO).value_or(40);
  std::string text = render(snap, width, height);
  clear();
  write(text);
  drawn_widths_ = line_widths(text);
}

void LiveTable::on_progress(const control::RunSnapshot& snap, bool notable) {
  if (opts_.quiet) return;
  if (!opts_.tty) {
    (void)elapsed(snap);
    std::string text;
    if (notable || snap.now - last_scan_ >= opts_.changes_period_s) {
      last_scan_ = snap.now;
      text += status_changes(snap);
    }
    if (snap.now - last_draw_ >= opts_.period_s) {
      last_draw_ = snap.now;
      text += heartbeat(snap);
    }
    if (!text.empty()) write(text);
    return;
  }
  bool resized = opts_.tty && take_resize();
  if (!notable && !resized && snap.now - last_draw_ < opts_.period_s) return;
  draw(snap);
}

void LiveTable::on_run_end(const control::RunSnapshot& snap) {
  if (opts_.quiet) return;
  if (!opts_.tty) {
    (void)elapsed(snap);
    last_scan_ = last_draw_ = snap.now;
    write(status_changes(snap) + heartbeat(snap));
    return;
  }
  draw(snap);
}

std::shared_ptr<spdlog::sinks::sink> make_stderr_sink(LiveTable* table, bool color) {
  return std::make_shared<TableSink>(table, color);
}

}  // namespace tune::ui
