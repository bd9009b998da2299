// Converting YAML nodes into JSON values with YAML 1.2 core-schema typing of plain scalars.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

namespace tune::spec {

// A quoted scalar is always a string; a plain one is null, bool, int, float or string by its text.
[[nodiscard]] nlohmann::json yaml_to_json(const YAML::Node& node);

}  // namespace tune::spec
