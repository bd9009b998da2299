#include "search/tpe_dims.hpp"

#include <algorithm>
#include <cmath>

namespace tune::search::tpe {

namespace {
using K = Domain::Kind;

// As random search rounds quantized values (search/space.cpp): to a multiple of q.
double quantize(double v, double q) {
  return std::round(v / q) * q;
}

// A bounded support [low, high] with the prior in its middle and sigma = its width.
parzen::Support bounded(double low, double high) {
  return {.low = low,
          .high = high,
          .bounded = true,
          .prior_mu = 0.5 * (low + high),
          .range = high - low};
}

// A parameter with one possible value.
Dim constant(json value) {
  Dim dim;
  dim.constant = std::move(value);
  return dim;
}

// The multiples of q in [lo, hi] run from first to last (the parser checked there is one).
struct Grid {
  double first, last, q;
};
Grid grid(const std::vector<double>& a) {
  return {std::ceil(a[0] / a[2]) * a[2], std::floor(a[1] / a[2]) * a[2], a[2]};
}

// Values a little outside [lo, hi] by rounding are accepted (and clamped by the caller).
bool within(double x, double lo, double hi) {
  double slack = 1e-9 * std::max({1.0, std::abs(lo), std::abs(hi)});
  return std::isfinite(x) && x >= lo - slack && x <= hi + slack;
}
}  // namespace

Result<Dim> describe(const Domain& d, const std::string& name) {
  const auto& a = d.args;
  Dim dim;
  dim.model = Model::kContinuous;
  switch (d.kind) {
    case K::kGrid:
      return fail("search_alg tpe cannot model grid_search parameter '", name,
                  "' (use choice instead)");
    case K::kChoice:
      dim.model = Model::kCategorical;
      dim.n_choices = d.values.size();
      if (dim.n_choices == 0) return fail("search_alg tpe: choice '", name, "' has no values");
      if (dim.n_choices == 1) return constant(d.values.at(0));
      return dim;
    case K::kRandN:
      if (!(a[1] > 0)) return constant(a[0]);
      dim.support = {.low = 0, .high = 0, .bounded = false, .prior_mu = a[0], .range = a[1]};
      return dim;
    case K::kRandInt:
      if (a[1] - a[0] <= 1) return constant(int64_t(a[0]));
      dim.model = Model::kQuantized;
      dim.support = bounded(a[0] - 0.5, a[1] - 0.5);
      return dim;
    case K::kUniform:
    case K::kQUniform:
      if (!(a[1] > a[0])) return constant(from_model(d, a[0]));
      if (d.kind == K::kQUniform) dim.model = Model::kQuantized;
      dim.support = bounded(a[0], a[1]);
      return dim;
    case K::kLogUniform:
    case K::kQLogUniform:
      if (!(a[1] > a[0])) return constant(from_model(d, std::log(a[0])));
      if (d.kind == K::kQLogUniform) dim.model = Model::kQuantized;
      dim.support = bounded(std::log(a[0]), std::log(a[1]));
      return dim;
    case K::kQRandN:
      if (!(a[1] > 0)) return constant(from_model(d, a[0]));
      dim.model = Model::kQuantized;
      dim.support = {.low = 0, .high = 0, .bounded = false, .prior_mu = a[0], .range = a[1]};
      return dim;
    case K::kLogRandInt:  // as Optuna's log IntDistribution: log of [lo - 1/2, (hi - 1) + 1/2]
      if (a[1] - a[0] <= 1) return constant(int64_t(a[0]));
      dim.model = Model::kQuantized;
      dim.support = bounded(std::log(a[0] - 0.5), std::log(a[1] - 0.5));
      return dim;
    case K::kQRandInt:  // as a stepped IntDistribution: the grid widened by half a step
    case K::kQLogRandInt: {
      Grid g = grid(a);
      if (g.last <= g.first) return constant(static_cast<int64_t>(g.first));
      dim.model = Model::kQuantized;
      double low = g.first - g.q / 2, high = g.last + g.q / 2;  // low > 0: first >= q
      dim.support =
          d.kind == K::kQRandInt ? bounded(low, high) : bounded(std::log(low), std::log(high));
      return dim;
    }
  }
  return fail("search_alg tpe cannot model parameter '", name, "'");
}

std::optional<double> to_model(const Domain& d, const json& v) {
  if (d.kind == K::kChoice) {
    for (size_t i = 0; i < d.values.size(); ++i)
      if (d.values[i] == v) return static_cast<double>(i);
    return std::nullopt;
  }
  if (!v.is_number()) return std::nullopt;
  double x = v.get<double>();
  const auto& a = d.args;
  switch (d.kind) {
    case K::kUniform:
      if (!within(x, a[0], a[1])) return std::nullopt;
      return std::clamp(x, a[0], a[1]);
    case K::kLogUniform:
      if (!within(x, a[0], a[1])) return std::nullopt;
      return std::log(std::clamp(x, a[0], a[1]));
    case K::kQUniform:
      if (!within(x, a[0] - a[2] / 2, a[1] + a[2] / 2)) return std::nullopt;
      return std::clamp(x, a[0], a[1]);
    case K::kQLogUniform:
      if (!within(x, std::min(a[0], quantize(a[0], a[2])), a[1] + a[2] / 2)) return std::nullopt;
      return std::log(std::clamp(x, a[0], a[1]));
    case K::kRandInt:
      if (!within(x, a[0], a[1] - 1) || x != std::round(x)) return std::nullopt;
      return x;
    case K::kRandN:
    case K::kQRandN:
      if (!std::isfinite(x)) return std::nullopt;
      return x;
    case K::kLogRandInt:
      if (!within(x, a[0], a[1] - 1) || x != std::round(x)) return std::nullopt;
      return std::log(x);
    case K::kQRandInt:
    case K::kQLogRandInt: {  // an integer near the grid (rounding may step past a bound)
      Grid g = grid(a);
      if (!within(x, g.first - g.q / 2, g.last + g.q / 2) || x != std::round(x))
        return std::nullopt;
      x = std::clamp(x, g.first, g.last);
      return d.kind == K::kQRandInt ? x : std::log(x);
    }
    case K::kChoice:
    case K::kGrid:
      break;
  }
  return std::nullopt;
}

json from_model(const Domain& d, double y) {
  const auto& a = d.args;
  switch (d.kind) {
    case K::kUniform:
      return std::clamp(y, a[0], a[1]);
    case K::kLogUniform:
      return std::clamp(std::exp(y), a[0], a[1]);
    case K::kQUniform:
      return quantize(std::clamp(y, a[0], a[1]), a[2]);
    case K::kQLogUniform:
      return quantize(std::clamp(std::exp(y), a[0], a[1]), a[2]);
    case K::kRandInt: {
      double v = std::clamp(a[0] + std::round(y - a[0]), a[0], a[1] - 1);
      return static_cast<int64_t>(v);
    }
    case K::kRandN:
      return y;
    case K::kQRandN:
      return quantize(y, a[2]);
    case K::kLogRandInt:
      return static_cast<int64_t>(std::clamp(std::round(std::exp(y)), a[0], a[1] - 1));
    case K::kQRandInt:
    case K::kQLogRandInt: {
      Grid g = grid(a);
      double v = d.kind == K::kQRandInt ? y : std::exp(y);
      return static_cast<int64_t>(std::clamp(quantize(v, g.q), g.first, g.last));
    }
    case K::kChoice: {
      auto i = static_cast<size_t>(std::clamp(y, 0.0, static_cast<double>(d.values.size() - 1)));
      return d.values[i];
    }
    case K::kGrid:
      break;
  }
  return nullptr;
}

std::pair<double, double> bucket(const Domain& d, double v) {
  const auto& a = d.args;
  switch (d.kind) {
    case K::kQUniform:
      return {std::max(v - a[2] / 2, a[0]), std::min(v + a[2] / 2, a[1])};
    case K::kQLogUniform:
      return {std::log(std::max(v - a[2] / 2, a[0])), std::log(std::min(v + a[2] / 2, a[1]))};
    case K::kRandInt:
      return {v - 0.5, v + 0.5};
    case K::kLogRandInt:
      return {std::log(v - 0.5), std::log(v + 0.5)};
    case K::kQRandInt:
    case K::kQRandN:
      return {v - a[2] / 2, v + a[2] / 2};
    case K::kQLogRandInt:
      return {std::log(v - a[2] / 2), std::log(v + a[2] / 2)};
    default:
      return {v, v};
  }
}

}  // namespace tune::search::tpe
