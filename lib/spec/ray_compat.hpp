// Ray Tune's layout (tune_config/run_config groups) and old key names, rewritten into ours.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tune::spec {

// Where a node is, for messages: "FILE:LINE:COL" (or "--set KEY" for a command-line value).
using Locate = std::function<std::string(const YAML::Node&)>;

// Rewrites `root` in place: the members of `tune_config:` and `run_config:` move to the top
// level; Ray's names (local_dir, keep_checkpoints_num, checkpoint_score_attr, checkpoint_freq,
// resources_per_trial, syncer: null, CPU/GPU resource keys) become ours. Returns one warning per
// Ray name used (naming the key to use instead), or the first error: a key given both ways, an
// unknown member of a group, a malformed value.
[[nodiscard]] Result<std::vector<std::string>> normalize_ray(YAML::Node& root, const Locate& where);

}  // namespace tune::spec
