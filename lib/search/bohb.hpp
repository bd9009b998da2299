// BOHB: Falkner, Klein, Hutter, "BOHB: Robust and Efficient Hyperparameter Optimization at
// Scale", ICML 2018 — the model half; the bandit half is the hyperband or asha scheduler the
// experiment runs with, whose rung milestones are the budgets here.
//
// Every result a trial reports is recorded at a budget: the highest budget <= its time_attr value
// that the trial has no value at yet (the rule asha uses for its rungs). A suggestion is random (a
// draw of the search space, as random search gives that index) with probability random_fraction,
// or while no budget has min_points_in_model values (default: the number of parameters + 1).
// Otherwise the model is fitted on the largest budget that has enough: TPE's density ratio
// l(x)/g(x) (search/tpe.hpp) with the best top_n_percent of that budget's values as the good
// group, num_samples candidates per parameter. Unlike hpbandster's BOHB (and Ray's TuneBOHB,
// which wraps it) the densities are Optuna's univariate Parzen estimators, not a multivariate
// product-kernel KDE, and there is no bandwidth_factor: the estimators choose their own
// bandwidths (docs/SEARCH.md). Reproducible: suggestion k depends on (seed, k, the values seen).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/space.hpp"
#include "search/tpe.hpp"
#include "util/error.hpp"

namespace tune::search {

// The `search_alg` keys of a `type: bohb` searcher (hpbandster's defaults).
struct BohbOptions {
  double top_n_percent = 15;           // the good group: this share of a budget's values
  double random_fraction = 1.0 / 3.0;  // suggestions drawn at random even with a model
  int64_t min_points_in_model = 0;     // values a budget needs for a model; 0: parameters + 1
  int64_t num_samples = 64;            // candidates drawn from l(x) per parameter
};

class Bohb {
 public:
  // A searcher over `space` with the scheduler's rung milestones as budgets (ascending or not);
  // fails naming a parameter TPE cannot model (grid_search) or an invalid option.
  [[nodiscard]] static Result<Bohb> create(const Space& space, BohbOptions options,
                                           std::vector<double> budgets, uint64_t seed);
  // A result of `trial` (config as it runs) at `time` with `value` (lower is better; NaN and
  // infinite values are not recorded).
  void observe(const std::string& trial, const json& config, double time, double value);
  // The config of suggestion `index`; `pending` holds running trials' configs (ignored, as
  // TPE does by default).
  [[nodiscard]] json suggest(uint64_t index, const std::vector<json>& pending);
  // The budget the next model-based suggestion would use, if any has enough values.
  [[nodiscard]] std::optional<double> model_budget() const;
  [[nodiscard]] size_t values_at(double budget) const;

  [[nodiscard]] json save() const;
  [[nodiscard]] Result<void> restore(const json& state);

 private:
  Bohb(Space space, BohbOptions options, std::vector<double> budgets, uint64_t seed)
      : space_(std::move(space)), options_(options), budgets_(std::move(budgets)), seed_(seed) {}
  struct Value {
    json config;
    double value = 0;
  };
  Space space_;
  BohbOptions options_;
  std::vector<double> budgets_;  // ascending, distinct
  uint64_t seed_;
  // budget -> trial -> its value there, in the order recorded
  std::map<double, std::vector<std::pair<std::string, Value>>> at_;
  std::map<std::string, double> top_;  // trial -> the highest budget it has a value at
};

}  // namespace tune::search
