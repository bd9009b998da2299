// BOHB: Falkner, Klein, Hutter, "BOHB: Robust and Efficient Hyperparameter Optimization at
// Scale", ICML 2018 — the model half; the bandit half is the hyperband or asha scheduler the
// experiment runs with, whose rung milestones are the budgets here.
//
// Every result a trial reports is recorded at a budget: the highest budget <= its time_attr value
// that the trial has no value at yet (the rule asha uses for its rungs). A suggestion is random (a
// draw of the search space, as random search gives that index) with probability random_fraction,
// or while no budget has enough values for a model. As in hpbandster's BOHB (which Ray's TuneBOHB
// wraps), a budget with n values has a model when its good group (the best
// max(min_points_in_model, floor(top_n_percent% n)) values) and its bad group (the next
// max(min_points_in_model, floor((100 - top_n_percent)% n)), as many as there are) both hold
// more values than there are parameters; min_points_in_model is at least parameters + 1. The
// model of the largest such budget is two product-kernel KDEs (search/bohb_kde.hpp), l on the
// good group and g on the bad; num_samples candidates are drawn around the good rows and the one
// with the smallest g(x)/l(x) is suggested. A non-finite value counts as the worst (hpbandster
// counts failed runs as loss +inf); the searcher records a trial in ERROR as the worst at the
// rung it was running toward (search/searcher.cpp). Reproducible: suggestion k depends on (seed, k,
// the values seen). Differences from hpbandster: docs/SEARCH.md.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/bohb_kde.hpp"
#include "search/space.hpp"
#include "search/tpe_dims.hpp"
#include "util/error.hpp"

namespace tune::search {

// The `search_alg` keys of a `type: bohb` searcher (hpbandster's defaults).
struct BohbOptions {
  double top_n_percent = 15;           // the good group: this share of a budget's values
  double random_fraction = 1.0 / 3.0;  // suggestions drawn at random even with a model
  int64_t min_points_in_model = 0;     // values a budget needs for a model; 0: parameters + 1
  int64_t num_samples = 64;            // candidates drawn around the good rows per suggestion
  double bandwidth_factor = 3;         // candidates' sigma: this times the good KDE's bandwidth
  double min_bandwidth = 1e-3;         // the smallest bandwidth of a KDE dimension
};

class Bohb {
 public:
  // A searcher over `space` with the scheduler's rung milestones as budgets (ascending or not);
  // fails naming a parameter TPE cannot model (grid_search) or an invalid option.
  [[nodiscard]] static Result<Bohb> create(const Space& space, BohbOptions options,
                                           std::vector<double> budgets, uint64_t seed);
  // A result of `trial` (config as it runs) at `time` with `value` (lower is better; NaN and
  // infinite values are recorded as +inf, the worst). A config outside the space is not recorded.
  void observe(const std::string& trial, const json& config, double time, double value);
  // The config of suggestion `index`; `pending` holds running trials' configs (ignored, as
  // TPE does by default).
  [[nodiscard]] json suggest(uint64_t index, const std::vector<json>& pending);
  // The budget the next model-based suggestion would use, if any has enough values.
  [[nodiscard]] std::optional<double> model_budget() const;
  [[nodiscard]] size_t values_at(double budget) const;
  // The fewest values a budget needs for a model, with `params` parameters.
  [[nodiscard]] static size_t values_for_model(const BohbOptions& options, size_t params);

  [[nodiscard]] json save() const;
  [[nodiscard]] Result<void> restore(const json& state);

 private:
  Bohb(Space space, BohbOptions options, std::vector<double> budgets, uint64_t seed)
      : space_(std::move(space)), options_(options), budgets_(std::move(budgets)), seed_(seed) {}
  struct Value {
    json config;
    double value = 0;
  };
  // A config as a row of the KDEs' unit space (one value per modelled parameter), if it fits.
  [[nodiscard]] std::optional<std::vector<double>> encode(const json& config) const;
  [[nodiscard]] json decode(const std::vector<double>& row) const;
  [[nodiscard]] size_t values_for_model_here() const;
  Space space_;
  std::vector<tpe::Dim> dims_;    // per parameter of space_
  std::vector<size_t> modelled_;  // the parameters that are not constant
  std::vector<kde::Var> vars_;    // their KDE dimensions
  BohbOptions options_;
  std::vector<double> budgets_;  // ascending, distinct
  uint64_t seed_;
  // budget -> trial -> its value there, in the order recorded
  std::map<double, std::vector<std::pair<std::string, Value>>> at_;
  std::map<std::string, double> top_;  // trial -> the highest budget it has a value at
};

}  // namespace tune::search
