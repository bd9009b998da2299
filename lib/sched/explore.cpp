// PBT's explore step (sched/pbt.hpp): how one mutation changes a config value.
//
// For each key of hyperparam_mutations, in the order written: with probability
// resample_probability (or when the key is absent, or not a value the distribution could give)
// a fresh draw; otherwise a list value moves one place up or down (staying put at either end)
// and a number is multiplied by a factor drawn from perturbation_factors, then kept within the
// distribution's bounds — an integer is rounded and moves by at least one step, a quantized
// value stays a multiple of q.
#include <algorithm>
#include <cmath>

#include "sched/pbt.hpp"

namespace tune::sched {

namespace {

using Kind = search::Domain::Kind;

bool is_int_kind(Kind k) {
  return k == Kind::kRandInt || k == Kind::kLogRandInt || k == Kind::kQRandInt ||
         k == Kind::kQLogRandInt;
}

// The step a perturbed value is a multiple of (0: none).
double step_of(const search::Domain& d) {
  switch (d.kind) {
    case Kind::kQUniform:
    case Kind::kQLogUniform:
    case Kind::kQRandInt:
    case Kind::kQLogRandInt:
    case Kind::kQRandN:
      return d.args[2];
    case Kind::kRandInt:
    case Kind::kLogRandInt:
      return 1;
    default:
      return 0;
  }
}

// The closed range a value of `d` lies in (infinite for randn).
std::pair<double, double> bounds_of(const search::Domain& d) {
  switch (d.kind) {
    case Kind::kRandN:
    case Kind::kQRandN:
      return {-INFINITY, INFINITY};
    case Kind::kRandInt:
    case Kind::kLogRandInt:
      return {d.args[0], d.args[1] - 1};  // hi excluded
    default:
      return {d.args[0], d.args[1]};
  }
}

// `old` multiplied by `factor`, within the bounds, on the domain's step.
double perturb(const search::Domain& d, double old, double factor, bool integer) {
  double v = old * factor;
  double step = step_of(d);
  if (integer && step == 0) step = 1;
  auto [lo, hi] = bounds_of(d);
  if (step > 0) {
    double r = std::round(v / step) * step;
    // Moves by at least one step in the factor's direction (1 · 1.2 rounds back to 1).
    if (r == old && factor > 1) r = old + step;
    if (r == old && factor < 1 && factor >= 0) r = old - step;
    if (r == old && factor < 0) r = -old;
    v = r;
    // The bounds, moved onto the step's grid.
    if (std::isfinite(lo)) lo = std::ceil(lo / step) * step;
    if (std::isfinite(hi)) hi = std::floor(hi / step) * step;
  }
  return std::clamp(v, lo, hi);
}

json mutate_list(const json& values, const json* old, double resample_p, search::Rng& rng) {
  double u = rng.unit();
  auto at = old ? std::find(values.begin(), values.end(), *old) : values.end();
  if (u < resample_p || at == values.end()) return values[rng.below(values.size())];
  auto i = static_cast<int64_t>(at - values.begin());
  i += rng.below(2) == 0 ? -1 : 1;
  i = std::clamp<int64_t>(i, 0, static_cast<int64_t>(values.size()) - 1);
  return values[static_cast<size_t>(i)];
}

json mutate_number(const spec::SchedulerSpec& spec, const search::Domain& d, const json* old,
                   search::Rng& rng) {
  double u = rng.unit();
  if (u < spec.resample_probability || !old || !old->is_number()) return search::sample(d, rng);
  const auto& f = spec.perturbation_factors;
  double factor = f[rng.below(f.size())];
  bool integer = old->is_number_integer() || is_int_kind(d.kind);
  double v = perturb(d, old->get<double>(), factor, integer);
  if (integer) return static_cast<int64_t>(std::llround(v));
  return v;
}

json* slot(json& config, const std::vector<std::string>& path) {
  json* cur = &config;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!cur->contains(path[i]) || !(*cur)[path[i]].is_object()) (*cur)[path[i]] = json::object();
    cur = &(*cur)[path[i]];
  }
  return &(*cur)[path.back()];
}

const json* find(const json& config, const std::vector<std::string>& path) {
  const json* cur = &config;
  for (const auto& k : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

}  // namespace

json explore(const spec::SchedulerSpec& spec, const json& config, search::Rng& rng) {
  json out = config.is_object() ? config : json::object();
  for (const auto& m : spec.mutations) {
    const json* old = find(out, m.path);
    json v = m.domain.kind == Kind::kChoice
                 ? mutate_list(m.domain.values, old, spec.resample_probability, rng)
                 : mutate_number(spec, m.domain, old, rng);
    *slot(out, m.path) = std::move(v);
  }
  return out;
}

}  // namespace tune::sched
