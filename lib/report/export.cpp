#include "report/export.hpp"

#include <algorithm>
#include <set>

#include "report/gather.hpp"
#include "state/state.hpp"

namespace tune::report {

using json = nlohmann::json;

namespace {

const std::vector<std::string> kTrialFirst = {"trial_id",   "trial_name",      "status", "host",
                                              "iterations", "best_checkpoint", "error"};
const std::vector<std::string> kTrialGroups = {"config/", "last/", "best/"};
const std::vector<std::string> kRowFirst = {"trial_id", "trial_name", "training_iteration"};
const std::vector<std::string> kRowGroups = {"config/", ""};

void add_prefixed(json& row, const std::string& prefix, const json& obj) {
  json flat = flatten_config(obj);  // (a temporary's items() would dangle)
  for (const auto& [k, v] : flat.items()) row[prefix + k] = v;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One trial's row: status, best checkpoint, config/, last/ and best/ (by the metric).
json trial_row(const trial::Trial& t, const fs::path& dir, const state::ExperimentState& s,
               Skipped& skipped) {
  bool maximize = s.mode == "max";
  const trial::Checkpoint* ck = best_checkpoint(t, s.metric, maximize);
  json row = {{"trial_id", t.id},
              {"trial_name", t.name},
              {"status", trial::status_name(t.status)},
              {"host", t.host},
              {"iterations", t.iteration},
              {"best_checkpoint", ck ? json((dir / t.name / ck->dir_name()).string()) : json()},
              {"error", t.error.empty() ? json() : json(t.error)}};
  add_prefixed(row, "config/", t.config);
  json last, best;
  std::optional<double> best_v;
  size_t bad = each_result(dir / t.name, [&](json&& r) {
    if (s.metric) {
      auto it = r.find(*s.metric);
      if (it != r.end() && it->is_number() && !it->is_boolean()) {
        double v = it->get<double>();
        if (v == v && (!best_v || (maximize ? v > *best_v : v < *best_v))) {
          best_v = v;
          best = r;
        }
      }
    }
    last = std::move(r);
  });
  skipped.add(bad, dir / t.name / "result.json");
  if (last.is_null() && !t.last_result.empty()) last = t.last_result;
  if (last.is_object()) add_prefixed(row, "last/", last);
  if (best.is_object()) add_prefixed(row, "best/", best);
  return row;
}

json result_row(const trial::Trial& t, const json& r) {
  json row = {{"trial_id", t.id}, {"trial_name", t.name}};
  add_prefixed(row, "config/", t.config);
  json flat = flatten_config(r);
  for (const auto& [k, v] : flat.items())
    if (!row.contains(k)) row[k] = v;
  return row;
}

void write_csv_row(const std::vector<std::string>& cols, const json& row, std::ostream& out) {
  for (size_t i = 0; i < cols.size(); ++i) {
    auto it = row.find(cols[i]);
    out << (i ? "," : "") << (it == row.end() ? std::string() : csv_field(*it));
  }
  out << "\n";
}

void write_header(const std::vector<std::string>& cols, std::ostream& out) {
  for (size_t i = 0; i < cols.size(); ++i) out << (i ? "," : "") << csv_field(cols[i]);
  out << "\n";
}

// Rows in JSON forms, as they come.
class JsonOut {
 public:
  JsonOut(std::ostream& out, bool lines) : out_(out), lines_(lines) {}
  void row(const json& r) {
    if (lines_) {
      out_ << dump(r) << "\n";
      return;
    }
    out_ << (n_++ ? ",\n  " : "[\n  ") << dump(r);
  }
  void end() {
    if (!lines_) out_ << (n_ ? "\n]\n" : "[]\n");
  }

 private:
  std::ostream& out_;
  bool lines_;
  size_t n_ = 0;
};

void export_trials(const state::ExperimentState& s, const fs::path& dir, ExportFormat f,
                   std::ostream& out, const Progress& progress, Skipped& skipped) {
  std::vector<json> rows;
  std::set<std::string> keys;
  for (const auto& t : s.trials) {
    rows.push_back(trial_row(t, dir, s, skipped));
    for (const auto& [k, v] : rows.back().items()) keys.insert(k);
    if (progress) progress(rows.size(), s.trials.size());
  }
  if (f != ExportFormat::kCsv) {
    JsonOut j(out, f == ExportFormat::kJsonl);
    for (const auto& r : rows) j.row(r);
    j.end();
    return;
  }
  auto cols = column_order({keys.begin(), keys.end()}, kTrialFirst, kTrialGroups);
  write_header(cols, out);
  for (const auto& r : rows) write_csv_row(cols, r, out);
}

// Every result row; for CSV the files are read twice (the header first), so memory stays at
// one row. `progress` counts trials read (twice each for CSV).
void export_results(const state::ExperimentState& s, const fs::path& dir, ExportFormat f,
                    std::ostream& out, const Progress& progress, Skipped& skipped) {
  size_t n = s.trials.size(), total = f == ExportFormat::kCsv ? 2 * n : n, done = 0;
  auto step = [&] {
    if (progress) progress(++done, total);
  };
  if (f != ExportFormat::kCsv) {
    JsonOut j(out, f == ExportFormat::kJsonl);
    for (const auto& t : s.trials) {
      size_t bad = each_result(dir / t.name, [&](json&& r) { j.row(result_row(t, r)); });
      skipped.add(bad, dir / t.name / "result.json");
      step();
    }
    j.end();
    return;
  }
  std::set<std::string> keys;
  for (const auto& t : s.trials) {
    size_t bad = each_result(dir / t.name, [&](json&& r) {
      json row = result_row(t, r);
      for (const auto& [k, v] : row.items()) keys.insert(k);
    });
    skipped.add(bad, dir / t.name / "result.json");  // (the second pass meets the same lines)
    step();
  }
  auto cols = column_order({keys.begin(), keys.end()}, kRowFirst, kRowGroups);
  write_header(cols, out);
  for (const auto& t : s.trials) {
    each_result(dir / t.name, [&](json&& r) { write_csv_row(cols, result_row(t, r), out); });
    step();
  }
}

}  // namespace

std::string csv_field(const json& v) {
  std::string text;
  if (v.is_null())
    return "";
  else if (v.is_string())
    text = v.get<std::string>();
  else
    text = dump(v);
  bool quote = text.find_first_of(",\"\r\n") != std::string::npos ||
               (!text.empty() && (text.front() == ' ' || text.back() == ' '));
  if (!quote) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::string> column_order(const std::vector<std::string>& keys,
                                      const std::vector<std::string>& first,
                                      const std::vector<std::string>& groups) {
  std::vector<std::string> cols;
  std::set<std::string> rest(keys.begin(), keys.end());
  for (const auto& k : first)
    if (rest.erase(k)) cols.push_back(k);
  for (const auto& g : groups) {
    for (auto it = rest.begin(); it != rest.end();) {
      bool other_group = g.empty() && std::any_of(groups.begin(), groups.end(), [&](auto& h) {
                           return !h.empty() && it->starts_with(h);
                         });
      if (it->starts_with(g) && !other_group) {
        cols.push_back(*it);
        it = rest.erase(it);
      } else {
        ++it;
      }
    }
  }
  cols.insert(cols.end(), rest.begin(), rest.end());
  return cols;
}

Result<void> export_experiment(const fs::path& exp_dir, ExportFormat format, bool all_results,
                               std::ostream& out, const Progress& progress, Skipped* skipped) {
  Skipped here;
  Skipped& skip = skipped ? *skipped : here;
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(exp_dir, ec);
  if (ec) dir = fs::absolute(exp_dir);
  auto s = state::load(dir);
  if (!s) return std::unexpected(s.error());
  if (all_results)
    export_results(*s, dir, format, out, progress, skip);
  else
    export_trials(*s, dir, format, out, progress, skip);
  out.flush();
  if (!out) return std::unexpected(Error{"cannot write the export (output closed or full)"});
  return {};
}

}  // namespace tune::report
