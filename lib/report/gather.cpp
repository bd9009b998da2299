#include "report/gather.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "state/state.hpp"
#include "util/json_ext.hpp"

namespace tune::report {

using json = nlohmann::json;

bool is_bookkeeping_key(const std::string& key) {
  static const std::set<std::string> kKeys = {
      "training_iteration", "timestamp", "pid", "iterations_since_restore", "done",
      "trial_id",           "hostname",  "date"};
  return kKeys.count(key) > 0;
}

namespace {

// The driver's clocks: in every row, rarely worth a curve, and they would double the page.
bool is_driver_time(const std::string& key) {
  return key == "time_this_iter_s" || key == "time_total_s";
}

// x as {x0, n} when it is x0, x0+1, ..., x0+n-1 (the usual case: a third of the page saved).
void put_x(json& out, json&& x) {
  bool run = !x.empty() && x[0].is_number_integer();
  for (size_t i = 1; run && i < x.size(); ++i)
    run = x[i].is_number_integer() && x[i].get<int64_t>() == x[0].get<int64_t>() + int64_t(i);
  if (run) {
    out["x0"] = x[0];
    out["n"] = x.size();
  } else {
    out["x"] = std::move(x);
  }
}

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

// Appends one result row to the series (keys unseen so far are padded with nulls).
void add_row(Series& s, const json& row, size_t max_keys) {
  auto it = row.find("training_iteration");
  if (it == row.end() || !it->is_number()) {
    ++s.bad_lines;
    return;
  }
  size_t n = s.x.size();
  s.x.push_back(*it);
  for (const auto& [k, v] : row.items()) {
    if (!v.is_number() || v.is_boolean() || is_bookkeeping_key(k) || is_driver_time(k)) continue;
    if (!s.y.contains(k)) {
      if (s.y.size() >= max_keys) continue;
      s.y[k] = json::array();
      for (size_t i = 0; i < n; ++i) s.y[k].push_back(nullptr);
    }
    auto f = finite(v);
    s.y[k].push_back(f ? json(*f) : json(nullptr));
  }
  for (auto& [k, col] : s.y.items())
    if (col.size() < n + 1) col.push_back(nullptr);
  ++s.rows;
}

json trial_json(const trial::Trial& t, const fs::path& exp_dir,
                const std::optional<std::string>& metric, bool maximize) {
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
  Series s = read_series(exp_dir / t.name);
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
      {"y", std::move(s.y)}};
  put_x(out, std::move(s.x));
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

Series read_series(const fs::path& trial_dir, size_t max_keys) {
  Series s;
  s.bad_lines += each_result(trial_dir, [&](json&& row) { add_row(s, row, max_keys); });
  return s;
}

Result<json> gather(const fs::path& exp_dir, const std::function<void(size_t, size_t)>& progress) {
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(exp_dir, ec);
  if (ec) dir = fs::absolute(exp_dir);
  auto st = state::load(dir);
  if (!st) return std::unexpected(st.error());
  bool maximize = st->mode == "max";
  json trials = json::array();
  std::map<std::string, uint64_t> counts;
  std::set<std::string> params, metrics;
  for (const auto& t : st->trials) {
    ++counts[trial::status_name(t.status)];
    json tj = trial_json(t, dir, st->metric, maximize);
    for (const auto& [k, v] : tj["config"].items()) params.insert(k);
    for (const auto& [k, v] : tj["y"].items()) metrics.insert(k);
    trials.push_back(std::move(tj));
    if (progress) progress(trials.size(), st->trials.size());
  }
  json best = best_of(trials, st->metric, maximize);
  return json{{"name", st->name},
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
}

}  // namespace tune::report
