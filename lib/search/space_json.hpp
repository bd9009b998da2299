// The search space as external searchers see it, and the check of the configs they answer.
#pragma once

#include <string>

#include "search/space.hpp"
#include "util/error.hpp"

namespace tune::search {

// The YAML name of a domain ("loguniform", "grid_search").
[[nodiscard]] const char* domain_name(Domain::Kind k);

// The param_space as written, as JSON: constants as they are, each parameter
// {"<domain>": [args...]} (choice / grid_search: the list of values), nested mappings nested.
[[nodiscard]] json space_to_json(const Space& space);

// The trial config an external searcher's answer stands for: every parameter must be present,
// in its domain (a choice among its values, a number in range, an integer for the int kinds);
// constants may be left out (they are filled in) but not changed; nothing else may appear.
// Fails with one line naming the first offending key.
[[nodiscard]] Result<TrialConfig> config_from_answer(const Space& space, const json& answer);

// A point_to_evaluate: like an answer, but parameters may be left out (nested or dotted keys).
[[nodiscard]] Result<void> check_point(const Space& space, const json& point);
// Trial `index`'s config from a checked point: what random search draws for that trial, with
// the point's values in place of the drawn ones.
[[nodiscard]] TrialConfig fill_point(const Space& space, const json& point, uint64_t seed,
                                     uint64_t index);

}  // namespace tune::search
