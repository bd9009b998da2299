#include "ui/trial_table.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "search/space.hpp"
#include "ui/layout.hpp"
#include "ui/text.hpp"
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

int rank(Status st) {
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
}

std::string metric_text(const trial::Trial& t, const std::string& m, bool best, bool max_mode) {
  auto it = t.metrics.find(m);
  if (it == t.metrics.end()) return "";
  double v = best ? (max_mode ? it->second.max : it->second.min) : it->second.last;
  return util::format_short(v, 5);
}

std::string param_text(const trial::Trial& t, const std::string& path) {
  const auto* v = search::lookup(t.config, path);
  if (!v) return "";
  if (v->is_number_float()) return util::format_short(v->get<double>(), 5);
  return v->is_string() ? v->get<std::string>() : search::value_text(*v);
}

// A numeric column is as wide as its widest value: numbers never shrink, only their titles.
Column numeric(std::string title, int drop) {
  Column c;
  c.title = std::move(title);
  c.right = true;
  c.drop_priority = drop;
  return c;
}

void finish_numeric(Column& c) {
  size_t w = 1;
  for (const auto& cell : c.cells) w = std::max(w, display_width(cell));
  c.min_width = std::max<size_t>(w, std::min<size_t>(display_width(c.title), 6));
}

}  // namespace

TableView view_of(const spec::Experiment& exp,
                  const std::optional<std::vector<std::string>>& columns) {
  TableView v;
  v.metric = exp.metric;
  v.max_mode = exp.mode == spec::Order::kMax;
  const auto& pr = exp.progress_reporter;
  v.sort_by_metric = pr.sort_by_metric && exp.metric;
  if (columns) {
    for (const auto& c : *columns) {
      if (c.starts_with("config/")) {
        std::string path = c.substr(7);
        std::replace(path.begin(), path.end(), '/', '.');
        v.params.push_back({path, path});
      } else {
        v.metrics.push_back({c, c});
      }
    }
    return v;
  }
  if (pr.metric_columns)
    v.metrics = *pr.metric_columns;
  else if (exp.metric)
    v.metrics.push_back({*exp.metric, *exp.metric});
  if (pr.parameter_columns) {
    v.params = *pr.parameter_columns;
  } else {
    for (const auto& p : exp.space.params) {
      std::string path;
      for (const auto& part : p.path) path += (path.empty() ? "" : ".") + part;
      v.params.push_back({path, path});
    }
  }
  return v;
}

std::variant<std::vector<std::string>, std::string> parse_columns_flag(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty() || item == "config/")
      return "--columns: empty column name in '" + util::printable(text, 80) + "'";
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<const trial::Trial*> table_order(const state::ExperimentState& s,
                                             const TableView& view) {
  std::vector<const trial::Trial*> rows;
  rows.reserve(s.trials.size());
  for (const auto& t : s.trials) rows.push_back(&t);
  if (view.sort_by_metric && view.metric) {
    auto value = [&](const trial::Trial* t) -> std::optional<double> {
      auto it = t->metrics.find(*view.metric);
      if (it == t->metrics.end() || !std::isfinite(it->second.last)) return std::nullopt;
      return view.max_mode ? -it->second.last : it->second.last;
    };
    std::stable_sort(rows.begin(), rows.end(), [&](auto* a, auto* b) {
      auto va = value(a), vb = value(b);
      if (va && vb) return *va < *vb;
      return va.has_value() && !vb.has_value();
    });
    return rows;
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](auto* a, auto* b) { return rank(a->status) < rank(b->status); });
  return rows;
}

std::string trial_table(std::span<const trial::Trial* const> rows, const TableView& view,
                        size_t width, size_t hidden) {
  std::vector<Column> cols;
  Column name = column("trial", 12, 0, false, 28);
  Column status = column("status");
  Column host = column("host", 6, 4, false, 12);
  Column iter = numeric("iter", 0);
  std::vector<Column> metrics, params;
  for (const auto& m : view.metrics) metrics.push_back(numeric(m.title, metrics.empty() ? 0 : 1));
  Column best = numeric("best", 0);
  for (const auto& p : view.params) params.push_back(column(p.title, 6, 2, false, 10));
  Column time = numeric("time(s)", 3);
  Column note = column("", 10, 5, false, 24);
  bool any_note = false;
  for (const auto* t : rows) {
    name.cells.push_back(t->name);
    status.cells.push_back(trial::status_name(t->status));
    status.colors.push_back(view.color ? color_of(t->status) : "");
    host.cells.push_back(t->host.empty() ? "-" : t->host);
    iter.cells.push_back(std::to_string(t->iteration));
    for (size_t i = 0; i < metrics.size(); ++i)
      metrics[i].cells.push_back(metric_text(*t, view.metrics[i].key, false, view.max_mode));
    if (view.metric) best.cells.push_back(metric_text(*t, *view.metric, true, view.max_mode));
    for (size_t i = 0; i < params.size(); ++i)
      params[i].cells.push_back(param_text(*t, view.params[i].key));
    time.cells.push_back(util::format_short(t->time_total_s, 4));
    note.cells.push_back(trial_note(*t, view.scheduler));
    any_note |= !note.cells.back().empty();
  }
  cols.push_back(std::move(name));
  cols.push_back(std::move(status));
  if (view.show_host) cols.push_back(std::move(host));
  finish_numeric(iter);
  cols.push_back(std::move(iter));
  for (auto& m : metrics) {
    finish_numeric(m);
    cols.push_back(std::move(m));
  }
  if (view.metric) {
    finish_numeric(best);
    cols.push_back(std::move(best));
  }
  for (auto& p : params) cols.push_back(std::move(p));
  finish_numeric(time);
  cols.push_back(std::move(time));
  if (any_note) cols.push_back(std::move(note));
  std::string out = layout_table(std::move(cols), width);
  if (hidden > 0) out += fit_end("... " + std::to_string(hidden) + " more trials", width) + "\n";
  return out;
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

std::string hosts_line(const state::ExperimentState& s) {
  if (s.hosts.size() < 2 && (s.hosts.empty() || s.hosts.begin()->second == "up")) return "";
  std::map<std::string, int> running;
  for (const auto& t : s.trials)
    if (t.status == trial::Status::kRunning) ++running[t.host];
  std::string out = "hosts:";
  bool first = true;
  for (const auto& [name, st] : s.hosts) {
    out += (first ? " " : ", ") + sanitize(name) + " " + sanitize(st) + " (" +
           std::to_string(running[name]) + " running)";
    first = false;
  }
  return out + "\n";
}

}  // namespace tune::ui
