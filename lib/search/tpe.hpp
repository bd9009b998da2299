// Tree-structured Parzen Estimator (TPE): a model-based searcher that suggests the next config
// from the finished trials. Bergstra, Bardenet, Bengio, Kegl, "Algorithms for Hyper-Parameter
// Optimization", NeurIPS 2011, section 4; defaults and details as Optuna's TPESampler (3.x).
//
// The paper models p(x | y) instead of p(y | x). Given the observations {(x, y)} so far (y: the
// loss, lower is better), it picks a threshold y* such that a fraction gamma of them lie below:
//   p(x | y) = l(x) if y < y*,   g(x) if y >= y*,
// l(x) the density of the "good" configs, g(x) that of the rest. Expected improvement over y*
// is then EI_y*(x) proportional to (gamma + g(x) / l(x) * (1 - gamma))^-1, so maximising EI is
// maximising l(x) / g(x). TPE draws candidates from l(x) and keeps the one with the largest
// log l(x) - log g(x).
//
// Here, as in Optuna:
// - the first n_startup_trials suggestions (until that many trials have finished, failures
//   included) are random, drawn from the space's own distributions (the same configs `random`
//   search gives that seed);
// - with n finished trials of which n_ok have a finite value, the n_below = min(ceil(gamma *
//   n_ok), gamma_cap) best form the good group (ties keep the older first); the others and every
//   failure (ERROR, NaN or infinite: Optuna leaves such trials out) form the bad group;
// - l and g are one-dimensional adaptive Parzen estimators, one per parameter (univariate TPE:
//   dimensions are independent), see search/parzen.hpp; each observation is weighted by Optuna's
//   default_weights within its group (older ones weigh less past 25), and a prior component
//   (the middle of the range, sigma = the range) weighs prior_weight;
// - for each parameter, n_ei_candidates values are drawn from l and the best ratio is kept.
// Parameter kinds: uniform (plain), loguniform (modelled on log x), quniform / qloguniform (a
// continuous value in [lo, hi], or its log, rounded to a multiple of q, as random search does;
// densities are the mass of the interval that rounds to the value), randint [lo, hi) (integers,
// each value the mass of [v - 0.5, v + 0.5]), lograndint (the same on log v), qrandint /
// qlograndint (multiples of q, each the mass of [v - q/2, v + q/2], or its log), randn [mean, sd]
// (untruncated Gaussians, the prior N(mean, sd), sd also the largest bandwidth), qrandn (randn's
// model, rounded to a multiple of q), choice (categorical, Optuna's estimator with a uniform
// prior). grid_search cannot be modelled: create() fails naming the parameter.
// Pending (running) trials are ignored by default, as Optuna does; with constant_liar they join
// the bad group (as if their value were the worst), so concurrent suggestions spread out.
// Reproducible: suggestion k (0-based, counted since the start of the experiment) depends only
// on (seed, k, done, pending); the saved state is that counter.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "search/space.hpp"
#include "util/error.hpp"

namespace tune::search {

// TPE's options (the `search_alg` keys of a `type: tpe` searcher), Optuna's defaults.
struct TpeOptions {
  int64_t n_startup_trials = 10;    // random suggestions until this many trials have finished
  int64_t n_ei_candidates = 24;     // candidates drawn from l(x) per parameter
  double gamma = 0.1;               // fraction of the finished trials in the good group ...
  int64_t gamma_cap = 25;           // ... but at most this many
  double prior_weight = 1.0;        // weight of the prior component of each estimator
  bool consider_magic_clip = true;  // bandwidths >= range / min(100, components)
  bool consider_endpoints = false;  // bounds count as neighbours for the outermost components
  bool constant_liar = false;       // running trials join the bad group with the worst value
  bool bandwidth_weighted = true;   // Optuna <= 3.4's density (see parzen::FitOptions)
};

// A finished trial: its config, and its value oriented so that lower is better. A failure (a
// trial that ended in ERROR, or whose value is NaN or infinite) is never in the good group: it
// joins the bad group, so the model steers away from where trials crash or diverge.
struct Observation {
  json config;
  double value = 0;
  bool failed = false;  // it ended in ERROR (value unused)
};

// The TPE searcher of one experiment.
class Tpe {
 public:
  // A searcher over `space`; fails naming a grid_search parameter or an invalid option.
  [[nodiscard]] static Result<Tpe> create(const Space& space, TpeOptions options, uint64_t seed);
  // The next config (the space's constants with every parameter set). `done` holds the finished
  // trials, oldest first; `pending` the configs of running trials. Values of a config that are
  // missing or outside their domain are left out of that parameter's model.
  [[nodiscard]] json suggest(const std::vector<Observation>& done,
                             const std::vector<json>& pending);
  // The searcher's state: {"type": "tpe", "version": 1, "seed": ..., "suggested": ...}.
  [[nodiscard]] json save() const;
  // A searcher continuing from save()'s output; fails on a malformed state.
  [[nodiscard]] static Result<Tpe> restore(const Space& space, TpeOptions options,
                                           const json& state);
  // Number of suggestions made so far.
  [[nodiscard]] uint64_t suggested() const { return suggested_; }

 private:
  // Use create(): it checks the space and the options.
  Tpe(Space space, TpeOptions options, uint64_t seed)
      : space_(std::move(space)), options_(options), seed_(seed) {}
  Space space_;             // the parameters and the constants around them
  TpeOptions options_;      // as given (checked)
  uint64_t seed_;           // the experiment's seed
  uint64_t suggested_ = 0;  // suggestions made: the index of the next one's random stream
};

}  // namespace tune::search
