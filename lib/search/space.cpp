#include "search/space.hpp"

#include <algorithm>
#include <cmath>

#include "search/rng.hpp"
#include "util/strings.hpp"

namespace tune::search {

namespace {
// The product of the grid sizes, or nullopt if it overflows.
std::optional<uint64_t> checked_grid_size(const Space& space) {
  uint64_t n = 1;
  for (const auto& p : space.params)
    if (p.domain.kind == Domain::Kind::kGrid &&
        __builtin_mul_overflow(n, static_cast<uint64_t>(p.domain.values.size()), &n))
      return std::nullopt;
  return n;
}

uint64_t grid_size(const Space& space) {
  return checked_grid_size(space).value_or(UINT64_MAX);
}

json* slot(json& config, const std::vector<std::string>& path) {
  json* cur = &config;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!cur->contains(path[i]) || !(*cur)[path[i]].is_object()) (*cur)[path[i]] = json::object();
    cur = &(*cur)[path[i]];
  }
  return &(*cur)[path.back()];
}

double quantize(double v, double q) {
  return std::round(v / q) * q;
}

// A log-uniform draw in [lo, hi).
double log_draw(double lo, double hi, Rng& rng) {
  return std::exp(std::log(lo) + rng.unit() * (std::log(hi) - std::log(lo)));
}

// Rounds integer `v` to a multiple of `q`, kept inside [lo, hi] (the parser checked that one
// multiple lies there).
int64_t quantize_int(int64_t v, int64_t lo, int64_t hi, int64_t q) {
  auto r = static_cast<int64_t>(std::llround(static_cast<double>(v) / static_cast<double>(q))) * q;
  while (r < lo) r += q;
  while (r > hi) r -= q;
  return r;
}

}  // namespace

json sample(const Domain& d, Rng& rng) {
  using K = Domain::Kind;
  const auto& a = d.args;
  switch (d.kind) {
    case K::kUniform:
      return a[0] + rng.unit() * (a[1] - a[0]);
    case K::kLogUniform:
      return std::exp(std::log(a[0]) + rng.unit() * (std::log(a[1]) - std::log(a[0])));
    case K::kQUniform:
      return quantize(a[0] + rng.unit() * (a[1] - a[0]), a[2]);
    case K::kQLogUniform:
      return quantize(std::exp(std::log(a[0]) + rng.unit() * (std::log(a[1]) - std::log(a[0]))),
                      a[2]);
    case K::kRandInt: {
      auto lo = static_cast<int64_t>(a[0]);
      auto hi = static_cast<int64_t>(a[1]);
      return lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo)));
    }
    case K::kRandN:
      return a[0] + a[1] * rng.normal();
    case K::kLogRandInt: {  // as Ray: the floor of a log-uniform draw, hi excluded
      auto v = static_cast<int64_t>(std::floor(log_draw(a[0], a[1], rng)));
      return std::clamp(v, static_cast<int64_t>(a[0]), static_cast<int64_t>(a[1]) - 1);
    }
    case K::kQRandInt: {  // as Ray: an integer of [lo, hi], rounded to q
      auto lo = static_cast<int64_t>(a[0]), hi = static_cast<int64_t>(a[1]);
      auto v = lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo) + 1));
      return quantize_int(v, lo, hi, static_cast<int64_t>(a[2]));
    }
    case K::kQLogRandInt: {  // as Ray: log-uniform over [lo, hi + 1), floored, rounded to q
      auto lo = static_cast<int64_t>(a[0]), hi = static_cast<int64_t>(a[1]);
      auto v = std::clamp(static_cast<int64_t>(std::floor(log_draw(a[0], a[1] + 1, rng))), lo, hi);
      return quantize_int(v, lo, hi, static_cast<int64_t>(a[2]));
    }
    case K::kQRandN:
      return quantize(a[0] + a[1] * rng.normal(), a[2]);
    case K::kChoice:
      return d.values[rng.below(d.values.size())];
    case K::kGrid:
      break;
  }
  return nullptr;
}

std::optional<uint64_t> checked_trial_count(const Space& space, uint64_t num_samples) {
  auto grid = checked_grid_size(space);
  uint64_t n = 0;
  if (!grid || __builtin_mul_overflow(num_samples, *grid, &n)) return std::nullopt;
  return n;
}

uint64_t trial_count(const Space& space, uint64_t num_samples) {
  return checked_trial_count(space, num_samples).value_or(UINT64_MAX);
}

TrialConfig generate(const Space& space, uint64_t seed, uint64_t index) {
  TrialConfig t;
  t.index = index;
  t.config = space.base;
  Rng rng(mix_seed(seed, index));
  // Grid coordinates: the last grid parameter varies fastest.
  uint64_t g = index % grid_size(space);
  std::vector<uint64_t> coord(space.params.size(), 0);
  for (size_t i = space.params.size(); i-- > 0;) {
    const auto& d = space.params[i].domain;
    if (d.kind != Domain::Kind::kGrid) continue;
    coord[i] = g % d.values.size();
    g /= d.values.size();
  }
  for (size_t i = 0; i < space.params.size(); ++i) {
    const auto& p = space.params[i];
    json v =
        p.domain.kind == Domain::Kind::kGrid ? p.domain.values[coord[i]] : sample(p.domain, rng);
    *slot(t.config, p.path) = v;
    std::string dotted;
    for (const auto& part : p.path) dotted += (dotted.empty() ? "" : ".") + part;
    t.varying.emplace_back(dotted, std::move(v));
  }
  return t;
}

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return util::format_double(v.get<double>());
  return v.dump();
}

const json* lookup(const json& config, std::string_view dotted) {
  const json* cur = &config;
  size_t start = 0;
  while (true) {
    size_t dot = dotted.find('.', start);
    std::string key(
        dotted.substr(start, dot == std::string_view::npos ? dotted.npos : dot - start));
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (dot == std::string_view::npos) return cur;
    start = dot + 1;
  }
}

}  // namespace tune::search
