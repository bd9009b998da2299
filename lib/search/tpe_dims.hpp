// How TPE models each kind of parameter: the map between config values and "model space" (the
// coordinate the Parzen estimators see), and the interval of model space a quantized value
// covers. Pure functions over search::Domain; used by search/tpe.cpp.
#pragma once

#include <optional>
#include <utility>

#include "search/parzen.hpp"
#include "search/space.hpp"
#include "util/error.hpp"

namespace tune::search::tpe {

// How a parameter is modelled.
enum class Model {
  kConstant,     // one possible value (uniform [a, a], randn sd 0, one choice ...)
  kContinuous,   // uniform, loguniform, randn: density of the value itself
  kQuantized,    // the q and int kinds: mass of the interval that rounds to the value
  kCategorical,  // choice
};

// A parameter as TPE models it.
struct Dim {
  Model model = Model::kConstant;
  parzen::Support support;  // numeric models: bounds and prior in model space
  size_t n_choices = 0;     // categorical: number of choices
  json constant;            // kConstant: the value
};

// The model of domain `d` of the parameter named `name`; fails for grid_search. Integer kinds
// are modelled as Optuna models IntDistribution: a continuous value on the range widened by half
// a step at each end (in log space for lograndint and qlograndint), rounded to the grid: integers
// for randint/lograndint, multiples of q in [lo, hi] for qrandint/qlograndint (as random search
// draws them). qrandn: randn's unbounded model, rounded to a multiple of q.
[[nodiscard]] Result<Dim> describe(const Domain& d, const std::string& name);
// A config value in model space (the choice's index for choice); nullopt if the value is not a
// value of the domain (wrong type, not finite, out of range, not an integer for an int kind).
[[nodiscard]] std::optional<double> to_model(const Domain& d, const json& v);
// The config value for model-space coordinate y: clamped to the domain, rounded for quantized
// kinds (to a multiple of q, as random search does; to an integer for randint, lograndint).
[[nodiscard]] json from_model(const Domain& d, double y);
// For a quantized kind: the model-space interval of values that from_model() maps to `v`.
[[nodiscard]] std::pair<double, double> bucket(const Domain& d, double v);

}  // namespace tune::search::tpe
