#include "spec/parse.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "sched/budgets.hpp"
#include "search/space_json.hpp"
#include "spec/ray_compat.hpp"
#include "spec/yaml_guard.hpp"
#include "spec/yaml_json.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::spec {

namespace {

using search::Domain;
using Kind = search::Domain::Kind;

struct ParseError {
  std::string message;
};

constexpr std::string_view kTopKeys[] = {"name",
                                         "storage_path",
                                         "trial",
                                         "param_space",
                                         "num_samples",
                                         "seed",
                                         "metric",
                                         "mode",
                                         "stop",
                                         "time_budget_s",
                                         "max_concurrent_trials",
                                         "checkpoint_config",
                                         "failure_config",
                                         "sync_config",
                                         "hosts",
                                         "orphan_timeout_s",
                                         "host_timeout_s",
                                         "scheduler",
                                         "search_alg",
                                         "report_period_s",
                                         "tensorboard",
                                         "progress_reporter",
                                         "callbacks"};
constexpr std::string_view kCallbackKeys[] = {"on", "command"};
constexpr std::string_view kCallbackEvents[] = {"trial_start", "trial_result", "trial_complete",
                                                "trial_error", "checkpoint",   "experiment_end"};
constexpr std::string_view kReporterKeys[] = {"metric_columns", "parameter_columns", "max_rows",
                                              "sort_by_metric", "max_report_frequency"};
// The variables tune sets in every trial's environment (trial.env may not set them).
constexpr std::string_view kSetPerTrial[] = {
    "TUNE_TRIAL_ID",           "TUNE_TRIAL_NAME", "TUNE_TRIAL_DIR",
    "TUNE_EXPERIMENT_NAME",    "TUNE_CONFIG",     "TUNE_CONFIG_FILE",
    "TUNE_CHECKPOINT_STAGING", "TUNE_TRIAL_MODE", "TUNE_RESTORE_CHECKPOINT",
    "CUDA_VISIBLE_DEVICES"};

constexpr std::string_view kTrialKeys[] = {"command",   "mode",         "workdir",     "env",
                                           "resources", "sync_workdir", "restore_from"};
constexpr std::string_view kResourceKeys[] = {"cpu", "gpu"};
constexpr std::string_view kCheckpointKeys[] = {"num_to_keep", "checkpoint_score_attribute",
                                                "checkpoint_score_order", "checkpoint_frequency",
                                                "checkpoint_at_end"};
constexpr std::string_view kFailureKeys[] = {"max_failures", "fail_fast"};
constexpr std::string_view kSyncKeys[] = {"syncer",     "sync_period",   "sync_on_checkpoint",
                                          "upload_dir", "upload_syncer", "sync_timeout"};
constexpr std::string_view kLocalHostKeys[] = {"cpus", "gpus"};
constexpr std::string_view kSshHostKeys[] = {"host",         "user", "port", "identity_file",
                                             "storage_path", "cpus", "gpus", "known_hosts_file"};
constexpr std::string_view kSlurmHostKeys[] = {
    "partition", "account",  "time_limit",  "cpus",           "gpus",
    "mem",       "max_jobs", "sbatch_args", "signal_grace_s", "use_allocation"};
constexpr std::string_view kSchedulerKeys[] = {"type",
                                               "metric",
                                               "mode",
                                               "time_attr",
                                               "max_t",
                                               "grace_period",
                                               "reduction_factor",
                                               "brackets",
                                               "min_samples_required",
                                               "perturbation_interval",
                                               "quantile_fraction",
                                               "resample_probability",
                                               "hyperparam_mutations",
                                               "perturbation_factors",
                                               "burn_in_period"};
constexpr std::string_view kSearchKeys[] = {"type",
                                            "n_startup_trials",
                                            "n_ei_candidates",
                                            "gamma",
                                            "gamma_cap",
                                            "prior_weight",
                                            "consider_magic_clip",
                                            "consider_endpoints",
                                            "constant_liar",
                                            "bandwidth_weighted",
                                            "command",
                                            "timeout_s",
                                            "points_to_evaluate",
                                            "max_concurrent",
                                            "restore_from",
                                            "top_n_percent",
                                            "random_fraction",
                                            "min_points_in_model",
                                            "num_samples",
                                            "bandwidth_factor",
                                            "min_bandwidth"};
constexpr std::string_view kDomainKeys[] = {
    "uniform",    "loguniform", "quniform",    "qloguniform", "randint", "randn",
    "lograndint", "qrandint",   "qlograndint", "qrandn",      "choice",  "grid_search"};

// Reads one YAML document with located, suggestive errors.
class Parser {
 public:
  Parser(fs::path file, std::vector<std::pair<YAML::Node, std::string>> set_nodes)
      : file_(std::move(file)), set_nodes_(std::move(set_nodes)) {}

  Experiment parse(const YAML::Node& root, const Overrides& ov);
  // "FILE:LINE:COL" of a node, or the --set label of a command-line value.
  std::string where(const YAML::Node& n) const;

 private:
  [[noreturn]] void error(const YAML::Node& n, const std::string& msg) const {
    throw ParseError{where(n) + ": " + msg};
  }
  static bool contains(const YAML::Node& outer, const YAML::Node& n);
  // yaml-cpp keeps the first of two equal keys silently; a repeated key is an error here.
  void check_duplicates(const YAML::Node& n) const;

  void check_map(const YAML::Node& n, std::string_view what) const {
    if (!n.IsMap()) error(n, std::string(what) + " must be a mapping");
  }
  void check_keys(const YAML::Node& n, std::span<const std::string_view> allowed,
                  std::string_view section) const;
  double number(const YAML::Node& n, std::string_view what) const;
  int64_t integer(const YAML::Node& n, std::string_view what) const;
  bool boolean(const YAML::Node& n, std::string_view what) const;
  std::string string(const YAML::Node& n, std::string_view what) const;
  Order order(const YAML::Node& n, std::string_view what) const;

  void parse_trial(const YAML::Node& n, Experiment& e) const;
  void parse_space(const YAML::Node& n, std::vector<std::string>& path, search::Space& space,
                   nlohmann::json& base) const;
  Domain parse_domain(const std::string& kind, const YAML::Node& args) const;
  // Bounds, signs and q of a numeric domain whose arguments were read.
  void check_domain(const std::string& kind, const YAML::Node& args, const Domain& d) const;
  void parse_checkpoint(const YAML::Node& n, Experiment& e) const;
  void parse_sync(const YAML::Node& n, Experiment& e) const;
  void parse_hosts(const YAML::Node& n, Experiment& e) const;
  void parse_slurm_host(const YAML::Node& body, HostSpec& hs) const;
  void check_slurm(const YAML::Node& root, const Experiment& e) const;
  void parse_scheduler(const YAML::Node& n, Experiment& e) const;
  // pbt's own keys (after the common ones were read).
  void parse_pbt(const YAML::Node& n, Experiment& e) const;
  void parse_mutations(const YAML::Node& n, std::vector<std::string>& path,
                       std::vector<search::Param>& out) const;
  void parse_search(const YAML::Node& n, Experiment& e) const;
  void parse_tpe(const YAML::Node& n, Experiment& e) const;
  void parse_bohb(const YAML::Node& n, Experiment& e) const;
  // Keys every searcher takes: points_to_evaluate, max_concurrent.
  [[nodiscard]] static bool is_common_search_key(const std::string& k);
  void parse_search_common(const YAML::Node& n, Experiment& e) const;
  void parse_external(const YAML::Node& n, Experiment& e) const;
  void parse_reporter(const YAML::Node& n, Experiment& e) const;
  void parse_callbacks(const YAML::Node& n, Experiment& e) const;
  CallbackSpec parse_callback(const YAML::Node& n, size_t i) const;
  std::vector<ColumnSpec> parse_columns(const YAML::Node& n, std::string_view what) const;
  void check_placeholders(const YAML::Node& cmd_node, const Experiment& e) const;

  fs::path file_;
  std::vector<std::pair<YAML::Node, std::string>> set_nodes_;
};

bool Parser::contains(const YAML::Node& outer, const YAML::Node& n) {
  if (outer.is(n)) return true;
  if (outer.IsMap()) {
    for (const auto& kv : outer)
      if (kv.first.is(n) || contains(kv.second, n)) return true;
  } else if (outer.IsSequence()) {
    for (const auto& item : outer)
      if (contains(item, n)) return true;
  }
  return false;
}

void Parser::check_duplicates(const YAML::Node& n) const {
  std::map<std::string, YAML::Mark> seen;
  for (const auto& kv : n) {
    std::string key = kv.first.Scalar();
    auto [it, fresh] = seen.emplace(key, kv.first.Mark());
    if (!fresh)
      error(kv.first, "duplicate key '" + util::printable(key, 60) + "' (first at line " +
                          std::to_string(it->second.line + 1) + ")");
  }
}

std::string Parser::where(const YAML::Node& n) const {
  for (const auto& [node, label] : set_nodes_)
    if (contains(node, n)) return label;
  auto m = n.Mark();
  if (m.is_null()) return file_.string();
  return file_.string() + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

void Parser::check_keys(const YAML::Node& n, std::span<const std::string_view> allowed,
                        std::string_view section) const {
  check_duplicates(n);
  for (const auto& kv : n) {
    std::string key = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string msg =
        "unknown key '" + key + "'" + (section.empty() ? "" : " in " + std::string(section));
    if (auto s = util::suggest(key, allowed)) msg += " (did you mean '" + *s + "'?)";
    error(kv.first, msg);
  }
}

double Parser::number(const YAML::Node& n, std::string_view what) const {
  auto j = n.IsScalar() ? yaml_to_json(n) : nlohmann::json();
  if (!j.is_number())
    error(n, std::string(what) + ": expected a number, got " +
                 (n.IsScalar() ? "'" + util::printable(n.Scalar(), 40) + "'" : "a collection"));
  double d = j.get<double>();
  if (std::isnan(d)) error(n, std::string(what) + ": expected a number, got NaN");
  return d;
}

int64_t Parser::integer(const YAML::Node& n, std::string_view what) const {
  auto j = n.IsScalar() ? yaml_to_json(n) : nlohmann::json();
  if (!j.is_number_integer())
    error(n, std::string(what) + ": expected an integer, got " +
                 (n.IsScalar() ? "'" + util::printable(n.Scalar(), 40) + "'" : "a collection"));
  return j.get<int64_t>();
}

bool Parser::boolean(const YAML::Node& n, std::string_view what) const {
  auto j = n.IsScalar() ? yaml_to_json(n) : nlohmann::json();
  if (!j.is_boolean())
    error(n, std::string(what) + ": expected true or false, got " +
                 (n.IsScalar() ? "'" + util::printable(n.Scalar(), 40) + "'" : "a collection"));
  return j.get<bool>();
}

std::string Parser::string(const YAML::Node& n, std::string_view what) const {
  if (!n.IsScalar()) error(n, std::string(what) + ": expected a string");
  return n.Scalar();
}

Order Parser::order(const YAML::Node& n, std::string_view what) const {
  std::string s = string(n, what);
  if (s == "min") return Order::kMin;
  if (s == "max") return Order::kMax;
  error(n, std::string(what) + ": expected 'min' or 'max', got '" + util::printable(s, 40) + "'");
}

Experiment Parser::parse(const YAML::Node& root, const Overrides& ov) {
  if (!root.IsMap())
    error(root, "an experiment file must be a mapping of keys (see docs/EXPERIMENT.md)");
  check_keys(root, kTopKeys, "");
  Experiment e;
  e.source_file = fs::absolute(file_);
  fs::path yaml_dir = e.source_file.parent_path();

  e.name = ov.name ? *ov.name : root["name"] ? string(root["name"], "name") : file_.stem().string();
  if (e.name.empty() || e.name != util::safe_component(e.name) || e.name[0] == '.') {
    std::string msg = "name '" + util::printable(e.name, 60) +
                      "' must be a non-empty file name of letters, digits and ._=,+- "
                      "(not starting with '.')";
    if (root["name"] && !ov.name) error(root["name"], msg);
    throw ParseError{"--name: " + msg};
  }

  // storage_path: s3://... or gs://...: staged under the default storage path and mirrored
  // there, as sync_config.upload_dir does (Ray Tune's cloud storage_path).
  std::optional<std::string> cloud;
  auto is_cloud = [](const std::string& v) {
    return v.starts_with("s3://") || v.starts_with("gs://");
  };
  if (ov.storage_path && is_cloud(*ov.storage_path)) {
    cloud = *ov.storage_path;
    e.storage_path = default_storage_path();
  } else if (ov.storage_path) {
    e.storage_path = fs::absolute(util::expand_user(*ov.storage_path));
  } else if (auto sp = root["storage_path"]) {
    std::string text = string(sp, "storage_path");
    if (is_cloud(text)) {
      cloud = text;
      e.storage_path = default_storage_path();
    } else {
      fs::path p = util::expand_user(text);
      e.storage_path = p.is_absolute() ? p : yaml_dir / p;
    }
  } else {
    e.storage_path = default_storage_path();
  }
  e.storage_path = e.storage_path.lexically_normal();

  if (!root["trial"]) error(root, "missing required key 'trial' (with at least 'command')");
  parse_trial(root["trial"], e);

  auto ps = root["param_space"];
  if (!ps) error(root, "missing required key 'param_space'");
  if (ps.IsNull() || (ps.IsMap() && ps.size() == 0))
    error(ps, "param_space is empty: give at least one parameter (a constant is fine)");
  check_map(ps, "param_space");
  std::vector<std::string> path;
  parse_space(ps, path, e.space, e.space.base);

  if (auto n = root["num_samples"]) {
    auto v = integer(n, "num_samples");
    if (v < 1) error(n, "num_samples must be at least 1, got " + std::to_string(v));
    e.num_samples = static_cast<uint64_t>(v);
  }
  auto total = search::checked_trial_count(e.space, e.num_samples);
  if (!total || *total > 10'000'000) {
    std::string n = total ? std::to_string(*total) : "more than 2^64";
    error(root["num_samples"] ? root["num_samples"] : ps,
          "num_samples x grid sizes yields " + n + " trials; the limit is 10,000,000");
  }
  if (auto n = root["seed"]) {
    auto v = integer(n, "seed");
    if (v < 0) error(n, "seed must be >= 0");
    e.seed = static_cast<uint64_t>(v);
  }
  if (auto n = root["metric"]) e.metric = string(n, "metric");
  if (auto n = root["mode"]) e.mode = order(n, "mode"), e.mode_given = true;
  if (e.metric && !e.mode_given)
    error(root["metric"], "metric '" + util::printable(*e.metric, 60) +
                              "' needs a mode: add 'mode: max' (higher is better) or 'mode: min'");
  if (auto n = root["stop"]) {
    if (!n.IsNull()) {
      check_map(n, "stop");
      check_duplicates(n);
      for (const auto& kv : n)
        e.stop[kv.first.Scalar()] = number(kv.second, "stop." + kv.first.Scalar());
    }
  }
  if (auto n = root["time_budget_s"]) {
    if (!n.IsNull()) {
      e.time_budget_s = number(n, "time_budget_s");
      if (*e.time_budget_s <= 0) error(n, "time_budget_s must be positive");
    }
  }
  if (auto n = root["max_concurrent_trials"]) {
    if (!n.IsNull()) {
      auto v = integer(n, "max_concurrent_trials");
      if (v < 1) error(n, "max_concurrent_trials must be at least 1");
      e.max_concurrent_trials = static_cast<int>(std::min<int64_t>(v, 1'000'000));
    }
  }
  if (ov.max_concurrent) {
    if (*ov.max_concurrent < 1) throw ParseError{"--max-concurrent: must be at least 1"};
    e.max_concurrent_trials = ov.max_concurrent;
  }
  if (auto n = root["checkpoint_config"]) parse_checkpoint(n, e);
  if (auto n = root["failure_config"]) {
    check_map(n, "failure_config");
    check_keys(n, kFailureKeys, "failure_config");
    if (auto m = n["max_failures"]) {
      auto v = integer(m, "failure_config.max_failures");
      if (v < -1) error(m, "failure_config.max_failures must be -1 (retry forever) or >= 0");
      e.failure.max_failures = static_cast<int>(std::min<int64_t>(v, 1'000'000'000));
    }
    if (auto m = n["fail_fast"]) e.failure.fail_fast = boolean(m, "failure_config.fail_fast");
  }
  if (auto n = root["sync_config"]) parse_sync(n, e);
  if (cloud) {
    const YAML::Node at = ov.storage_path ? YAML::Node() : root["storage_path"];
    auto fail_at = [&](const std::string& msg) {
      if (ov.storage_path) throw ParseError{"--storage-path: " + msg};
      error(at, msg);
    };
    if (e.sync.upload_dir)
      fail_at("storage_path '" + util::printable(*cloud, 80) +
              "' is mirrored like sync_config.upload_dir: give one of the two");
    if (cloud->size() <= 5 || (*cloud)[5] == '/')
      fail_at("storage_path '" + util::printable(*cloud, 80) + "' names no bucket");
    for (char c : *cloud)
      if (static_cast<unsigned char>(c) < 0x20)
        fail_at("storage_path contains a control character");
    while (cloud->size() > 5 && cloud->back() == '/') cloud->pop_back();
    e.sync.upload_dir = *cloud;
  }
  if (auto n = root["hosts"]) parse_hosts(n, e);
  if (e.hosts.empty()) e.hosts.push_back(HostSpec{});
  bool ssh = std::any_of(e.hosts.begin(), e.hosts.end(),
                         [](const HostSpec& h) { return h.kind == HostSpec::Kind::kSsh; });
  e.trial.sync_workdir = ssh && e.sync.syncer == "rsync";
  if (auto m = root["trial"]["sync_workdir"]) {
    bool on = boolean(m, "trial.sync_workdir");
    if (on && ssh && e.sync.syncer != "rsync")
      error(m, "trial.sync_workdir copies with rsync: it needs sync_config.syncer: rsync (not '" +
                   util::printable(e.sync.syncer, 40) + "')");
    e.trial.sync_workdir = on && ssh;
  }
  for (auto key : {"orphan_timeout_s", "host_timeout_s"}) {
    if (auto n = root[key]) {
      double v = number(n, key);
      if (v <= 0) error(n, std::string(key) + " must be positive");
      (std::string_view(key) == "orphan_timeout_s" ? e.orphan_timeout_s : e.host_timeout_s) = v;
    }
  }
  if (auto n = root["report_period_s"]) {
    e.report_period_s = number(n, "report_period_s");
    if (!(e.report_period_s >= 0)) error(n, "report_period_s must be 0 (off) or positive");
  }
  if (auto n = root["tensorboard"]) e.tensorboard = boolean(n, "tensorboard");
  if (auto n = root["progress_reporter"]) parse_reporter(n, e);
  if (auto n = root["callbacks"]) parse_callbacks(n, e);
  if (auto n = root["scheduler"]) parse_scheduler(n, e);
  if (auto n = root["search_alg"]) parse_search(n, e);
  check_placeholders(root["trial"]["command"], e);
  check_slurm(root, e);
  return e;
}

void Parser::check_slurm(const YAML::Node& root, const Experiment& e) const {
  auto it = std::find_if(e.hosts.begin(), e.hosts.end(),
                         [](const HostSpec& h) { return h.kind == HostSpec::Kind::kSlurm; });
  if (it == e.hosts.end()) return;
  YAML::Node at = root["hosts"];
  if (std::any_of(e.hosts.begin(), e.hosts.end(),
                  [](const HostSpec& h) { return h.kind == HostSpec::Kind::kSsh; }))
    error(at, "hosts: a 'slurm' host cannot be listed with 'ssh' hosts");
  // Commands reach a step-mode trial through a FIFO that only its own node can open.
  if (e.trial.mode == TrialMode::kStep)
    error(root["trial"]["mode"] ? root["trial"]["mode"] : at,
          "trial.mode: step is not supported on a 'slurm' host (use function mode)");
  if (e.sync.syncer != "rsync" && e.sync.syncer != "none")
    error(root["sync_config"]["syncer"] ? root["sync_config"]["syncer"] : at,
          "a 'slurm' host reads trials on the shared filesystem: sync_config.syncer must be "
          "none (or left out)");
}

void Parser::parse_trial(const YAML::Node& n, Experiment& e) const {
  check_map(n, "trial");
  check_keys(n, kTrialKeys, "trial");
  auto cmd = n["command"];
  if (!cmd) error(n, "missing required key 'command' in trial");
  if (cmd.IsSequence()) {
    for (const auto& w : cmd) {
      if (!w.IsScalar()) error(w, "trial.command: each argument must be a scalar");
      e.trial.command.push_back(w.Scalar());
    }
  } else if (cmd.IsScalar()) {
    auto words = util::shell_split(cmd.Scalar());
    if (!words) error(cmd, "trial.command: " + words.error().message);
    e.trial.command = std::move(*words);
  } else {
    error(cmd, "trial.command must be a list of arguments or a string");
  }
  if (e.trial.command.empty() || e.trial.command[0].empty())
    error(cmd, "trial.command is empty: name the program to run");
  if (auto m = n["mode"]) {
    std::string s = string(m, "trial.mode");
    if (s == "function")
      e.trial.mode = TrialMode::kFunction;
    else if (s == "step")
      e.trial.mode = TrialMode::kStep;
    else
      error(m, "trial.mode must be 'function' or 'step', got '" + util::printable(s, 40) + "'");
  }
  fs::path yaml_dir = e.source_file.parent_path();
  e.trial.workdir = yaml_dir;
  if (auto m = n["workdir"]) {
    fs::path w = util::expand_user(string(m, "trial.workdir"));
    e.trial.workdir = (w.is_absolute() ? w : yaml_dir / w).lexically_normal();
    std::error_code ec;
    if (!fs::is_directory(e.trial.workdir, ec))
      error(m, "trial.workdir '" + e.trial.workdir.string() + "' is not a directory");
  }
  if (auto m = n["env"]) {
    if (!m.IsNull()) {
      check_map(m, "trial.env");
      check_duplicates(m);
      for (const auto& kv : m) {
        std::string k = kv.first.Scalar();
        if (k.empty() || k.find('=') != std::string::npos)
          error(kv.first, "trial.env: invalid variable name '" + util::printable(k, 40) + "'");
        if (std::find(std::begin(kSetPerTrial), std::end(kSetPerTrial), k) !=
            std::end(kSetPerTrial))
          error(kv.first, "trial.env." + k + ": tune sets it for each trial" +
                              (k == "CUDA_VISIBLE_DEVICES"
                                   ? " from the GPUs it gives the trial (trial.resources.gpu)"
                                   : "") +
                              ": remove it here");
        if (!kv.second.IsScalar() && !kv.second.IsNull())
          error(kv.second, "trial.env." + k + ": expected a string");
        else if (!kv.second.IsNull() &&
                 kv.second.Scalar().size() >= util::kMaxEnvString - k.size() - 1)
          error(kv.second, "trial.env." + k + ": " + std::to_string(kv.second.Scalar().size()) +
                               " bytes; Linux passes at most " +
                               std::to_string(util::kMaxEnvString - 2) + " in one variable");
        e.trial.env[k] = kv.second.IsNull() ? "" : kv.second.Scalar();
      }
    }
  }
  if (auto m = n["restore_from"]; m && !m.IsNull()) {
    fs::path r = util::expand_user(string(m, "trial.restore_from"));
    e.trial.restore_from = (r.is_absolute() ? r : yaml_dir / r).lexically_normal();
    std::error_code ec;
    if (!fs::is_directory(*e.trial.restore_from, ec))
      error(m, "trial.restore_from '" + e.trial.restore_from->string() +
                   "' is not a directory (a checkpoint to start every trial from)");
  }
  if (auto m = n["resources"]) {
    check_map(m, "trial.resources");
    check_keys(m, kResourceKeys, "trial.resources");
    if (auto c = m["cpu"]) {
      e.trial.resources.cpu = number(c, "trial.resources.cpu");
      if (e.trial.resources.cpu < 0) error(c, "trial.resources.cpu must be >= 0");
    }
    if (auto g = m["gpu"]) {
      double v = number(g, "trial.resources.gpu");
      if (v < 0) error(g, "trial.resources.gpu must be >= 0");
      if (v > 1 && v != std::floor(v))
        error(
            g,
            "trial.resources.gpu: a fraction is only allowed below 1 (GPUs are shared, not split)");
      e.trial.resources.gpu = v;
    }
  }
}

Domain Parser::parse_domain(const std::string& kind, const YAML::Node& args) const {
  Domain d;
  if (kind == "choice" || kind == "grid_search") {
    d.kind = kind == "choice" ? Kind::kChoice : Kind::kGrid;
    if (!args.IsSequence() || args.size() == 0)
      error(args, kind + " needs a non-empty list of values");
    d.values = yaml_to_json(args);
    return d;
  }
  static const std::map<std::string, std::pair<Kind, size_t>> kArity = {
      {"uniform", {Kind::kUniform, 2}},         {"loguniform", {Kind::kLogUniform, 2}},
      {"quniform", {Kind::kQUniform, 3}},       {"qloguniform", {Kind::kQLogUniform, 3}},
      {"randint", {Kind::kRandInt, 2}},         {"randn", {Kind::kRandN, 2}},
      {"lograndint", {Kind::kLogRandInt, 2}},   {"qrandint", {Kind::kQRandInt, 3}},
      {"qlograndint", {Kind::kQLogRandInt, 3}}, {"qrandn", {Kind::kQRandN, 3}}};
  auto [k, arity] = kArity.at(kind);
  d.kind = k;
  static const std::map<std::string, std::string> kForm = {
      {"uniform", "[lo, hi]"},
      {"loguniform", "[lo, hi]"},
      {"quniform", "[lo, hi, q]"},
      {"qloguniform", "[lo, hi, q]"},
      {"randint", "[lo, hi)"},
      {"randn", "[mean, sd]"},
      {"lograndint", "[lo, hi)"},
      {"qrandint", "[lo, hi, q] (hi included)"},
      {"qlograndint", "[lo, hi, q] (hi included)"},
      {"qrandn", "[mean, sd, q]"}};
  if (!args.IsSequence() || args.size() != arity) error(args, kind + " takes " + kForm.at(kind));
  bool ints = k == Kind::kRandInt || k == Kind::kLogRandInt || k == Kind::kQRandInt ||
              k == Kind::kQLogRandInt;
  for (size_t i = 0; i < arity; ++i) {
    double v = ints ? static_cast<double>(integer(args[i], kind)) : number(args[i], kind);
    if (std::isinf(v)) error(args[i], kind + ": bounds must be finite");
    if (ints && std::fabs(v) > 0x1p52) error(args[i], kind + ": bounds must be within +-2^52");
    d.args.push_back(v);
  }
  check_domain(kind, args, d);
  return d;
}

void Parser::check_domain(const std::string& kind, const YAML::Node& args, const Domain& d) const {
  const auto& a = d.args;
  const Kind k = d.kind;
  if (k == Kind::kRandN || k == Kind::kQRandN) {
    if (a[1] < 0) error(args[1], kind + ": sd must be >= 0");
    if (k == Kind::kQRandN && a[2] <= 0) error(args[2], kind + ": q must be > 0");
    return;
  }
  if (k == Kind::kRandInt || k == Kind::kLogRandInt) {
    if (a[0] >= a[1])
      error(args, kind + " [lo, hi): lo must be < hi (hi is excluded), got lo=" +
                      util::format_double(a[0]) + " hi=" + util::format_double(a[1]));
  } else if (a[0] > a[1]) {
    error(args, kind + ": lo > hi (" + util::format_double(a[0]) + " > " +
                    util::format_double(a[1]) + ")");
  }
  bool log = k == Kind::kLogUniform || k == Kind::kQLogUniform || k == Kind::kLogRandInt ||
             k == Kind::kQLogRandInt;
  if (log && a[0] <= 0)
    error(args[0], kind + ": lo must be > 0 for a log scale, got " + util::format_double(a[0]));
  if ((k == Kind::kQUniform || k == Kind::kQLogUniform || k == Kind::kQRandInt ||
       k == Kind::kQLogRandInt) &&
      a[2] <= 0)
    error(args[2], kind + ": q must be > 0");
  if ((k == Kind::kQRandInt || k == Kind::kQLogRandInt) && std::ceil(a[0] / a[2]) * a[2] > a[1])
    error(args, kind + ": no multiple of q=" + util::format_double(a[2]) + " lies in [" +
                    util::format_double(a[0]) + ", " + util::format_double(a[1]) + "]");
}

void Parser::parse_space(const YAML::Node& n, std::vector<std::string>& path, search::Space& space,
                         nlohmann::json& base) const {
  check_duplicates(n);
  for (const auto& kv : n) {
    std::string key = kv.first.Scalar();
    if (key.empty() || key.find('.') != std::string::npos || key.find('{') != std::string::npos ||
        key.find('}') != std::string::npos)
      error(kv.first, "param_space: key '" + util::printable(key, 40) +
                          "' must be non-empty and contain no '.', '{' or '}'");
    const YAML::Node& v = kv.second;
    path.push_back(key);
    if (v.IsMap() && v.size() == 1) {
      std::string dk = v.begin()->first.Scalar();
      if (dk == "sample_from")
        error(v.begin()->first,
              "sample_from is not supported (a config cannot run Python): for values tied "
              "together, grid over whole mappings ({grid_search: [{a: 1, b: 2}, {a: 2, b: 4}]}); "
              "for derived values, compute them in the trial from its config");
      if (std::find(std::begin(kDomainKeys), std::end(kDomainKeys), dk) != std::end(kDomainKeys)) {
        space.params.push_back({path, parse_domain(dk, v.begin()->second)});
        path.pop_back();
        continue;
      }
      if (auto s = util::suggest(dk, kDomainKeys); s && *s != dk && dk.size() > 3)
        error(v.begin()->first, "unknown search domain '" + dk + "' (did you mean '" + *s +
                                    "'?); to pass a constant mapping, add a second key");
    }
    if (v.IsMap()) {
      base[key] = nlohmann::json::object();
      parse_space(v, path, space, base[key]);
    } else {
      base[key] = yaml_to_json(v);
    }
    path.pop_back();
  }
}

void Parser::parse_reporter(const YAML::Node& n, Experiment& e) const {
  if (n.IsNull()) return;
  check_map(n, "progress_reporter");
  check_keys(n, kReporterKeys, "progress_reporter");
  auto& r = e.progress_reporter;
  if (auto m = n["metric_columns"]; m && !m.IsNull())
    r.metric_columns = parse_columns(m, "progress_reporter.metric_columns");
  if (auto m = n["parameter_columns"]; m && !m.IsNull())
    r.parameter_columns = parse_columns(m, "progress_reporter.parameter_columns");
  if (auto m = n["max_rows"]; m && !m.IsNull()) {
    auto v = integer(m, "progress_reporter.max_rows");
    if (v < 1) error(m, "progress_reporter.max_rows must be >= 1");
    r.max_rows = static_cast<size_t>(std::min<int64_t>(v, 1'000'000));
  }
  if (auto m = n["sort_by_metric"]) {
    r.sort_by_metric = boolean(m, "progress_reporter.sort_by_metric");
    if (r.sort_by_metric && !e.metric)
      error(m, "progress_reporter.sort_by_metric needs a top-level 'metric' to sort by");
  }
  if (auto m = n["max_report_frequency"]; m && !m.IsNull()) {
    double v = number(m, "progress_reporter.max_report_frequency");
    if (!(v >= 0.05 && v <= 86400))
      error(m, "progress_reporter.max_report_frequency must be between 0.05 and 86400 seconds");
    r.max_report_frequency = v;
  }
}

// A list of names, or a mapping of name -> title (Ray's list or dict).
void Parser::parse_callbacks(const YAML::Node& n, Experiment& e) const {
  if (n.IsNull()) return;
  if (!n.IsSequence()) error(n, "callbacks must be a list of {on: [EVENT, ...], command: [...]}");
  for (size_t i = 0; i < n.size(); ++i) e.callbacks.push_back(parse_callback(n[i], i));
}

CallbackSpec Parser::parse_callback(const YAML::Node& n, size_t i) const {
  const std::string what = "callbacks[" + std::to_string(i) + "]";
  check_map(n, what);
  check_keys(n, kCallbackKeys, what);
  CallbackSpec c;
  c.where = where(n);
  auto cmd = n["command"];
  if (!cmd) error(n, "missing required key 'command' in " + what);
  if (cmd.IsSequence()) {
    for (const auto& w : cmd) {
      if (!w.IsScalar()) error(w, what + ".command: each argument must be a scalar");
      c.command.push_back(w.Scalar());
    }
  } else if (cmd.IsScalar()) {
    auto words = util::shell_split(cmd.Scalar());
    if (!words) error(cmd, what + ".command: " + words.error().message);
    c.command = std::move(*words);
  } else {
    error(cmd, what + ".command must be a list of arguments or a string");
  }
  if (c.command.empty() || c.command[0].empty())
    error(cmd, what + ".command is empty: name the program to run");
  auto on = n["on"];
  if (!on) {  // every event
    c.on.assign(std::begin(kAllCallbackEvents), std::end(kAllCallbackEvents));
    return c;
  }
  if (on.IsScalar()) error(on, what + ".on must be a list of events, e.g. [" + on.Scalar() + "]");
  if (!on.IsSequence() || on.size() == 0)
    error(on, what +
                  ".on must be a non-empty list of events (trial_start, trial_result, "
                  "trial_complete, trial_error, checkpoint, experiment_end)");
  for (const auto& ev : on) {
    std::string name = ev.IsScalar() ? ev.Scalar() : "";
    auto it = std::find(std::begin(kCallbackEvents), std::end(kCallbackEvents), name);
    if (it == std::end(kCallbackEvents)) {
      std::string msg =
          "unknown callback event '" + util::printable(name, 40) + "' in " + what + ".on";
      if (auto s = util::suggest(name, kCallbackEvents)) msg += " (did you mean '" + *s + "'?)";
      error(ev, msg);
    }
    auto kind = kAllCallbackEvents[it - std::begin(kCallbackEvents)];
    if (std::find(c.on.begin(), c.on.end(), kind) != c.on.end())
      error(ev, "callback event '" + name + "' is listed twice in " + what + ".on");
    c.on.push_back(kind);
  }
  return c;
}

std::vector<ColumnSpec> Parser::parse_columns(const YAML::Node& n, std::string_view what) const {
  std::vector<ColumnSpec> out;
  auto name = [&](const YAML::Node& k) {
    std::string s = string(k, what);
    if (s.empty()) error(k, std::string(what) + ": a column name must not be empty");
    return s;
  };
  if (n.IsSequence()) {
    for (const auto& item : n) {
      std::string s = name(item);
      out.push_back({s, s});
    }
  } else if (n.IsMap()) {
    check_duplicates(n);
    for (const auto& kv : n) out.push_back({name(kv.first), name(kv.second)});
  } else {
    error(n, std::string(what) + ": expected a list of names or a mapping of name: title");
  }
  return out;
}

void Parser::parse_checkpoint(const YAML::Node& n, Experiment& e) const {
  if (n.IsNull()) return;
  check_map(n, "checkpoint_config");
  check_keys(n, kCheckpointKeys, "checkpoint_config");
  auto& c = e.checkpoint;
  if (auto m = n["num_to_keep"]; m && !m.IsNull()) {
    auto v = integer(m, "checkpoint_config.num_to_keep");
    if (v < 1) error(m, "checkpoint_config.num_to_keep must be >= 1 (or null to keep all)");
    c.num_to_keep = static_cast<int>(std::min<int64_t>(v, 1'000'000'000));
  }
  if (auto m = n["checkpoint_score_attribute"]; m && !m.IsNull())
    c.score_attribute = string(m, "checkpoint_config.checkpoint_score_attribute");
  if (auto m = n["checkpoint_score_order"])
    c.score_order = order(m, "checkpoint_config.checkpoint_score_order");
  if (auto m = n["checkpoint_frequency"]) {
    auto v = integer(m, "checkpoint_config.checkpoint_frequency");
    if (v < 0) error(m, "checkpoint_config.checkpoint_frequency must be >= 0");
    if (v > 0 && e.trial.mode == TrialMode::kFunction)
      error(m,
            "checkpoint_frequency applies to step mode only: in function mode the trial decides "
            "when to checkpoint (report a \"checkpoint\" dir); set trial.mode: step or remove it");
    c.frequency = static_cast<int>(std::min<int64_t>(v, 1'000'000'000));
  }
  if (auto m = n["checkpoint_at_end"]) {
    c.at_end = boolean(m, "checkpoint_config.checkpoint_at_end");
    if (c.at_end && e.trial.mode == TrialMode::kFunction)
      error(m,
            "checkpoint_at_end applies to step mode only: in function mode the trial decides "
            "when to checkpoint; set trial.mode: step or remove it");
  }
}

void Parser::parse_sync(const YAML::Node& n, Experiment& e) const {
  check_map(n, "sync_config");
  check_keys(n, kSyncKeys, "sync_config");
  auto& s = e.sync;
  if (auto m = n["syncer"]) {
    s.syncer = string(m, "sync_config.syncer");
    if (s.syncer != "rsync" && s.syncer != "none" &&
        (s.syncer.find("{source}") == std::string::npos ||
         s.syncer.find("{target}") == std::string::npos))
      error(m,
            "sync_config.syncer must be 'rsync', 'none', or a command containing {source} and "
            "{target}");
    if (s.syncer != "rsync" && s.syncer != "none") {
      auto words = util::shell_split(s.syncer);
      if (!words) error(m, "sync_config.syncer: " + words.error().message);
    }
  }
  if (auto m = n["sync_period"]) {
    s.sync_period = number(m, "sync_config.sync_period");
    if (s.sync_period <= 0) error(m, "sync_config.sync_period must be positive");
  }
  if (auto m = n["sync_on_checkpoint"])
    s.sync_on_checkpoint = boolean(m, "sync_config.sync_on_checkpoint");
  if (auto m = n["upload_dir"]; m && !m.IsNull()) {
    std::string u = string(m, "sync_config.upload_dir");
    bool cloud = u.starts_with("s3://") || u.starts_with("gs://");
    if (!cloud && !u.starts_with("file://"))
      error(m, "sync_config.upload_dir must start with s3://, gs:// or file://");
    if (cloud && (u.size() <= 5 || u[5] == '/'))
      error(m, "sync_config.upload_dir '" + u + "' names no bucket");
    if (u.starts_with("file://") && !u.starts_with("file:///"))
      error(m, "sync_config.upload_dir: a file:// URL needs an absolute path (file:///path)");
    for (char c : u)
      if (static_cast<unsigned char>(c) < 0x20)
        error(m, "sync_config.upload_dir contains a control character");
    s.upload_dir = u;
  }
  if (auto m = n["upload_syncer"]; m && !m.IsNull()) {
    std::string t = string(m, "sync_config.upload_syncer");
    if (t.find("{source}") == std::string::npos || t.find("{target}") == std::string::npos)
      error(m, "sync_config.upload_syncer must be a command containing {source} and {target}");
    auto words = util::shell_split(t);
    if (!words) error(m, "sync_config.upload_syncer: " + words.error().message);
    s.upload_syncer = t;
  }
  if (auto m = n["sync_timeout"]) {
    s.sync_timeout = number(m, "sync_config.sync_timeout");
    if (!(s.sync_timeout > 0)) error(m, "sync_config.sync_timeout must be positive (seconds)");
  }
}

void Parser::parse_scheduler(const YAML::Node& n, Experiment& e) const {
  if (n.IsNull()) return;
  check_map(n, "scheduler");
  check_keys(n, kSchedulerKeys, "scheduler");
  auto& s = e.scheduler;
  if (auto t = n["type"]) {
    std::string type = string(t, "scheduler.type");
    static const std::map<std::string, SchedulerKind> kKinds = {
        {"fifo", SchedulerKind::kFifo},
        {"asha", SchedulerKind::kAsha},
        {"async_hyperband", SchedulerKind::kAsha},
        {"hyperband", SchedulerKind::kHyperBand},
        {"median_stopping", SchedulerKind::kMedianStopping},
        {"median_stopping_rule", SchedulerKind::kMedianStopping},
        {"pbt", SchedulerKind::kPbt},
        {"population_based_training", SchedulerKind::kPbt}};
    auto it = kKinds.find(type);
    if (it == kKinds.end()) {
      constexpr std::string_view kNames[] = {"fifo", "asha", "hyperband", "median_stopping", "pbt"};
      std::string msg = "unknown scheduler '" + util::printable(type, 40) + "'";
      if (auto sug = util::suggest(type, kNames)) msg += " (did you mean '" + *sug + "'?)";
      error(t, msg + " (available: fifo, asha, hyperband, median_stopping, pbt)");
    }
    s.kind = it->second;
  } else {
    error(n,
          "scheduler: missing required key 'type' (fifo, asha, hyperband, median_stopping, pbt)");
  }
  const char* name = scheduler_name(s.kind);
  auto key = [&](const char* k) { return std::string("scheduler.") + k; };
  if (s.kind == SchedulerKind::kHyperBand) s.max_t = 81, s.reduction_factor = 3;
  if (auto m = n["metric"]) s.metric = string(m, key("metric"));
  if (s.metric.empty() && e.metric) s.metric = *e.metric;
  s.mode = e.mode;
  if (auto m = n["mode"]) s.mode = order(m, key("mode"));
  if (s.kind != SchedulerKind::kFifo) {
    if (s.metric.empty())
      error(n, std::string("scheduler '") + name +
                   "' needs a metric to compare trials by: set 'metric' (and 'mode') in the "
                   "experiment or the scheduler");
    if (!n["mode"] && !e.mode_given)
      error(n, std::string("scheduler '") + name +
                   "' needs 'mode: min' or 'mode: max' for metric '" +
                   util::printable(s.metric, 40) + "'");
  }
  if (auto m = n["time_attr"]) s.time_attr = string(m, key("time_attr"));
  if (s.time_attr.empty()) error(n["time_attr"], "scheduler.time_attr must not be empty");
  auto positive = [&](const char* k, double& out) {
    if (auto m = n[k]) {
      out = number(m, key(k));
      if (!(out > 0) || std::isinf(out)) error(m, key(k) + " must be a positive number");
    }
  };
  positive("max_t", s.max_t);
  positive("grace_period", s.grace_period);
  if (auto m = n["reduction_factor"]) {
    s.reduction_factor = number(m, key("reduction_factor"));
    if (!(s.reduction_factor > 1) || std::isinf(s.reduction_factor))
      error(m, "scheduler.reduction_factor must be greater than 1, got " +
                   util::format_double(s.reduction_factor));
  }
  if (auto m = n["brackets"]) {
    auto v = integer(m, key("brackets"));
    if (v < 1 || v > 100) error(m, "scheduler.brackets must be between 1 and 100");
    s.brackets = static_cast<int>(v);
  }
  if (auto m = n["min_samples_required"]) {
    auto v = integer(m, key("min_samples_required"));
    if (v < 1 || v > 1'000'000) error(m, "scheduler.min_samples_required must be at least 1");
    s.min_samples_required = static_cast<int>(v);
  }
  // Keys that mean nothing to this scheduler are refused rather than ignored.
  static const std::map<SchedulerKind, std::set<std::string>> kUses = {
      {SchedulerKind::kFifo, {}},
      {SchedulerKind::kAsha, {"max_t", "grace_period", "reduction_factor", "brackets"}},
      {SchedulerKind::kHyperBand, {"max_t", "reduction_factor"}},
      {SchedulerKind::kMedianStopping, {"grace_period", "min_samples_required"}},
      {SchedulerKind::kPbt,
       {"perturbation_interval", "quantile_fraction", "resample_probability",
        "hyperparam_mutations", "perturbation_factors", "burn_in_period"}}};
  for (const auto& kv : n) {
    std::string k = kv.first.Scalar();
    if (k == "type" || k == "metric" || k == "mode" || k == "time_attr") continue;
    if (!kUses.at(s.kind).count(k))
      error(kv.first, "scheduler '" + std::string(name) + "' has no option '" + k + "'");
  }
  if (s.kind == SchedulerKind::kAsha && s.grace_period > s.max_t)
    error(n["grace_period"] ? n["grace_period"] : n,
          "scheduler.grace_period (" + util::format_double(s.grace_period) +
              ") must not exceed max_t (" + util::format_double(s.max_t) + ")");
  if (s.kind == SchedulerKind::kPbt) parse_pbt(n, e);
}

namespace {
std::string dotted_path(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& k : path) out += (out.empty() ? "" : ".") + k;
  return out;
}
}  // namespace

void Parser::parse_pbt(const YAML::Node& n, Experiment& e) const {
  auto& s = e.scheduler;
  if (auto m = n["perturbation_interval"]) {
    s.perturbation_interval = number(m, "scheduler.perturbation_interval");
    if (!(s.perturbation_interval > 0) || std::isinf(s.perturbation_interval))
      error(m, "scheduler.perturbation_interval must be a positive number, got " +
                   util::format_double(s.perturbation_interval));
  }
  if (auto m = n["burn_in_period"]) {
    s.burn_in_period = number(m, "scheduler.burn_in_period");
    if (!(s.burn_in_period >= 0) || std::isinf(s.burn_in_period))
      error(m, "scheduler.burn_in_period must be 0 or a positive number");
  }
  if (auto m = n["quantile_fraction"]) {
    s.quantile_fraction = number(m, "scheduler.quantile_fraction");
    if (!(s.quantile_fraction > 0 && s.quantile_fraction <= 0.5))
      error(m, "scheduler.quantile_fraction must be in (0, 0.5], got " +
                   util::format_double(s.quantile_fraction));
  }
  if (auto m = n["resample_probability"]) {
    s.resample_probability = number(m, "scheduler.resample_probability");
    if (!(s.resample_probability >= 0 && s.resample_probability <= 1))
      error(m, "scheduler.resample_probability must be in [0, 1], got " +
                   util::format_double(s.resample_probability));
  }
  if (auto m = n["perturbation_factors"]) {
    if (!m.IsSequence() || m.size() == 0)
      error(m, "scheduler.perturbation_factors must be a non-empty list of numbers");
    s.perturbation_factors.clear();
    for (const auto& f : m) {
      double v = number(f, "scheduler.perturbation_factors");
      if (!std::isfinite(v) || v <= 0)
        error(f, "scheduler.perturbation_factors: each factor must be a positive number");
      s.perturbation_factors.push_back(v);
    }
  }
  auto muts = n["hyperparam_mutations"];
  if (!muts || !muts.IsMap() || muts.size() == 0)
    error(muts ? muts : n,
          "scheduler 'pbt' needs 'hyperparam_mutations': a mapping of the config keys an exploit "
          "may change to a distribution ({loguniform: [1e-4, 1e-1]}) or a list of values");
  std::vector<std::string> path;
  parse_mutations(muts, path, s.mutations);
  // A key absent from param_space is sampled from its mutation, for every trial (as Ray).
  for (const auto& m : s.mutations) {
    std::string dotted = dotted_path(m.path);
    bool known = search::lookup(e.space.base, dotted) != nullptr ||
                 std::any_of(e.space.params.begin(), e.space.params.end(),
                             [&](const search::Param& p) { return p.path == m.path; });
    if (!known) e.space.params.push_back(m);
  }
}

void Parser::parse_mutations(const YAML::Node& n, std::vector<std::string>& path,
                             std::vector<search::Param>& out) const {
  check_duplicates(n);
  for (const auto& kv : n) {
    std::string key = kv.first.Scalar();
    path.push_back(key);
    std::string where = "scheduler.hyperparam_mutations." + dotted_path(path);
    const YAML::Node& v = kv.second;
    if (key.empty() || key.find('.') != std::string::npos)
      error(kv.first, where + ": a key must be non-empty and contain no '.'");
    if (v.IsSequence()) {
      if (v.size() == 0) error(v, where + ": an empty list gives nothing to choose from");
      Domain d;
      d.kind = Kind::kChoice;
      d.values = yaml_to_json(v);
      out.push_back({path, d});
    } else if (v.IsMap() && v.size() == 1 &&
               std::find(std::begin(kDomainKeys), std::end(kDomainKeys),
                         v.begin()->first.Scalar()) != std::end(kDomainKeys)) {
      std::string dk = v.begin()->first.Scalar();
      if (dk == "grid_search")
        error(v.begin()->first, where + ": grid_search cannot be sampled (use a list)");
      out.push_back({path, parse_domain(dk, v.begin()->second)});
    } else if (v.IsMap() && v.size() > 0) {
      parse_mutations(v, path, out);  // nested config keys
    } else {
      error(v, where +
                   ": cannot be sampled: give a distribution ({uniform: [lo, hi]}) or a "
                   "list of values");
    }
    path.pop_back();
  }
}

void Parser::parse_search(const YAML::Node& n, Experiment& e) const {
  if (n.IsNull()) return;
  check_map(n, "search_alg");
  check_keys(n, kSearchKeys, "search_alg");
  auto t = n["type"];
  if (!t) error(n, "search_alg: missing required key 'type' (random, tpe, bohb, external)");
  std::string type = string(t, "search_alg.type");
  parse_search_common(n, e);
  if (type == "random" || type == "basic_variant") {
    e.search_alg.kind = search::SearcherKind::kRandom;
    for (const auto& kv : n)
      if (!is_common_search_key(kv.first.Scalar()) && kv.first.Scalar() != "type")
        error(kv.first, "search_alg 'random' has no option '" + kv.first.Scalar() + "'");
    return;
  }
  if (type != "tpe" && type != "external" && type != "bohb")
    error(t, "unknown search_alg '" + util::printable(type, 40) +
                 "' (available: random, tpe, bohb, external)");
  e.search_alg.kind = type == "tpe"    ? search::SearcherKind::kTpe
                      : type == "bohb" ? search::SearcherKind::kBohb
                                       : search::SearcherKind::kExternal;
  if (type == "bohb" && e.scheduler.kind != SchedulerKind::kAsha &&
      e.scheduler.kind != SchedulerKind::kHyperBand)
    error(t,
          "search_alg 'bohb' models results at a scheduler's rungs: it needs "
          "scheduler: {type: hyperband} or {type: asha}");
  if (!e.metric)
    error(n, "search_alg '" + type +
                 "' needs a metric to model: set 'metric' and 'mode' in the experiment");
  if (!e.mode_given)
    error(n, "search_alg '" + type + "' needs 'mode: min' or 'mode: max' for metric '" +
                 util::printable(*e.metric, 40) + "'");
  for (const auto& kv : n) {
    std::string k = kv.first.Scalar();
    bool external_key = k == "command" || k == "timeout_s";
    bool bohb_key = k == "top_n_percent" || k == "random_fraction" || k == "min_points_in_model" ||
                    k == "num_samples" || k == "bandwidth_factor" || k == "min_bandwidth";
    bool tpe_key = !external_key && !bohb_key;
    bool fits = type == "external" ? external_key : type == "bohb" ? bohb_key : tpe_key;
    if (k != "type" && !is_common_search_key(k) && !fits)
      error(kv.first, "search_alg '" + type + "' has no option '" + k + "'");
  }
  if (type == "tpe")
    parse_tpe(n, e);
  else if (type == "bohb") {
    parse_bohb(n, e);
    auto& target = e.search_alg.bohb_target;
    target.budgets = sched::budgets(e.scheduler);
    target.time_attr = e.scheduler.time_attr;
    target.metric = e.scheduler.metric;
    target.maximize = e.scheduler.mode == Order::kMax;
  } else
    parse_external(n, e);
  for (const auto& p : e.space.params)
    if (p.domain.kind == search::Domain::Kind::kGrid) {
      std::string path;
      for (const auto& c : p.path) path += (path.empty() ? "" : ".") + c;
      error(t, "search_alg '" + type + "' cannot model grid_search parameter '" + path +
                   "': use choice instead (the searcher picks among the values), or "
                   "search_alg: random");
    }
}

bool Parser::is_common_search_key(const std::string& k) {
  return k == "points_to_evaluate" || k == "max_concurrent" || k == "restore_from";
}

void Parser::parse_search_common(const YAML::Node& n, Experiment& e) const {
  if (auto m = n["max_concurrent"]) {
    int64_t v = integer(m, "search_alg.max_concurrent");
    if (v < 1 || v > 1'000'000) error(m, "search_alg.max_concurrent must be between 1 and 1000000");
    e.search_alg.max_concurrent = v;
  }
  if (auto m = n["restore_from"]) {
    fs::path r = string(m, "search_alg.restore_from");
    if (r.empty()) error(m, "search_alg.restore_from is empty: name an experiment dir");
    fs::path yaml_dir = e.source_file.parent_path();
    e.search_alg.restore_from = (r.is_absolute() ? r : yaml_dir / r).lexically_normal();
  }
  auto pts = n["points_to_evaluate"];
  if (!pts || pts.IsNull()) return;
  if (!pts.IsSequence())
    error(pts, "search_alg.points_to_evaluate must be a list of configs ({param: value, ...})");
  size_t i = 0;
  for (const auto& p : pts) {
    std::string where = "search_alg.points_to_evaluate[" + std::to_string(i++) + "]";
    if (!p.IsMap()) error(p, where + " must be a mapping of parameters to values");
    nlohmann::json point = yaml_to_json(p);
    if (auto r = search::check_point(e.space, point); !r)
      error(p, where + ": " + r.error().message);
    e.search_alg.points_to_evaluate.push_back(std::move(point));
  }
  if (e.search_alg.points_to_evaluate.size() > e.num_samples)
    error(pts, "search_alg.points_to_evaluate has " +
                   std::to_string(e.search_alg.points_to_evaluate.size()) +
                   " configs, more than num_samples (" + std::to_string(e.num_samples) +
                   "): they count among the trials");
}

void Parser::parse_external(const YAML::Node& n, Experiment& e) const {
  auto& o = e.search_alg.external;
  auto cmd = n["command"];
  if (!cmd) error(n, "search_alg 'external' needs 'command': the searcher's argv");
  if (cmd.IsSequence()) {
    for (const auto& w : cmd) {
      if (!w.IsScalar()) error(w, "search_alg.command: each argument must be a scalar");
      o.command.push_back(w.Scalar());
    }
  } else if (cmd.IsScalar()) {
    auto words = util::shell_split(cmd.Scalar());
    if (!words) error(cmd, "search_alg.command: " + words.error().message);
    o.command = std::move(*words);
  } else {
    error(cmd, "search_alg.command must be a list of arguments or a string");
  }
  if (o.command.empty() || o.command[0].empty())
    error(cmd, "search_alg.command is empty: name the searcher program to run");
  if (auto m = n["timeout_s"]) {
    o.timeout_s = number(m, "search_alg.timeout_s");
    if (!(o.timeout_s > 0) || o.timeout_s > 86400)
      error(m, "search_alg.timeout_s must be a number of seconds in (0, 86400]");
  }
}

void Parser::parse_bohb(const YAML::Node& n, Experiment& e) const {
  auto& o = e.search_alg.bohb;
  if (auto m = n["top_n_percent"]) {
    o.top_n_percent = number(m, "search_alg.top_n_percent");
    if (!(o.top_n_percent > 0 && o.top_n_percent < 100))
      error(m, "search_alg.top_n_percent must be in (0, 100)");
  }
  if (auto m = n["random_fraction"]) {
    o.random_fraction = number(m, "search_alg.random_fraction");
    if (!(o.random_fraction >= 0 && o.random_fraction <= 1))
      error(m, "search_alg.random_fraction must be in [0, 1]");
  }
  if (auto m = n["bandwidth_factor"]) {
    o.bandwidth_factor = number(m, "search_alg.bandwidth_factor");
    if (!(o.bandwidth_factor > 0 && o.bandwidth_factor <= 1000))
      error(m, "search_alg.bandwidth_factor must be in (0, 1000]");
  }
  if (auto m = n["min_bandwidth"]) {
    o.min_bandwidth = number(m, "search_alg.min_bandwidth");
    if (!(o.min_bandwidth > 0 && o.min_bandwidth <= 1))
      error(m, "search_alg.min_bandwidth must be in (0, 1]");
  }
  for (auto [k, out, lo] : {std::tuple<const char*, int64_t*, int64_t>{"min_points_in_model",
                                                                       &o.min_points_in_model, 1},
                            {"num_samples", &o.num_samples, 1}})
    if (auto m = n[k]) {
      *out = integer(m, std::string("search_alg.") + k);
      if (*out < lo || *out > 100'000)
        error(m, std::string("search_alg.") + k + " must be between 1 and 100000");
    }
}

void Parser::parse_tpe(const YAML::Node& n, Experiment& e) const {
  auto& o = e.search_alg.tpe;
  auto count = [&](const char* k, int64_t& out, int64_t lo) {
    if (auto m = n[k]) {
      out = integer(m, std::string("search_alg.") + k);
      if (out < lo || out > 1'000'000)
        error(m, std::string("search_alg.") + k + " must be between " + std::to_string(lo) +
                     " and 1000000");
    }
  };
  count("n_startup_trials", o.n_startup_trials, 0);
  count("n_ei_candidates", o.n_ei_candidates, 1);
  count("gamma_cap", o.gamma_cap, 1);
  if (auto m = n["gamma"]) {
    o.gamma = number(m, "search_alg.gamma");
    if (!(o.gamma > 0 && o.gamma <= 1)) error(m, "search_alg.gamma must be in (0, 1]");
  }
  if (auto m = n["prior_weight"]) {
    o.prior_weight = number(m, "search_alg.prior_weight");
    if (!(o.prior_weight > 0) || std::isinf(o.prior_weight))
      error(m, "search_alg.prior_weight must be a positive number");
  }
  for (auto [k, out] :
       {std::pair<const char*, bool*>{"consider_magic_clip", &o.consider_magic_clip},
        {"consider_endpoints", &o.consider_endpoints},
        {"constant_liar", &o.constant_liar},
        {"bandwidth_weighted", &o.bandwidth_weighted}})
    if (auto m = n[k]) *out = boolean(m, std::string("search_alg.") + k);
}

void Parser::parse_hosts(const YAML::Node& n, Experiment& e) const {
  if (n.IsNull()) return;
  if (!n.IsSequence()) error(n, "hosts must be a list of {local: {...}} or {ssh: {...}} entries");
  int locals = 0, slurms = 0;
  for (const auto& h : n) {
    if (!h.IsMap() || h.size() != 1)
      error(h, "each host must be a mapping with one key, 'local', 'ssh' or 'slurm'");
    std::string kind = h.begin()->first.Scalar();
    const YAML::Node body = h.begin()->second;  // a copy: the iterator's pair is a temporary
    HostSpec hs;
    if (kind == "local") {
      hs.kind = HostSpec::Kind::kLocal;
      if (++locals > 1) error(h, "only one 'local' host may be listed");
      if (!body.IsNull()) {
        check_map(body, "hosts.local");
        check_keys(body, kLocalHostKeys, "hosts.local");
      }
    } else if (kind == "ssh") {
      hs.kind = HostSpec::Kind::kSsh;
      check_map(body, "hosts.ssh");
      check_keys(body, kSshHostKeys, "hosts.ssh");
      if (!body["host"]) error(body, "hosts.ssh: missing required key 'host'");
      hs.host = string(body["host"], "hosts.ssh.host");
      if (hs.host.empty() || hs.host[0] == '-' ||
          hs.host.find_first_of(" \t\n;&|$`'\"\\<>(){}") != std::string::npos)
        error(body["host"], "hosts.ssh.host: '" + util::printable(hs.host, 60) +
                                "' is not a host name or address");
      if (auto m = body["user"]) hs.user = string(m, "hosts.ssh.user");
      if (auto m = body["port"]) {
        auto p = integer(m, "hosts.ssh.port");
        if (p < 1 || p > 65535) error(m, "hosts.ssh.port must be 1..65535");
        hs.port = static_cast<int>(p);
      }
      if (auto m = body["identity_file"]) hs.identity_file = string(m, "hosts.ssh.identity_file");
      if (auto m = body["storage_path"]) hs.storage_path = string(m, "hosts.ssh.storage_path");
      hs.known_hosts_file = "~/.ssh/known_hosts";
      if (auto m = body["known_hosts_file"])
        hs.known_hosts_file = string(m, "hosts.ssh.known_hosts_file");
    } else if (kind == "slurm") {
      hs.kind = HostSpec::Kind::kSlurm;
      if (++slurms > 1) error(h, "only one 'slurm' host may be listed");
      parse_slurm_host(body, hs);
      e.hosts.push_back(hs);
      continue;
    } else {
      std::string msg = "unknown host kind '" + util::printable(kind, 40) + "'";
      constexpr std::string_view kinds[] = {"local", "ssh", "slurm"};
      if (auto s = util::suggest(kind, kinds)) msg += " (did you mean '" + *s + "'?)";
      error(h.begin()->first, msg);
    }
    if (!body.IsNull()) {
      if (auto m = body["cpus"]) {
        hs.cpus = number(m, "hosts.cpus");
        if (*hs.cpus <= 0) error(m, "hosts.cpus must be positive");
      }
      if (auto m = body["gpus"]) {
        auto g = integer(m, "hosts.gpus");
        if (g < 0 || g > 4096) error(m, "hosts.gpus must be 0..4096");
        hs.gpus = static_cast<int>(g);
      }
    }
    e.hosts.push_back(hs);
  }
}

// hosts: - slurm: {...}. Values reach sbatch as single arguments (no shell), but they are still
// checked here so that a typo is a config error naming its line, not a failed job later.
void Parser::parse_slurm_host(const YAML::Node& body, HostSpec& hs) const {
  if (body.IsNull()) return;
  check_map(body, "hosts.slurm");
  check_keys(body, kSlurmHostKeys, "hosts.slurm");
  auto& s = hs.slurm;
  auto word = [&](const char* key, std::string& out, const char* allowed) {
    auto m = body[key];
    if (!m) return;
    out = string(m, std::string("hosts.slurm.") + key);
    if (out.empty() || out[0] == '-' || out.find_first_not_of(allowed) != std::string::npos)
      error(m, std::string("hosts.slurm.") + key + ": '" + util::printable(out, 60) +
                   "' is not a Slurm " + key);
  };
  constexpr const char* kName = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-";
  word("partition", s.partition, kName);
  word("account", s.account, kName);
  word("time_limit", s.time_limit, "0123456789:-");
  word("mem", s.mem, "0123456789KMGTkmgt");
  for (const char* key : {"cpus", "gpus"}) {
    if (auto m = body[key]) {
      auto v = integer(m, std::string("hosts.slurm.") + key);
      if (v < (key[0] == 'c' ? 1 : 0) || v > 100000)
        error(m, std::string("hosts.slurm.") + key + " must be " + (key[0] == 'c' ? "1" : "0") +
                     "..100000");
      (key[0] == 'c' ? s.cpus : s.gpus) = static_cast<int>(v);
    }
  }
  if (auto m = body["max_jobs"]) {
    auto v = integer(m, "hosts.slurm.max_jobs");
    if (v < 1 || v > 100000) error(m, "hosts.slurm.max_jobs must be 1..100000");
    s.max_jobs = static_cast<int>(v);
  }
  if (auto m = body["signal_grace_s"]) {
    s.signal_grace_s = number(m, "hosts.slurm.signal_grace_s");
    if (!(s.signal_grace_s >= 1 && s.signal_grace_s <= 65535))
      error(m, "hosts.slurm.signal_grace_s must be 1..65535 (sbatch --signal's range)");
  }
  if (auto m = body["use_allocation"]) s.use_allocation = boolean(m, "hosts.slurm.use_allocation");
  if (auto m = body["sbatch_args"]) {
    if (!m.IsSequence()) error(m, "hosts.slurm.sbatch_args must be a list of strings");
    for (const auto& a : m) {
      std::string arg = string(a, "hosts.slurm.sbatch_args");
      if (arg.size() < 2 || arg[0] != '-')
        error(a, "hosts.slurm.sbatch_args: '" + util::printable(arg, 60) +
                     "' is not an option (each entry is one sbatch option, e.g. --qos=normal)");
      s.sbatch_args.push_back(std::move(arg));
    }
  }
}

void Parser::check_placeholders(const YAML::Node& cmd_node, const Experiment& e) const {
  auto sample = search::generate(e.space, 0, 0);
  for (size_t w = 0; w < e.trial.command.size(); ++w) {
    const std::string& word = e.trial.command[w];
    YAML::Node at = cmd_node.IsSequence() ? cmd_node[w] : cmd_node;
    for (size_t i = 0; i < word.size(); ++i) {
      if (word[i] == '{') {
        if (i + 1 < word.size() && word[i + 1] == '{') {
          ++i;
          continue;
        }
        size_t close = word.find('}', i);
        if (close == std::string::npos)
          error(at, "trial.command: unclosed '{' in '" + util::printable(word, 60) +
                        "' (write {{ for a literal brace)");
        std::string key = word.substr(i + 1, close - i - 1);
        if (!search::lookup(sample.config, key)) {
          std::vector<std::string> keys;
          std::function<void(const nlohmann::json&, std::string)> walk =
              [&](const nlohmann::json& j, std::string prefix) {
                for (auto it = j.begin(); it != j.end(); ++it) {
                  std::string k = prefix.empty() ? it.key() : prefix + "." + it.key();
                  keys.push_back(k);
                  if (it->is_object()) walk(*it, k);
                }
              };
          walk(sample.config, "");
          std::vector<std::string_view> views(keys.begin(), keys.end());
          std::string msg = "trial.command: placeholder '{" + util::printable(key, 40) +
                            "}' names no key of param_space";
          if (auto s = util::suggest(key, views)) msg += " (did you mean '{" + *s + "}'?)";
          error(at, msg);
        }
        i = close;
      } else if (word[i] == '}') {
        if (i + 1 < word.size() && word[i + 1] == '}') {
          ++i;
          continue;
        }
        error(at, "trial.command: stray '}' in '" + util::printable(word, 60) +
                      "' (write }} for a literal brace)");
      }
    }
  }
}

// Applies `--set a.b=v` onto the document; returns the set value nodes with their labels.
std::vector<std::pair<YAML::Node, std::string>> apply_sets(YAML::Node& root,
                                                           const std::vector<std::string>& sets) {
  std::vector<std::pair<YAML::Node, std::string>> labels;
  for (const auto& s : sets) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ParseError{"--set '" + util::printable(s, 60) + "': expected KEY=VALUE"};
    std::string key = s.substr(0, eq);
    if (util::invalid_utf8_at(key) != std::string::npos || key.find('\0') != std::string::npos)
      throw ParseError{"--set '" + util::printable(key, 60) + "': the key is not valid UTF-8 text"};
    std::string label = "--set " + util::printable(key, 60);
    std::string text = s.substr(eq + 1);
    if (auto r = check_yaml(text, label, false); !r) throw ParseError{r.error().message};
    YAML::Node value;
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& ex) {
      throw ParseError{label + ": cannot parse value: " + ex.msg};
    }
    if (!root.IsMap()) throw ParseError{label + ": the experiment file is not a mapping"};
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
      size_t dot = key.find('.', start);
      parts.push_back(
          key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    YAML::Node cur;
    cur.reset(root);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].empty()) throw ParseError{label + ": empty key component"};
      YAML::Node next = cur[parts[i]];
      if (!next.IsDefined() || next.IsNull()) {
        cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      } else if (!next.IsMap()) {
        throw ParseError{label + ": '" + parts[i] + "' is not a mapping"};
      }
      YAML::Node child = cur[parts[i]];
      cur.reset(child);
    }
    if (parts.back().empty()) throw ParseError{label + ": empty key component"};
    cur[parts.back()] = value;
    labels.emplace_back(cur[parts.back()], label);
  }
  return labels;
}

}  // namespace

namespace {
constexpr std::string_view kMutableTop[] = {"stop",
                                            "time_budget_s",
                                            "max_concurrent_trials",
                                            "sync_config",
                                            "orphan_timeout_s",
                                            "host_timeout_s",
                                            "report_period_s",
                                            "tensorboard",
                                            "progress_reporter",
                                            "callbacks"};
constexpr std::string_view kMutableCheckpoint[] = {"num_to_keep", "checkpoint_score_attribute",
                                                   "checkpoint_score_order"};

bool is_mutable(const std::string& top, const std::string& sub) {
  if (std::find(std::begin(kMutableTop), std::end(kMutableTop), top) != std::end(kMutableTop))
    return true;
  return top == "checkpoint_config" &&
         std::find(std::begin(kMutableCheckpoint), std::end(kMutableCheckpoint), sub) !=
             std::end(kMutableCheckpoint);
}

// Calls fn(top, sub, dotted) for every key whose value differs (sub = "" below the top level,
// or the checkpoint_config member).
template <typename Fn>
void each_difference(const nlohmann::json& a, const nlohmann::json& b, Fn fn) {
  std::set<std::string> keys;
  for (const auto* j : {&a, &b})
    if (j->is_object())
      for (auto it = j->begin(); it != j->end(); ++it) keys.insert(it.key());
  for (const auto& k : keys) {
    const nlohmann::json none;
    const auto& va = a.contains(k) ? a[k] : none;
    const auto& vb = b.contains(k) ? b[k] : none;
    if (va == vb) continue;
    if (k == "checkpoint_config" && (va.is_object() || va.is_null()) &&
        (vb.is_object() || vb.is_null())) {
      std::set<std::string> sub;
      for (const auto* j : {&va, &vb})
        if (j->is_object())
          for (auto it = j->begin(); it != j->end(); ++it) sub.insert(it.key());
      for (const auto& s : sub) {
        const auto& sa = va.is_object() && va.contains(s) ? va[s] : none;
        const auto& sb = vb.is_object() && vb.contains(s) ? vb[s] : none;
        if (sa != sb) fn(k, s, k + "." + s);
      }
      continue;
    }
    fn(k, std::string(), k);
  }
}
}  // namespace

std::optional<std::string> forbidden_change(const nlohmann::json& before,
                                            const nlohmann::json& after) {
  std::optional<std::string> first;
  each_difference(before, after,
                  [&](const std::string& top, const std::string& sub, const std::string& dotted) {
                    if (!first && !is_mutable(top, sub)) first = dotted;
                  });
  return first;
}

std::vector<std::string> changed_keys(const nlohmann::json& before, const nlohmann::json& after) {
  std::vector<std::string> out;
  each_difference(before, after,
                  [&](const std::string&, const std::string&, const std::string& dotted) {
                    out.push_back(dotted);
                  });
  return out;
}

const char* scheduler_name(SchedulerKind k) {
  switch (k) {
    case SchedulerKind::kFifo:
      return "fifo";
    case SchedulerKind::kAsha:
      return "asha";
    case SchedulerKind::kHyperBand:
      return "hyperband";
    case SchedulerKind::kMedianStopping:
      return "median_stopping";
    case SchedulerKind::kPbt:
      return "pbt";
  }
  return "?";
}

const char* callback_event_name(CallbackEvent e) {
  return kCallbackEvents[static_cast<size_t>(e)].data();
}

fs::path default_storage_path() {
  if (const char* env = std::getenv("TUNE_STORAGE_PATH"); env && *env)
    return fs::absolute(util::expand_user(env)).lexically_normal();
  return util::expand_user("~/tune_results");
}

Result<Experiment> parse_experiment(const std::string& yaml_text, const fs::path& path,
                                    const Overrides& ov) {
  // Before any tree exists: recursive aliases and alias bombs, non-UTF-8 bytes and NULs.
  if (auto r = check_yaml(yaml_text, path.string(), true); !r) return std::unexpected(r.error());
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& ex) {
    return fail(path.string(), ":", std::to_string(ex.mark.line + 1), ":",
                std::to_string(ex.mark.column + 1), ": invalid YAML: ", ex.msg);
  }
  try {
    if (!root.IsDefined() || root.IsNull())
      return fail(path.string(), ": the experiment file is empty");
    auto labels = apply_sets(root, ov.set);
    Parser p(path, std::move(labels));
    auto warnings = normalize_ray(root, [&](const YAML::Node& n) { return p.where(n); });
    if (!warnings) return std::unexpected(warnings.error());
    Experiment e = p.parse(root, ov);
    e.warnings = std::move(*warnings);
    e.effective = yaml_to_json(root);
    e.effective.erase("name");          // the directory already names it
    e.effective.erase("storage_path");  // an experiment dir can move
    return e;
  } catch (const ParseError& e) {
    return fail(e.message);
  } catch (const YAML::Exception& ex) {
    return fail(path.string(), ":", std::to_string(ex.mark.line + 1), ":",
                std::to_string(ex.mark.column + 1), ": ", ex.msg);
  }
}

Result<Experiment> load_experiment(const fs::path& path, const Overrides& ov) {
  auto text = util::read_file(path, 16u << 20);
  if (!text) return std::unexpected(text.error());
  return parse_experiment(*text, path, ov);
}

}  // namespace tune::spec
