#include "search/tpe.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "search/parzen.hpp"
#include "search/rng.hpp"
#include "search/tpe_dims.hpp"

namespace tune::search {

namespace {
// Seeds the model-based suggestions' streams apart from random search's (which use the seed).
constexpr uint64_t kTpeStream = 0x7470655f6d6f6465ull;  // "tpe_mode"

std::string dotted(const std::vector<std::string>& path) {
  std::string s;
  for (const auto& part : path) s += (s.empty() ? "" : ".") + part;
  return s;
}

// The value at `path` in a config, or nullptr.
const json* find(const json& config, const std::vector<std::string>& path) {
  const json* cur = &config;
  for (const auto& key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

// Sets the value at `path`, making the objects on the way.
void set_at(json& config, const std::vector<std::string>& path, json value) {
  json* cur = &config;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    if (!cur->contains(path[i]) || !(*cur)[path[i]].is_object()) (*cur)[path[i]] = json::object();
    cur = &(*cur)[path[i]];
  }
  (*cur)[path.back()] = std::move(value);
}

Result<void> check(const TpeOptions& o) {
  if (o.n_startup_trials < 0)
    return fail("search_alg.n_startup_trials must be >= 0, got ",
                std::to_string(o.n_startup_trials));
  if (o.n_ei_candidates < 1 || o.n_ei_candidates > 1'000'000)
    return fail("search_alg.n_ei_candidates must be in [1, 1000000], got ",
                std::to_string(o.n_ei_candidates));
  if (!(o.gamma > 0 && o.gamma <= 1))
    return fail("search_alg.gamma must be in (0, 1], got ", std::to_string(o.gamma));
  if (o.gamma_cap < 1)
    return fail("search_alg.gamma_cap must be >= 1, got ", std::to_string(o.gamma_cap));
  if (!(o.prior_weight > 0 && std::isfinite(o.prior_weight)))
    return fail("search_alg.prior_weight must be > 0, got ", std::to_string(o.prior_weight));
  return {};
}

// Indices of the good (below) and bad (above) groups, each oldest first. The observations with
// a finite value sort by value, ties by age, and the n_below(count) first are good; the rest and
// every failure (ERROR, NaN or infinite) are bad.
std::pair<std::vector<size_t>, std::vector<size_t>> split(const std::vector<Observation>& done,
                                                          const TpeOptions& o) {
  std::vector<std::pair<double, size_t>> by_value;  // ties in index order
  std::vector<size_t> above;
  for (size_t i = 0; i < done.size(); ++i) {
    if (!done[i].failed && std::isfinite(done[i].value))
      by_value.emplace_back(done[i].value, i);
    else
      above.push_back(i);
  }
  std::sort(by_value.begin(), by_value.end());
  size_t n_good = parzen::n_below(by_value.size(), o.gamma, static_cast<size_t>(o.gamma_cap));
  std::vector<size_t> below;
  for (size_t k = 0; k < by_value.size(); ++k)
    (k < n_good ? below : above).push_back(by_value[k].second);
  std::sort(below.begin(), below.end());
  std::sort(above.begin(), above.end());
  return {below, above};
}

// The model-space values of parameter `p` in the given configs (those that have one).
std::vector<double> column(const Param& p, const std::vector<const json*>& configs) {
  std::vector<double> out;
  out.reserve(configs.size());
  for (const json* c : configs)
    if (const json* v = find(*c, p.path))
      if (auto y = tpe::to_model(p.domain, *v)) out.push_back(*y);
  return out;
}

struct Groups {
  std::vector<const json*> below, above;
};

// One parameter's suggestion: the candidate drawn from l with the largest log l - log g.
json suggest_numeric(const Param& p, const tpe::Dim& dim, const Groups& groups, const TpeOptions& o,
                     Rng& rng) {
  parzen::FitOptions fo{o.prior_weight, o.consider_magic_clip, o.consider_endpoints,
                        o.bandwidth_weighted};
  auto below = column(p, groups.below), above = column(p, groups.above);
  auto l = parzen::fit(below, parzen::default_weights(below.size()), dim.support, fo);
  auto g = parzen::fit(above, parzen::default_weights(above.size()), dim.support, fo);
  double best_score = -std::numeric_limits<double>::infinity();
  json best;
  for (int64_t c = 0; c < o.n_ei_candidates; ++c) {
    double y = parzen::sample(l, rng);
    json v = tpe::from_model(p.domain, y);
    double score;
    if (dim.model == tpe::Model::kQuantized) {
      auto [lo, hi] = tpe::bucket(p.domain, v.get<double>());
      score = parzen::log_mass(l, lo, hi) - parzen::log_mass(g, lo, hi);
    } else {
      score = parzen::log_pdf(l, y) - parzen::log_pdf(g, y);
    }
    // An empty rounding interval (a value exactly on a bound) scores -inf - -inf: never best.
    if (std::isnan(score)) score = -std::numeric_limits<double>::infinity();
    if (best.is_null() || score > best_score) best_score = score, best = std::move(v);
  }
  return best;
}

json suggest_categorical(const Param& p, const tpe::Dim& dim, const Groups& groups,
                         const TpeOptions& o, Rng& rng) {
  auto as_index = [](const std::vector<double>& v) {
    return std::vector<size_t>(v.begin(), v.end());
  };
  auto below = as_index(column(p, groups.below)), above = as_index(column(p, groups.above));
  auto l = parzen::fit_categorical(below, parzen::default_weights(below.size()), dim.n_choices,
                                   o.prior_weight);
  auto g = parzen::fit_categorical(above, parzen::default_weights(above.size()), dim.n_choices,
                                   o.prior_weight);
  double best_score = -std::numeric_limits<double>::infinity();
  size_t best = dim.n_choices;
  for (int64_t c = 0; c < o.n_ei_candidates; ++c) {
    size_t k = parzen::sample_categorical(l, rng);
    double score = std::log(l[k]) - std::log(g[k]);
    if (best == dim.n_choices || score > best_score) best_score = score, best = k;
  }
  return p.domain.values[best];
}
}  // namespace

Result<Tpe> Tpe::create(const Space& space, TpeOptions options, uint64_t seed) {
  if (auto ok = check(options); !ok) return std::unexpected(ok.error());
  for (const auto& p : space.params)
    if (auto dim = tpe::describe(p.domain, dotted(p.path)); !dim)
      return std::unexpected(dim.error());
  return Tpe(space, options, seed);
}

json Tpe::suggest(const std::vector<Observation>& done, const std::vector<json>& pending) {
  uint64_t k = suggested_++;
  if (done.size() < static_cast<uint64_t>(options_.n_startup_trials))
    return generate(space_, seed_, k).config;
  auto [below, above] = split(done, options_);
  Groups groups;
  for (size_t i : below) groups.below.push_back(&done[i].config);
  for (size_t i : above) groups.above.push_back(&done[i].config);
  if (options_.constant_liar)
    for (const json& c : pending) groups.above.push_back(&c);
  Rng rng(mix_seed(mix_seed(seed_, kTpeStream), k));
  json config = space_.base;
  for (const auto& p : space_.params) {
    auto dim = tpe::describe(p.domain, dotted(p.path));  // checked by create()
    json v;
    if (dim->model == tpe::Model::kConstant)
      v = dim->constant;
    else if (dim->model == tpe::Model::kCategorical)
      v = suggest_categorical(p, *dim, groups, options_, rng);
    else
      v = suggest_numeric(p, *dim, groups, options_, rng);
    set_at(config, p.path, std::move(v));
  }
  return config;
}

json Tpe::save() const {
  return {{"type", "tpe"}, {"version", 1}, {"seed", seed_}, {"suggested", suggested_}};
}

Result<Tpe> Tpe::restore(const Space& space, TpeOptions options, const json& state) {
  auto field = [&](const char* key) -> const json* {
    auto it = state.find(key);
    return it == state.end() ? nullptr : &*it;
  };
  if (!state.is_object()) return fail("tpe state: expected an object, got ", state.type_name());
  const json* type = field("type");
  if (!type || *type != "tpe") return fail("tpe state: 'type' is not \"tpe\"");
  const json* version = field("version");
  if (!version || *version != 1) return fail("tpe state: unsupported 'version' (expected 1)");
  const json* seed = field("seed");
  const json* suggested = field("suggested");
  if (!seed || !seed->is_number_unsigned())
    return fail("tpe state: 'seed' must be a non-negative integer");
  if (!suggested || !suggested->is_number_unsigned())
    return fail("tpe state: 'suggested' must be a non-negative integer");
  auto tpe = create(space, options, seed->get<uint64_t>());
  if (!tpe) return tpe;
  tpe->suggested_ = suggested->get<uint64_t>();
  return tpe;
}

}  // namespace tune::search
