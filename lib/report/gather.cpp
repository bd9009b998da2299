#include "report/gather.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "report/decisions.hpp"
#include "state/state.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"

namespace tune::report {

using json = nlohmann::json;

namespace {

void flatten_into(const json& v, const std::string& prefix, json& out, int depth) {
  if (v.is_object() && depth < 32) {
    for (const auto& [k, sub] : v.items())
      flatten_into(sub, prefix.empty() ? k : prefix + "/" + k, out, depth + 1);
    return;
  }
  if (v.is_primitive() && !v.is_binary())
    out[prefix] = v;
  else
    out[prefix] = v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<double> finite(const json& v) {
  if (!v.is_number()) return std::nullopt;
  double d = v.get<double>();
  return std::isfinite(d) ? std::optional(d) : std::nullopt;
}

json trial_json(const trial::Trial& t, const fs::path& exp_dir,
                const std::optional<std::string>& metric, bool maximize,
                const std::vector<Mark>& marks, std::string& blob) {
  json last = json::object();
  for (const auto& [k, st] : t.metrics)
    if (std::isfinite(st.last)) last[k] = st.last;
  json best = nullptr;
  if (metric) {
    if (auto it = t.metrics.find(*metric); it != t.metrics.end()) {
      double b = maximize ? it->second.max : it->second.min;
      if (std::isfinite(b)) best = b;
    }
  }
  json ckpts = json::array();
  for (const auto& c : t.checkpoints) ckpts.push_back(c.iteration);
  const trial::Checkpoint* pick = best_checkpoint(t, metric, maximize);
  json mk = json::array();
  for (const auto& m : marks) mk.push_back({m.x, mark_kind_name(m.kind), m.text});
  json out = {
      {"id", t.id},
      {"name", t.name},
      {"status", trial::status_name(t.status)},
      {"reason", trial::reason_name(t.reason)},
      {"host", t.host},
      {"iter", t.iteration},
      {"error", t.error},
      {"time_total_s", t.time_total_s},
      {"config", flatten_config(t.config)},
      {"last", last},
      {"best", best},
      {"ckpts", ckpts},
      {"ckpt_path", pick ? json((exp_dir / t.name / pick->dir_name()).string()) : json(nullptr)},
      {"marks", std::move(mk)}};
  out.update(append_columns(read_series(exp_dir / t.name), blob));
  return out;
}

// The best trial: the best value of the metric over every trial not in ERROR.
json best_of(const json& trials, const std::optional<std::string>& metric, bool maximize) {
  if (!metric) return nullptr;
  json best = nullptr;
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    if (t["status"] == "ERROR" || !t["best"].is_number()) continue;
    double v = t["best"].get<double>();
    if (best.is_null() ||
        (maximize ? v > best["value"].get<double>() : v < best["value"].get<double>()))
      best = {{"trial", i}, {"value", v}, {"checkpoint", t["ckpt_path"]}};
  }
  return best;
}

}  // namespace

json flatten_config(const json& config) {
  json out = json::object();
  if (!config.is_object()) return out;
  flatten_into(config, "", out, 0);
  return out;
}

const trial::Checkpoint* best_checkpoint(const trial::Trial& t,
                                         const std::optional<std::string>& metric, bool maximize) {
  const trial::Checkpoint* pick = t.latest_checkpoint();
  std::optional<double> pick_score;
  for (const auto& c : t.checkpoints) {
    auto it = metric ? c.metrics.find(*metric) : c.metrics.end();
    if (it == c.metrics.end()) continue;
    auto v = finite(*it);
    if (v && (!pick_score || (maximize ? *v > *pick_score : *v < *pick_score))) {
      pick = &c;
      pick_score = v;
    }
  }
  return pick;
}

size_t each_result(const fs::path& trial_dir, const std::function<void(json&&)>& fn) {
  size_t bad = 0;
  if (!util::is_regular_file_at(trial_dir / "result.json")) return 0;  // absent, or a FIFO
  std::ifstream in(trial_dir / "result.json", std::ios::binary);
  std::string line;
  while (in && std::getline(in, line)) {
    if (line.empty()) continue;
    json row = util::parse_json_ext(line, 64);
    if (row.is_discarded() || !row.is_object()) {
      ++bad;
      continue;
    }
    fn(std::move(row));
  }
  return bad;
}

Result<ReportData> gather(const fs::path& exp_dir,
                          const std::function<void(size_t, size_t)>& progress) {
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(exp_dir, ec);
  if (ec) dir = fs::absolute(exp_dir);
  auto st = state::load(dir);
  if (!st) return std::unexpected(st.error());
  bool maximize = st->mode == "max";
  auto decisions = read_decisions(*st, dir);
  const std::vector<Mark> none;
  ReportData data;
  json trials = json::array();
  std::map<std::string, uint64_t> counts;
  std::set<std::string> params, metrics;
  for (const auto& t : st->trials) {
    ++counts[trial::status_name(t.status)];
    auto marks = decisions.find(t.id);
    json tj = trial_json(t, dir, st->metric, maximize,
                         marks == decisions.end() ? none : marks->second, data.series);
    for (const auto& [k, v] : tj["config"].items()) params.insert(k);
    for (const auto& [k, v] : tj["y"].items()) metrics.insert(k);
    trials.push_back(std::move(tj));
    if (progress) progress(trials.size(), st->trials.size());
  }
  json best = best_of(trials, st->metric, maximize);
  data.meta = json{{"name", st->name},
                   {"dir", dir.string()},
                   {"phase", st->phase},
                   {"elapsed_s", st->elapsed_s},
                   {"start_time", st->start_time},
                   {"metric", st->metric ? json(*st->metric) : json(nullptr)},
                   {"mode", st->mode},
                   {"time_attr", "training_iteration"},
                   {"total_trials", st->total_trials},
                   {"counts", counts},
                   {"params", params},
                   {"metrics", metrics},
                   {"best", best},
                   {"trials", std::move(trials)}};
  return data;
}

}  // namespace tune::report
