#include "search/tpe_dims.hpp"

#include "search/space_json.hpp"

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
    case K::kLogRandInt:
    case K::kQRandInt:
    case K::kQLogRandInt:
    case K::kQRandN:
      break;
  }
  return fail("search_alg tpe cannot model ", domain_name(d.kind), " parameter '", name,
              "' yet: use randint, quniform, qloguniform or randn (or search_alg: random)");
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
      if (!std::isfinite(x)) return std::nullopt;
      return x;
    case K::kChoice:
    case K::kGrid:
    case K::kLogRandInt:  // refused by describe(), as below
    case K::kQRandInt:
    case K::kQLogRandInt:
    case K::kQRandN:
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
    case K::kChoice: {
      auto i = static_cast<size_t>(std::clamp(y, 0.0, static_cast<double>(d.values.size() - 1)));
      return d.values[i];
    }
    case K::kGrid:
    case K::kLogRandInt:
    case K::kQRandInt:
    case K::kQLogRandInt:
    case K::kQRandN:
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
    default:
      return {v, v};
  }
}

}  // namespace tune::search::tpe
