// Searchers choose each new trial's config (docs/SEARCH.md). `random` is the grid × samples
// expansion of the search space; `tpe` a model of the finished trials' results (search/tpe.hpp).
// A searcher is a pure unit: the controller asks it for configs and tells it how trials ended.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "search/space.hpp"
#include "search/tpe.hpp"
#include "util/error.hpp"

namespace tune::search {

enum class SearcherKind { kRandom, kTpe };

// The search_alg section of an experiment.
struct SearcherSpec {
  SearcherKind kind = SearcherKind::kRandom;
  TpeOptions tpe;
};

// What a searcher answers when asked for a new trial's config.
struct Suggestion {
  enum class Kind { kConfig, kWait, kFinished } kind = Kind::kConfig;
  json config;                                        // with kConfig
  std::vector<std::pair<std::string, json>> varying;  // dotted path -> value (trial names)
};

class Searcher {
 public:
  virtual ~Searcher() = default;
  // The config of trial `index` (0-based, in creation order).
  [[nodiscard]] virtual Suggestion suggest(uint64_t index) = 0;
  // A trial ended; `value` is its metric oriented so that lower is better (nullopt: none, or
  // it failed).
  virtual void on_complete(const std::string& trial, const json& config,
                           std::optional<double> value) = 0;
  // Its state, saved with the experiment state; restore() refuses one that is not its own.
  [[nodiscard]] virtual json save() const = 0;
  [[nodiscard]] virtual Result<void> restore(const json& state) = 0;
};

// The searcher of an experiment; fails naming what its kind cannot model (a grid for tpe).
[[nodiscard]] Result<std::unique_ptr<Searcher>> make_searcher(const SearcherSpec& spec,
                                                              const Space& space,
                                                              uint64_t num_samples, uint64_t seed);

[[nodiscard]] const char* searcher_name(SearcherKind k);

}  // namespace tune::search
