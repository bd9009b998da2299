#include "search/bohb.hpp"

#include <algorithm>
#include <cmath>

#include "search/rng.hpp"

namespace tune::search {

namespace {

constexpr uint64_t kBohbStream = 0xb0b0'2018'0000'0001ULL;
constexpr double kLogFloor = -73.68272297580946;  // log(1e-32): hpbandster's floor of l and g

Result<void> check(const BohbOptions& o) {
  auto bad = [](const std::string& m) { return std::unexpected(Error{"search_alg (bohb): " + m}); };
  if (!(o.top_n_percent > 0 && o.top_n_percent < 100))
    return bad("top_n_percent must be in (0, 100)");
  if (!(o.random_fraction >= 0 && o.random_fraction <= 1))
    return bad("random_fraction must be in [0, 1]");
  if (o.min_points_in_model < 0 || o.min_points_in_model > 1'000'000)
    return bad("min_points_in_model must be between 0 and 1000000");
  if (o.num_samples < 1 || o.num_samples > 100'000)
    return bad("num_samples must be between 1 and 100000");
  if (!(o.bandwidth_factor > 0 && o.bandwidth_factor <= 1000))
    return bad("bandwidth_factor must be in (0, 1000]");
  if (!(o.min_bandwidth > 0 && o.min_bandwidth <= 1)) return bad("min_bandwidth must be in (0, 1]");
  return {};
}

std::string dotted(const std::vector<std::string>& path) {
  std::string s;
  for (const auto& part : path) s += (s.empty() ? "" : ".") + part;
  return s;
}

// The sizes of a budget's good and bad groups with n values (hpbandster's split).
std::pair<size_t, size_t> split(const BohbOptions& o, size_t n) {
  auto mpm = static_cast<size_t>(o.min_points_in_model);
  auto share = [&](double pct) {
    return static_cast<size_t>(std::floor(pct * static_cast<double>(n) / 100.0 + 1e-9));
  };
  size_t good = std::min(n, std::max(mpm, share(o.top_n_percent)));
  size_t bad = std::min(n - good, std::max(mpm, share(100 - o.top_n_percent)));
  return {good, bad};
}

}  // namespace

size_t Bohb::values_for_model(const BohbOptions& options, size_t params) {
  BohbOptions o = options;
  o.min_points_in_model =
      std::max<int64_t>(o.min_points_in_model, static_cast<int64_t>(params) + 1);
  for (size_t n = 1;; ++n) {
    auto [good, bad] = split(o, n);
    if (good > params && bad > params) return n;
  }
}

Result<Bohb> Bohb::create(const Space& space, BohbOptions options, std::vector<double> budgets,
                          uint64_t seed) {
  if (auto ok = check(options); !ok) return std::unexpected(ok.error());
  std::vector<tpe::Dim> dims;
  for (const auto& p : space.params) {
    auto d = tpe::describe(p.domain, dotted(p.path));
    if (!d) {
      std::string m = d.error().message;
      if (auto at = m.find("search_alg tpe"); at != std::string::npos)
        m.replace(at, 14, "search_alg bohb");
      return std::unexpected(Error{m});
    }
    dims.push_back(*d);
  }
  std::erase_if(budgets, [](double b) { return !std::isfinite(b); });
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  if (budgets.empty())
    return std::unexpected(Error{"search_alg (bohb): the scheduler has no budgets"});
  // As hpbandster: at least the number of parameters + 1 (the default).
  options.min_points_in_model =
      std::max<int64_t>(options.min_points_in_model, static_cast<int64_t>(space.params.size()) + 1);
  Bohb b(space, options, std::move(budgets), seed);
  b.dims_ = std::move(dims);
  for (size_t i = 0; i < b.dims_.size(); ++i) {
    const auto& d = b.dims_[i];
    if (d.model == tpe::Model::kConstant) continue;
    b.modelled_.push_back(i);
    b.vars_.push_back(d.model == tpe::Model::kCategorical
                          ? kde::Var{.levels = d.n_choices, .bounded = true}
                          : kde::Var{.levels = 0, .bounded = d.support.bounded});
  }
  return b;
}

std::optional<std::vector<double>> Bohb::encode(const json& config) const {
  std::vector<double> row;
  for (size_t i : modelled_) {
    const auto& p = space_.params[i];
    const json* v = lookup(config, dotted(p.path));
    if (!v) return std::nullopt;
    auto y = tpe::to_model(p.domain, *v);
    if (!y) return std::nullopt;
    const auto& s = dims_[i].support;
    if (dims_[i].model == tpe::Model::kCategorical)
      row.push_back(*y);
    else if (s.bounded)
      row.push_back(std::clamp((*y - s.low) / (s.high - s.low), 0.0, 1.0));
    else
      row.push_back((*y - s.prior_mu) / s.range);
  }
  return row;
}

json Bohb::decode(const std::vector<double>& row) const {
  json config = space_.base;
  size_t k = 0;
  for (size_t i = 0; i < space_.params.size(); ++i) {
    const auto& p = space_.params[i];
    const auto& d = dims_[i];
    json v;
    if (d.model == tpe::Model::kConstant) {
      v = d.constant;
    } else {
      double u = row[k++];
      double y = d.model == tpe::Model::kCategorical ? std::round(u)
                 : d.support.bounded ? d.support.low + u * (d.support.high - d.support.low)
                                     : d.support.prior_mu + u * d.support.range;
      v = tpe::from_model(p.domain, y);
    }
    json* cur = &config;
    for (size_t j = 0; j + 1 < p.path.size(); ++j) {
      if (!cur->contains(p.path[j]) || !(*cur)[p.path[j]].is_object())
        (*cur)[p.path[j]] = json::object();
      cur = &(*cur)[p.path[j]];
    }
    (*cur)[p.path.back()] = std::move(v);
  }
  return config;
}

void Bohb::observe(const std::string& trial, const json& config, double time, double value) {
  if (!std::isfinite(time)) return;
  if (!std::isfinite(value)) value = INFINITY;  // a failure counts as the worst, as hpbandster
  if (!encode(config)) return;
  // The highest budget <= time, unless the trial has a value there already (then it has none
  // to give at a lower one either: times grow).
  auto above = std::upper_bound(budgets_.begin(), budgets_.end(), time);
  if (above == budgets_.begin()) return;
  double b = *std::prev(above);
  auto [top, fresh] = top_.emplace(trial, b);
  if (!fresh) {
    if (top->second >= b) return;
    top->second = b;
  }
  at_[b].push_back({trial, {config, value}});
}

size_t Bohb::values_for_model_here() const {
  return values_for_model(options_, space_.params.size());
}

std::optional<double> Bohb::model_budget() const {
  size_t need = values_for_model_here();
  for (auto it = at_.rbegin(); it != at_.rend(); ++it)
    if (it->second.size() >= need) return it->first;
  return std::nullopt;
}

size_t Bohb::values_at(double budget) const {
  auto it = at_.find(budget);
  return it == at_.end() ? 0 : it->second.size();
}

json Bohb::suggest(uint64_t index, const std::vector<json>& /*pending*/) {
  Rng rng(mix_seed(mix_seed(seed_, kBohbStream), index));
  auto budget = model_budget();
  if (!budget || rng.unit() < options_.random_fraction)
    return generate(space_, seed_, index).config;
  // The budget's values, best first (ties: the older first).
  const auto& values = at_.at(*budget);
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return values[a].second.value < values[b].second.value;
  });
  auto [n_good, n_bad] = split(options_, values.size());
  std::vector<std::vector<double>> good, bad;
  for (size_t i = 0; i < n_good + n_bad; ++i) {
    auto row = encode(values[order[i]].second.config);  // recorded values fit (observe checked)
    if (row) (i < n_good ? good : bad).push_back(std::move(*row));
  }
  if (vars_.empty() || good.empty() || bad.empty()) return generate(space_, seed_, index).config;
  kde::Kde l = kde::fit(std::move(good), vars_, options_.min_bandwidth);
  kde::Kde g = kde::fit(std::move(bad), vars_, options_.min_bandwidth);
  // hpbandster minimises max(1e-32, g(x)) / max(l(x), 1e-32) over the candidates.
  std::vector<double> best;
  double best_score = INFINITY;
  for (int64_t i = 0; i < options_.num_samples; ++i) {
    auto x = kde::sample(l, vars_, options_.bandwidth_factor, rng);
    double score = std::max(kde::log_pdf(g, vars_, x), kLogFloor) -
                   std::max(kde::log_pdf(l, vars_, x), kLogFloor);
    if (score < best_score || best.empty()) best_score = score, best = std::move(x);
  }
  return decode(best);
}

json Bohb::save() const {
  json budgets = json::array();
  for (const auto& [b, values] : at_) {
    json vs = json::array();
    for (const auto& [trial, v] : values)
      vs.push_back({{"trial", trial},
                    {"config", v.config},
                    {"value", std::isfinite(v.value) ? json(v.value) : json(nullptr)}});
    budgets.push_back({{"budget", b}, {"values", std::move(vs)}});
  }
  return {{"type", "bohb"}, {"budgets", std::move(budgets)}};
}

Result<void> Bohb::restore(const json& state) {
  auto bad = [](const std::string& what) {
    return std::unexpected(Error{"searcher state (bohb): " + what});
  };
  if (!state.is_object() || state.value("type", "") != "bohb") return bad("not a bohb state");
  const json& budgets = state.value("budgets", json());
  if (!budgets.is_array()) return bad("'budgets' is not a list");
  std::map<double, std::vector<std::pair<std::string, Value>>> at;
  for (const auto& b : budgets) {
    if (!b.is_object() || !b.value("budget", json()).is_number() ||
        !b.value("values", json()).is_array())
      return bad("a budget needs 'budget' (a number) and 'values' (a list)");
    double budget = b["budget"].get<double>();
    if (!std::binary_search(budgets_.begin(), budgets_.end(), budget))
      return bad("budget " + std::to_string(budget) + " is not one of the scheduler's");
    auto& values = at[budget];
    for (const auto& v : b["values"]) {
      if (!v.is_object() || !v.value("trial", json()).is_string() || !v.contains("config") ||
          !(v.value("value", json()).is_number() || v.value("value", json(0)).is_null()))
        return bad("a value needs 'trial', 'config' and a numeric 'value' (null: a failure)");
      if (!encode(v["config"])) return bad("a value's config does not fit the search space");
      double x = v["value"].is_null() ? INFINITY : v["value"].get<double>();
      values.push_back({v["trial"].get<std::string>(), {v["config"], x}});
    }
  }
  top_.clear();
  for (const auto& [b, values] : at)
    for (const auto& [trial, v] : values) top_[trial] = std::max(top_[trial], b);
  at_ = std::move(at);
  return {};
}

}  // namespace tune::search
