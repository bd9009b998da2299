#include "spec/ray_compat.hpp"

#include <algorithm>
#include <span>

#include "util/strings.hpp"

namespace tune::spec {

namespace {

struct Failure {
  std::string message;
};

constexpr std::string_view kTuneConfigKeys[] = {
    "num_samples",   "metric",     "mode",     "max_concurrent_trials",
    "time_budget_s", "search_alg", "scheduler"};
constexpr std::string_view kRunConfigKeys[] = {"name",        "storage_path",      "local_dir",
                                               "stop",        "checkpoint_config", "failure_config",
                                               "sync_config", "callbacks"};

// One of Ray's names for a member of one of our sections.
struct Alias {
  std::string_view ray;      // Ray's key, at the top level (or in `section`)
  std::string_view section;  // where ours lives ("" = top level)
  std::string_view ours;     // our key in that section
};
constexpr Alias kTopAliases[] = {
    {"local_dir", "", "storage_path"},
    {"config", "", "param_space"},
    {"resources_per_trial", "trial", "resources"},
    {"keep_checkpoints_num", "checkpoint_config", "num_to_keep"},
    {"checkpoint_score_attr", "checkpoint_config", "checkpoint_score_attribute"},
    {"checkpoint_freq", "checkpoint_config", "checkpoint_frequency"},
    {"checkpoint_at_end", "checkpoint_config", "checkpoint_at_end"},
    {"max_failures", "failure_config", "max_failures"},
};
constexpr Alias kCheckpointAliases[] = {
    {"keep_checkpoints_num", "checkpoint_config", "num_to_keep"},
    {"checkpoint_score_attr", "checkpoint_config", "checkpoint_score_attribute"},
    {"checkpoint_freq", "checkpoint_config", "checkpoint_frequency"},
};

class Normalizer {
 public:
  Normalizer(YAML::Node& root, const Locate& where) : root_(root), where_(where) {}

  std::vector<std::string> run() {
    lift("tune_config", kTuneConfigKeys);
    lift("run_config", kRunConfigKeys);
    for (const auto& a : kTopAliases) rename(root_, "", a);
    if (auto c = child(root_, "checkpoint_config"); c.IsMap())
      for (const auto& a : kCheckpointAliases) rename(c, "checkpoint_config.", a);
    split_score_attr();
    if (auto s = child(root_, "sync_config"); s.IsMap()) {
      if (auto m = child(s, "syncer"); m && m.IsNull()) {
        warn(key_of(s, "syncer"), "'syncer: null' is Ray's spelling: use 'syncer: none'");
        s["syncer"] = "none";
      }
    }
    if (auto t = child(root_, "trial"); t.IsMap())
      if (auto r = child(t, "resources"); r.IsMap()) lower_resource_keys(r);
    return std::move(warnings_);
  }

 private:
  [[noreturn]] void error(const YAML::Node& n, const std::string& msg) const {
    throw Failure{where_(n) + ": " + msg};
  }
  void warn(const YAML::Node& n, const std::string& msg) {
    warnings_.push_back(where_(n) + ": " + msg);
  }

  // The value of `key` in `map` (an undefined node if absent), without inserting it.
  static YAML::Node child(const YAML::Node& map, std::string_view key) {
    if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (const auto& kv : map)
      if (kv.first.Scalar() == key) return kv.second;
    return YAML::Node(YAML::NodeType::Undefined);
  }
  // The key node itself (for its position in messages).
  static YAML::Node key_of(const YAML::Node& map, std::string_view key) {
    for (const auto& kv : map)
      if (kv.first.Scalar() == key) return kv.first;
    return map;
  }

  // The section `name` of the top level as a mapping, created empty if absent.
  YAML::Node section(std::string_view name, const YAML::Node& asking) {
    if (name.empty()) return root_;
    YAML::Node s = child(root_, name);
    if (!s || s.IsNull()) {
      root_[std::string(name)] = YAML::Node(YAML::NodeType::Map);
      return child(root_, name);
    }
    if (!s.IsMap()) error(asking, std::string(name) + " must be a mapping");
    return s;
  }

  // Moves the members of `group` (Ray's TuneConfig/RunConfig) to the top level.
  void lift(std::string_view group, std::span<const std::string_view> allowed) {
    YAML::Node g = child(root_, group);
    if (!g) return;
    if (g.IsNull()) {
      root_.remove(std::string(group));
      return;
    }
    if (!g.IsMap()) error(g, std::string(group) + " must be a mapping");
    std::vector<std::pair<YAML::Node, YAML::Node>> members;
    std::vector<std::string> seen;
    for (const auto& kv : g) {
      std::string key = kv.first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string msg = "unknown key '" + util::printable(key, 60) + "' in " + std::string(group);
        if (auto s = util::suggest(key, allowed)) msg += " (did you mean '" + *s + "'?)";
        error(kv.first, msg);
      }
      if (std::find(seen.begin(), seen.end(), key) != seen.end())
        error(kv.first, "duplicate key '" + key + "' in " + std::string(group));
      seen.push_back(key);
      members.emplace_back(kv.first, kv.second);
    }
    for (const auto& [k, v] : members) {
      if (child(root_, k.Scalar()))
        error(k, "'" + k.Scalar() + "' is given both in " + std::string(group) +
                     " and at the top level (line " +
                     std::to_string(key_of(root_, k.Scalar()).Mark().line + 1) + "): give it once");
      root_[k.Scalar()] = v;
    }
    root_.remove(std::string(group));
  }

  // Ray's key `a.ray` in `map` becomes our `a.section`.`a.ours`, with a warning.
  void rename(YAML::Node map, std::string_view prefix, const Alias& a) {
    YAML::Node v = child(map, a.ray);
    if (!v) return;
    YAML::Node k = key_of(map, a.ray);
    std::string ours = a.section.empty() ? std::string(a.ours)
                                         : std::string(a.section) + "." + std::string(a.ours);
    warn(k, "'" + std::string(prefix) + std::string(a.ray) + "' is Ray's name: use '" + ours +
                "' (accepted)");
    YAML::Node dest = map.is(root_) ? section(a.section, k) : map;
    if (child(dest, a.ours))
      error(k,
            "'" + std::string(a.ray) + "' and '" + ours + "' are the same setting: give it once");
    dest[std::string(a.ours)] = v;
    map.remove(std::string(a.ray));
    if (a.ray == "checkpoint_score_attr") score_attr_from_ray_ = true;
  }

  // Ray's checkpoint_score_attr may be "min-loss" / "max-acc": the prefix sets the order.
  void split_score_attr() {
    YAML::Node c = child(root_, "checkpoint_config");
    if (!c.IsMap()) return;
    YAML::Node attr = child(c, "checkpoint_score_attribute");
    if (!attr || !attr.IsScalar()) return;
    std::string s = attr.Scalar();
    std::string order;
    if (s.starts_with("min-") || s.starts_with("max-")) order = s.substr(0, 3);
    if (order.empty() || s.size() == 4) return;
    // Only Ray's key carries the prefix: a metric named "max-x" keeps its name in ours.
    if (!score_attr_from_ray_) return;
    if (YAML::Node o = child(c, "checkpoint_score_order"); o && o.IsScalar() && o.Scalar() != order)
      error(o, "checkpoint_score_order '" + util::printable(o.Scalar(), 20) +
                   "' contradicts the '" + order + "-' prefix of checkpoint_score_attr");
    c["checkpoint_score_attribute"] = s.substr(4);
    c["checkpoint_score_order"] = order;
  }

  // Ray writes resources as {CPU: 1, GPU: 1}; ours are lower case.
  void lower_resource_keys(YAML::Node r) {
    for (std::string_view upper : {"CPU", "GPU"}) {
      YAML::Node v = child(r, upper);
      if (!v) continue;
      std::string lower = upper == "CPU" ? "cpu" : "gpu";
      if (child(r, lower))
        error(key_of(r, upper), "trial.resources: '" + std::string(upper) + "' and '" + lower +
                                    "' are the same resource: give it once");
      r[lower] = v;
      r.remove(std::string(upper));
    }
  }

  YAML::Node& root_;
  const Locate& where_;
  std::vector<std::string> warnings_;
  bool score_attr_from_ray_ = false;  // checkpoint_score_attribute came from Ray's key
};

}  // namespace

Result<std::vector<std::string>> normalize_ray(YAML::Node& root, const Locate& where) {
  if (!root.IsMap()) return std::vector<std::string>{};
  try {
    return Normalizer(root, where).run();
  } catch (const Failure& f) {
    return std::unexpected(Error{f.message});
  }
}

}  // namespace tune::spec
