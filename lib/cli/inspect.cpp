// `tune ls`, `tune checkpoints ls|best`: read-only views of experiment state.
#include <algorithm>
#include <cmath>
#include <iostream>

#include <unistd.h>

#include "checkpoint/retention.hpp"
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "spec/parse.hpp"
#include "ui/layout.hpp"
#include "ui/summary.hpp"
#include "ui/terminal.hpp"
#include "ui/text.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/strings.hpp"

namespace tune::cli {

using json = nlohmann::json;

namespace {

struct Row {
  const trial::Trial* trial;
  const trial::Checkpoint* ckpt;
  std::optional<double> score;
};

// Every retained checkpoint, best first by metric/order (missing scores last, older first).
// Checkpoints of trials in ERROR are left out unless `include_errored`.
std::vector<Row> ranked_checkpoints(const state::ExperimentState& s,
                                    const std::optional<std::string>& trial_id,
                                    const std::optional<std::string>& metric, spec::Order order,
                                    bool include_errored) {
  std::vector<Row> rows;
  for (const auto& t : s.trials) {
    if (trial_id && t.id != *trial_id && t.name != *trial_id) continue;
    if (t.status == trial::Status::kError && !include_errored) continue;
    for (const auto& c : t.checkpoints) {
      std::optional<double> score;
      if (metric) {
        auto it = c.metrics.find(*metric);
        // NaN and ±Infinity (a diverged metric) rank last, with the missing scores.
        if (it != c.metrics.end() && it->is_number() && std::isfinite(it->get<double>()))
          score = it->get<double>();
      }
      rows.push_back({&t, &c, score});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (metric) {
      if (a.score.has_value() != b.score.has_value()) return a.score.has_value();
      if (a.score && *a.score != *b.score)
        return order == spec::Order::kMin ? *a.score < *b.score : *a.score > *b.score;
    } else if (a.ckpt->iteration != b.ckpt->iteration) {
      return a.ckpt->iteration > b.ckpt->iteration;  // no metric: most recent first
    }
    if (a.trial->index != b.trial->index) return a.trial->index < b.trial->index;
    return a.ckpt->seq < b.ckpt->seq;
  });
  return rows;
}

// What checkpoints are ranked by; no metric = recency.
struct Ranking {
  std::optional<std::string> metric;
  spec::Order order = spec::Order::kMin;
};

spec::Order order_of(const std::string& m) {
  return m == "max" ? spec::Order::kMax : spec::Order::kMin;
}

// --metric/--mode, else checkpoint_config's score attribute and order (from the spec the
// experiment runs with), else the experiment's metric/mode, else recency.
Ranking ranking_of(const fs::path& dir, const state::ExperimentState& s,
                   const std::optional<std::string>& metric_flag,
                   const std::optional<std::string>& mode_flag) {
  std::optional<std::string> attr;
  std::string attr_order = "max";  // checkpoint_score_order's default
  if (auto text = util::read_file(dir / ".tune" / "spec.json", 64u << 20)) {
    auto j = util::parse_json_ext(*text);
    if (j.is_object() && j.contains("checkpoint_config") && j["checkpoint_config"].is_object()) {
      const auto& c = j["checkpoint_config"];
      if (c.contains("checkpoint_score_attribute") && c["checkpoint_score_attribute"].is_string())
        attr = c["checkpoint_score_attribute"].get<std::string>();
      if (c.contains("checkpoint_score_order") && c["checkpoint_score_order"].is_string())
        attr_order = c["checkpoint_score_order"].get<std::string>();
    }
  }
  Ranking r;
  if (metric_flag) {
    r.metric = metric_flag;
    std::string implied = attr && *attr == *metric_flag ? attr_order : s.mode;
    r.order = order_of(mode_flag.value_or(implied));
  } else if (attr) {
    r.metric = attr;
    r.order = order_of(mode_flag.value_or(attr_order));
  } else if (s.metric) {
    r.metric = s.metric;
    r.order = order_of(mode_flag.value_or(s.mode));
  }
  return r;
}

void check_trial_exists(const state::ExperimentState& s, const std::optional<std::string>& id) {
  if (!id) return;
  for (const auto& t : s.trials)
    if (t.id == *id || t.name == *id) return;
  throw Fatal("no trial '" + *id + "' in experiment '" + s.name + "'");
}

std::string csv_escape(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

void LsCommand::add_options(CLI::App& app) {
  app.add_option("--storage-path", storage_, "root of experiment dirs (default ~/tune_results)");
  app.add_option("--format", format_, "table | json")->check(CLI::IsMember({"table", "json"}));
}

namespace {
// An experiment's summary: the state's header line, or (a state written by an older tune) the
// whole state.
Result<state::Summary> summary_of(const fs::path& dir) {
  if (auto s = state::read_summary(dir)) return s;
  auto full = state::load(dir);
  if (!full) return std::unexpected(full.error());
  state::Summary out{full->name,       full->phase,     full->total_trials,
                     full->next_index, full->elapsed_s, {}};
  for (const auto& t : full->trials) ++out.counts[t.status];
  return out;
}
}  // namespace

int LsCommand::execute() {
  fs::path root =
      storage_ ? fs::absolute(util::expand_user(*storage_)) : spec::default_storage_path();
  std::vector<std::pair<std::string, state::Summary>> found;
  std::vector<std::string> unreadable;
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    if (fs::exists(it->path() / state::kStateFile)) dirs.push_back(it->path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    auto s = summary_of(d);
    if (s)
      found.emplace_back(d.filename().string(), std::move(*s));
    else
      unreadable.push_back(s.error().message);
  }
  if (format_ == "json") {
    json out = json::array();
    for (const auto& [name, s] : found) {
      json counts = json::object();
      for (const auto& [st, c] : s.counts)
        if (c) counts[trial::status_name(st)] = c;
      out.push_back({{"name", name},
                     {"dir", (root / name).string()},
                     {"phase", s.phase},
                     {"total_trials", s.total_trials},
                     {"counts", counts}});
    }
    std::cout << out.dump(2) << "\n";
  } else {
    if (found.empty()) std::cout << "no experiments under " << root.string() << "\n";
    for (const auto& [name, s] : found)
      std::cout << name << "  (" << s.phase << ", " << s.total_trials << " trials)  "
                << ui::status_counts(s.counts, s.total_trials, s.next_index) << "\n";
  }
  for (const auto& u : unreadable) std::cerr << "tune: warning: " << u << "\n";
  return kExitOk;
}

void CheckpointsLsCommand::add_options(CLI::App& app) {
  add_experiment_options(app, experiment_, storage_);
  app.add_option("--trial", trial_, "only this trial (id or name)");
  app.add_option("--metric", metric_,
                 "rank by this metric (default: checkpoint_config's score attribute, else the "
                 "experiment's metric)");
  app.add_option("--mode", mode_, "min | max")->check(CLI::IsMember({"min", "max"}));
  app.add_option("--top", top_, "only the K best")->check(CLI::PositiveNumber);
  app.add_flag("--include-errored", include_errored_, "also rank checkpoints of trials in ERROR");
  app.add_option("--format", format_, "table | json | csv")
      ->check(CLI::IsMember({"table", "json", "csv"}));
}

int CheckpointsLsCommand::execute() {
  fs::path dir = resolve_experiment(experiment_, storage_);
  auto s = load_state_or_throw(dir);
  check_trial_exists(s, trial_);
  auto rank = ranking_of(dir, s, metric_, mode_);
  const auto& metric = rank.metric;
  auto rows = ranked_checkpoints(s, trial_, metric, rank.order, include_errored_);
  if (top_ && rows.size() > *top_) rows.resize(*top_);
  auto path_of = [&](const Row& r) { return (dir / r.trial->name / r.ckpt->dir_name()).string(); };
  // On the head: a checkpoint of a trial on an SSH host is here once it was synced.
  auto on_head = [&](const Row& r) {
    std::error_code ec;
    return fs::is_directory(path_of(r), ec);
  };
  if (format_ == "json") {
    json out = json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      out.push_back({{"rank", i + 1},
                     {"trial_id", r.trial->id},
                     {"trial_name", r.trial->name},
                     {"checkpoint", r.ckpt->dir_name()},
                     {"path", path_of(r)},
                     {"on_head", on_head(r)},
                     {"host", r.trial->host},
                     {"iteration", r.ckpt->iteration},
                     {"metric", metric ? json(*metric) : json(nullptr)},
                     {"score", r.score ? json(*r.score) : json(nullptr)},
                     {"metrics", r.ckpt->metrics},
                     {"config", r.trial->config}});
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (format_ == "csv") {
    std::cout << "rank,trial_id,trial_name,checkpoint,iteration,metric,score,path,on_head,config\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::cout << i + 1 << "," << r.trial->id << "," << csv_escape(r.trial->name) << ","
                << r.ckpt->dir_name() << "," << r.ckpt->iteration << ","
                << csv_escape(metric.value_or("")) << ","
                << (r.score ? util::format_double(*r.score) : "") << "," << csv_escape(path_of(r))
                << "," << (on_head(r) ? "true" : "false") << ","
                << csv_escape(r.trial->config.dump()) << "\n";
    }
    return kExitOk;
  }
  if (rows.empty()) {
    std::cout << "no checkpoints in " << dir.string() << "\n";
    return kExitOk;
  }
  std::cout << "checkpoints of '" << s.name << "', best first"
            << (metric ? " by " + *metric + " (" +
                             (rank.order == spec::Order::kMin ? "min" : "max") + ")"
                       : " (most recent first)")
            << ":\n";
  std::vector<ui::Column> cols(8);
  cols[0] = ui::column("rank", 0, 0, true);
  cols[1] = ui::column("trial", 12, 0, false, 24);
  cols[2] = ui::column("checkpoint", 10, 2);
  cols[3] = ui::column("iter", 0, 0, true);
  cols[4] = ui::column("score", 0, 0, true);
  cols[5] = ui::column("head", 0, 3);
  cols[6] = ui::column("path", 16, 1, false, 40);
  cols[7] = ui::column("config", 12, 4, false, 24);
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    cols[0].cells.push_back(std::to_string(i + 1));
    cols[1].cells.push_back(r.trial->name);
    cols[2].cells.push_back(r.ckpt->dir_name());
    cols[3].cells.push_back(std::to_string(r.ckpt->iteration));
    cols[4].cells.push_back(r.score ? util::format_short(*r.score, 5) : "-");
    cols[5].cells.push_back(on_head(r) ? "yes" : "no");
    cols[6].cells.push_back(path_of(r));
    cols[7].cells.push_back(
        r.trial->config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  std::cout << ui::layout_table(std::move(cols), ui::output_width(STDOUT_FILENO));
  std::cout << "best: " << path_of(rows.front())
            << (on_head(rows.front()) ? ""
                                      : "  (not on the head: on " + rows.front().trial->host + ")")
            << "\n";
  return kExitOk;
}

void CheckpointsBestCommand::add_options(CLI::App& app) {
  add_experiment_options(app, experiment_, storage_);
  app.add_option("--metric", metric_,
                 "rank by this metric (default: checkpoint_config's score attribute, else the "
                 "experiment's metric)");
  app.add_option("--mode", mode_, "min | max")->check(CLI::IsMember({"min", "max"}));
  app.add_flag("--include-errored", include_errored_, "also rank checkpoints of trials in ERROR");
}

int CheckpointsBestCommand::execute() {
  fs::path dir = resolve_experiment(experiment_, storage_);
  auto s = load_state_or_throw(dir);
  auto rank = ranking_of(dir, s, metric_, mode_);
  const auto& metric = rank.metric;
  auto rows = ranked_checkpoints(s, std::nullopt, metric, rank.order, include_errored_);
  if (rows.empty()) {
    bool errored_have = std::ranges::any_of(s.trials, [](const trial::Trial& t) {
      return t.status == trial::Status::kError && !t.checkpoints.empty();
    });
    throw Fatal("experiment '" + s.name + "' has no checkpoints" +
                    (errored_have && !include_errored_
                         ? " outside trials in ERROR (pass --include-errored to rank those)"
                         : ""),
                kExitTrialError);
  }
  if (metric && !rows.front().score)
    throw Fatal("no checkpoint of '" + s.name + "' has a score for '" + *metric + "'",
                kExitTrialError);
  // Never a path that does not exist: a checkpoint saved on an SSH host may not be pulled yet.
  const auto& best = rows.front();
  fs::path path = dir / best.trial->name / best.ckpt->dir_name();
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    bool remote = !best.trial->host.empty() && best.trial->host != util::host_name();
    throw Fatal("the best checkpoint, " + best.trial->name + "/" + best.ckpt->dir_name() +
                    (remote ? ", is on host " + best.trial->host +
                                  " and not on the head yet (a resume of the experiment pulls it)"
                            : ", is missing from the head (" + path.string() + ")"),
                kExitTrialError);
  }
  std::cout << path.string() << "\n";
  return kExitOk;
}

}  // namespace tune::cli
