// BOHB's density model (Falkner, Klein, Hutter 2018, section 3.1): a multivariate kernel density
// estimator with one kernel per dimension multiplied together (a product kernel), as hpbandster
// fits it with statsmodels' KDEMultivariate: Gaussian kernels for numeric dimensions (in [0, 1]:
// the dimension's model-space range scaled to the unit interval, or standardised for an
// unbounded randn), Aitchison-Aitken kernels for categorical ones, each dimension's bandwidth by
// the normal reference rule 1.06 * std * n^(-1 / (d + 4)), kept >= min_bandwidth. Candidates
// are drawn around a random row of the good model with bandwidth_factor times its bandwidths.
// Pure functions; the only randomness comes from the caller's search::Rng.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "search/rng.hpp"

namespace tune::search::kde {

// One dimension of the unit space.
struct Var {
  size_t levels = 0;    // categorical: the number of choices (values 0 .. levels - 1); 0: numeric
  bool bounded = true;  // numeric: in [0, 1] (false: a standardised unbounded value)
};

// A fitted product-kernel KDE: its rows and one bandwidth per dimension.
struct Kde {
  std::vector<std::vector<double>> rows;
  std::vector<double> bw;
};

// Fits rows (each of vars.size() values; at least one row). A numeric bandwidth is the normal
// reference rule's, at least min_bandwidth; a categorical one is the same rule on the choice
// indices (statsmodels' normal_reference applies it to every kind), kept within
// [min_bandwidth, (levels - 1) / levels] (at the upper end the kernel is uniform).
[[nodiscard]] Kde fit(std::vector<std::vector<double>> rows, std::span<const Var> vars,
                      double min_bandwidth);

// log of the density at x: the mean over rows of the product of the dimensions' kernels
// (Gaussian N(x; row, bw) for numeric dimensions, untruncated as in statsmodels; 1 - bw on the
// row's choice and bw / (levels - 1) on each other choice for categorical ones).
[[nodiscard]] double log_pdf(const Kde& k, std::span<const Var> vars, std::span<const double> x);

// One candidate: a row picked uniformly, then each numeric value drawn from a normal around the
// row's with sigma bandwidth_factor * bw (truncated to [0, 1] when bounded), each categorical
// one kept with probability 1 - bw, else a uniformly drawn choice.
[[nodiscard]] std::vector<double> sample(const Kde& k, std::span<const Var> vars,
                                         double bandwidth_factor, Rng& rng);

}  // namespace tune::search::kde
