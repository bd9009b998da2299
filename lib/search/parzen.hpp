// One-dimensional Parzen estimators for TPE (see search/tpe.hpp for the algorithm), and the
// small numeric pieces they need: the standard normal's cdf/ppf, Gaussian masses of intervals,
// truncated-normal sampling, and TPE's default split size and observation weights.
//
// A numeric estimator is a mixture of Gaussians, one per observation plus one "prior" component,
// each truncated to the dimension's bounds [low, high] (or untruncated for an unbounded `randn`
// dimension). Everything here works in "model space": log dimensions are already logged.
// Pure functions; the only randomness comes from the caller's search::Rng.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "search/rng.hpp"

namespace tune::search::parzen {

// Standard normal cumulative distribution Phi(z).
[[nodiscard]] double norm_cdf(double z);
// Inverse of Phi for p in (0, 1) (Acklam's approximation refined by one Halley step; ~1e-15).
[[nodiscard]] double norm_ppf(double p);
// log P(a <= Z <= b) for a standard normal Z and a <= b; finite even deep in a tail.
[[nodiscard]] double log_gauss_mass(double a, double b);
// A standard normal truncated to [a, b] at quantile u in [0, 1) (inverse-cdf sampling); a if
// the interval is empty.
[[nodiscard]] double truncnorm_at(double a, double b, double u);

// How many of n observations form the "good" group: min(ceil(gamma * n), cap).
[[nodiscard]] size_t n_below(size_t n, double gamma, size_t cap);
// Optuna's default weights for n observations, oldest first: 1 each up to 25; beyond that the
// 25 newest weigh 1 and the older ones ramp linearly from 1/n up to 1.
[[nodiscard]] std::vector<double> default_weights(size_t n);

// How the estimator's components are built; names and defaults as Optuna's TPESampler.
struct FitOptions {
  double prior_weight = 1.0;        // weight of the prior component (others weigh 1 or less)
  bool consider_magic_clip = true;  // sigma >= range / min(100, components)
  bool consider_endpoints = false;  // the outermost components also see the bounds as neighbours
  // Scores continuous values with each Gaussian's density times its sigma, as Optuna up to 3.4
  // does (its truncated-normal log pdf omits -log sigma; fixed in 3.5, optuna issue #5109). Up to
  // a constant this is the mixture with weights w_i * sigma_i: wide components count more.
  // false: the normalised mixture. Sampling always uses the weights w_i.
  bool bandwidth_weighted = true;
};

// The domain of a numeric dimension in model space, and its prior component.
struct Support {
  double low = 0;         // lower bound (ignored when !bounded)
  double high = 1;        // upper bound (ignored when !bounded)
  bool bounded = true;    // false: untruncated Gaussians (randn)
  double prior_mu = 0.5;  // prior component's mean: the middle of [low, high], or randn's mean
  double range = 1;       // prior component's sigma and the largest sigma: high - low, or sd
};

// A mixture of (truncated) Gaussians: p(x) = sum_i w_i N_[low,high](x; mu_i, sigma_i).
struct Mixture {
  Support support;
  std::vector<double> mus;
  std::vector<double> sigmas;
  std::vector<double> weights;   // normalised to sum 1
  std::vector<double> log_norm;  // log of each component's mass inside [low, high] (0 unbounded)
  // log w_i - log sigma_i - log sqrt(2 pi) - log_norm_i (without "- log sigma_i" when
  // bandwidth_weighted)
  std::vector<double> log_coef;
};

// The adaptive Parzen estimator of observations `obs` (model space, oldest first) with weights
// `w` (same length): each observation is a component centred on it whose sigma is the larger
// distance to its sorted neighbours (the prior's mean counts as a neighbour), clipped to
// [range / min(100, components), range]; the prior component N(prior_mu, range) is added last.
[[nodiscard]] Mixture fit(std::span<const double> obs, std::span<const double> w,
                          const Support& support, const FitOptions& options);
// log density of the mixture at x (see FitOptions::bandwidth_weighted).
[[nodiscard]] double log_pdf(const Mixture& m, double x);
// log of the mixture's mass on [lo, hi] (for quantized values: the interval that rounds to one).
[[nodiscard]] double log_mass(const Mixture& m, double lo, double hi);
// One draw: a component by weight, then a value from it (two rng.unit() calls).
[[nodiscard]] double sample(const Mixture& m, Rng& rng);

// A categorical estimator: each observation puts weight 1 on its choice plus prior_weight / (n+1)
// on every choice; the prior row is uniform; rows are mixed with weights `w` then prior_weight.
// Returns the resulting probability of each of the k choices.
[[nodiscard]] std::vector<double> fit_categorical(std::span<const size_t> obs,
                                                  std::span<const double> w, size_t k,
                                                  double prior_weight);
// One draw from categorical probabilities (one rng.unit() call).
[[nodiscard]] size_t sample_categorical(std::span<const double> probs, Rng& rng);

}  // namespace tune::search::parzen
