// The search space: parameter domains, and the deterministic expansion into trial configs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tune::search {

using json = nlohmann::json;

// One sampled or enumerated parameter. `args` holds the numeric arguments as written
// (uniform/loguniform [lo, hi]; quniform/qloguniform [lo, hi, q]; randint/lograndint [lo, hi);
// qrandint/qlograndint [lo, hi, q] with hi included; randn [mean, sd]; qrandn [mean, sd, q]);
// `values` the choices or grid values.
struct Domain {
  enum class Kind {
    kUniform,
    kLogUniform,
    kQUniform,
    kQLogUniform,
    kRandInt,
    kRandN,
    kLogRandInt,
    kQRandInt,
    kQLogRandInt,
    kQRandN,
    kChoice,
    kGrid
  };
  Kind kind = Kind::kUniform;
  std::vector<double> args;
  json values = json::array();
};

// A parameter at a path in the (possibly nested) config, e.g. {"optimizer", "lr"}.
struct Param {
  std::vector<std::string> path;
  Domain domain;
};

// The whole space: constants laid out in `base` (nested objects), parameters in YAML order.
struct Space {
  json base = json::object();
  std::vector<Param> params;
};

// One generated trial: its 0-based index, its full config, and the values that vary (for names).
struct TrialConfig {
  uint64_t index = 0;
  json config;
  std::vector<std::pair<std::string, json>> varying;  // dotted path -> value, in param order
};

// Number of trials the space yields: num_samples x product of grid sizes, or nullopt if that
// does not fit in 64 bits.
[[nodiscard]] std::optional<uint64_t> checked_trial_count(const Space& space, uint64_t num_samples);
// Same, saturating at UINT64_MAX (a validated experiment has at most 10 M trials).
[[nodiscard]] uint64_t trial_count(const Space& space, uint64_t num_samples);

// Generates trial `index` (0-based) of the experiment. Depends only on (space, seed, index):
// sample k = index / grid_size takes grid point index % grid_size (the last grid parameter
// varies fastest); random parameters come from an mt19937_64 stream keyed by (seed, index) and
// this project's own distribution code, so results are identical on every platform.
[[nodiscard]] TrialConfig generate(const Space& space, uint64_t seed, uint64_t index);

class Rng;
// One draw from a (non-grid) domain, with this project's distribution code.
[[nodiscard]] json sample(const Domain& d, Rng& rng);

// Name of a config value as it appears in trial names and placeholders ("0.001", "adam").
[[nodiscard]] std::string value_text(const json& v);

// Looks up a dotted path ("a.b") in a config; nullptr if absent.
[[nodiscard]] const json* lookup(const json& config, std::string_view dotted);

}  // namespace tune::search
