#include "search/bohb.hpp"

#include <algorithm>
#include <cmath>

#include "search/rng.hpp"

namespace tune::search {

namespace {

constexpr uint64_t kBohbStream = 0xb0b0'2018'0000'0001ULL;

TpeOptions tpe_options(const BohbOptions& o) {
  TpeOptions t;
  t.n_startup_trials = 0;  // the random suggestions are BOHB's own
  t.n_ei_candidates = o.num_samples;
  t.gamma = o.top_n_percent / 100.0;
  t.gamma_cap = INT64_MAX / 2;
  return t;
}

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
  return {};
}

}  // namespace

Result<Bohb> Bohb::create(const Space& space, BohbOptions options, std::vector<double> budgets,
                          uint64_t seed) {
  if (auto ok = check(options); !ok) return std::unexpected(ok.error());
  // TPE checks the options it is given and every parameter (a grid cannot be modelled).
  if (auto t = Tpe::create(space, tpe_options(options), seed); !t)
    return std::unexpected(t.error());
  std::erase_if(budgets, [](double b) { return !std::isfinite(b); });
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  if (budgets.empty())
    return std::unexpected(Error{"search_alg (bohb): the scheduler has no budgets"});
  if (options.min_points_in_model == 0)
    options.min_points_in_model = static_cast<int64_t>(space.params.size()) + 1;
  return Bohb(space, options, std::move(budgets), seed);
}

void Bohb::observe(const std::string& trial, const json& config, double time, double value) {
  if (!std::isfinite(value) || !std::isfinite(time)) return;
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

std::optional<double> Bohb::model_budget() const {
  for (auto it = at_.rbegin(); it != at_.rend(); ++it)
    if (it->second.size() >= static_cast<size_t>(options_.min_points_in_model)) return it->first;
  return std::nullopt;
}

size_t Bohb::values_at(double budget) const {
  auto it = at_.find(budget);
  return it == at_.end() ? 0 : it->second.size();
}

json Bohb::suggest(uint64_t index, const std::vector<json>& pending) {
  Rng rng(mix_seed(mix_seed(seed_, kBohbStream), index));
  auto budget = model_budget();
  if (!budget || rng.unit() < options_.random_fraction)
    return generate(space_, seed_, index).config;
  std::vector<Observation> done;
  for (const auto& [trial, v] : at_.at(*budget)) done.push_back({v.config, v.value});
  // Suggestion k of TPE draws from its stream k: the same index, the same draws.
  json st = {{"type", "tpe"}, {"version", 1}, {"seed", seed_}, {"suggested", index}};
  auto tpe = Tpe::restore(space_, tpe_options(options_), st);
  if (!tpe) return generate(space_, seed_, index).config;  // checked by create(): not reached
  return tpe->suggest(done, pending);
}

json Bohb::save() const {
  json budgets = json::array();
  for (const auto& [b, values] : at_) {
    json vs = json::array();
    for (const auto& [trial, v] : values)
      vs.push_back({{"trial", trial}, {"config", v.config}, {"value", v.value}});
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
          !v.value("value", json()).is_number())
        return bad("a value needs 'trial', 'config' and a numeric 'value'");
      values.push_back({v["trial"].get<std::string>(), {v["config"], v["value"].get<double>()}});
    }
  }
  top_.clear();
  for (const auto& [b, values] : at)
    for (const auto& [trial, v] : values) top_[trial] = std::max(top_[trial], b);
  at_ = std::move(at);
  return {};
}

}  // namespace tune::search
