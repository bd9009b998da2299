#include "search/searcher.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "search/external.hpp"
#include "search/space_json.hpp"

namespace tune::search {

namespace {

// The grid × samples expansion: trial i is generate(space, seed, i).
class BasicVariant final : public Searcher {
 public:
  BasicVariant(Space space, uint64_t total, uint64_t seed)
      : space_(std::move(space)), total_(total), seed_(seed) {}
  Suggestion suggest(uint64_t index) override {
    if (index >= total_) return {Suggestion::Kind::kFinished, {}, {}};
    auto c = generate(space_, seed_, index);
    return {Suggestion::Kind::kConfig, std::move(c.config), std::move(c.varying)};
  }
  void on_complete(const Completion&) override {}
  json save() const override { return nullptr; }
  Result<void> restore(const json&) override { return {}; }

 private:
  Space space_;
  uint64_t total_, seed_;
};

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& p : path) out += (out.empty() ? "" : ".") + p;
  return out;
}

// TPE over the finished trials, in the order they finished. A trial in ERROR is a failure (it
// joins the bad group); one that ended without a numeric metric is not an observation.
class TpeSearcher final : public Searcher {
 public:
  TpeSearcher(Tpe tpe, Space space, uint64_t total)
      : tpe_(std::move(tpe)), space_(std::move(space)), total_(total) {}
  Suggestion suggest(uint64_t index) override {
    if (index >= total_) return {Suggestion::Kind::kFinished, {}, {}};
    std::vector<json> pending;
    for (const auto& [id, cfg] : pending_) pending.push_back(cfg);
    if (tpe_.suggested() != index) {
      // Suggestion k draws from its own stream k: after a resume whose state predates trials
      // the journal kept, the counter is set to the trial's index.
      json st = tpe_.save();
      st["suggested"] = index;
      if (auto t = Tpe::restore(space_, options_, st)) tpe_ = std::move(*t);
    }
    json config = tpe_.suggest(done_, pending);
    Suggestion s{Suggestion::Kind::kConfig, config, {}};
    for (const auto& p : space_.params) {
      std::string key = dotted(p.path);
      if (const json* v = lookup(config, key)) s.varying.emplace_back(key, *v);
    }
    char id[32];
    std::snprintf(id, sizeof id, "%05llu", static_cast<unsigned long long>(index));
    pending_[id] = config;
    return s;
  }
  void on_complete(const Completion& c) override {
    pending_.erase(c.trial);
    if (c.error)
      done_.push_back({c.config, 0, true});
    else if (c.value)
      done_.push_back({c.config, *c.value});
  }
  json save() const override {
    json done = json::array();
    for (const auto& o : done_)
      done.push_back(o.failed ? json{{"config", o.config}, {"error", true}}
                              : json{{"config", o.config}, {"value", o.value}});
    return {{"type", "tpe"}, {"tpe", tpe_.save()}, {"done", std::move(done)}};
  }
  Result<void> restore(const json& state) override {
    auto bad = [](const std::string& what) {
      return std::unexpected(Error{"searcher state (tpe): " + what});
    };
    if (!state.is_object() || state.value("type", "") != "tpe") return bad("not a tpe state");
    auto t = Tpe::restore(space_, options_of(), state.value("tpe", json()));
    if (!t) return std::unexpected(t.error());
    const json& done = state.value("done", json());
    if (!done.is_array()) return bad("'done' is not a list");
    std::vector<Observation> obs;
    for (const auto& o : done) {
      if (!o.is_object() || !o.contains("config")) return bad("an observation needs a config");
      if (o.contains("error")) {
        if (o["error"] != true) return bad("an observation's 'error' must be true");
        obs.push_back({o["config"], 0, true});
      } else if (o.value("value", json()).is_number()) {
        obs.push_back({o["config"], o["value"].get<double>()});
      } else {
        return bad("an observation needs a numeric value or \"error\": true");
      }
    }
    tpe_ = std::move(*t);
    done_ = std::move(obs);
    pending_.clear();
    return {};
  }
  void set_options(TpeOptions o) { options_ = o; }

 private:
  TpeOptions options_of() const { return options_; }
  Tpe tpe_;
  Space space_;
  uint64_t total_;
  TpeOptions options_;
  std::vector<Observation> done_;
  std::map<std::string, json> pending_;  // trial -> config, while it runs
};

// BOHB (search/bohb.hpp) over every result of the trials it suggested, at the scheduler's rungs.
class BohbSearcher final : public Searcher {
 public:
  BohbSearcher(Bohb bohb, Space space, uint64_t total, BohbTarget target)
      : bohb_(std::move(bohb)),
        space_(std::move(space)),
        total_(total),
        target_(std::move(target)) {}
  Suggestion suggest(uint64_t index) override {
    if (index >= total_) return {Suggestion::Kind::kFinished, {}, {}};
    json config = bohb_.suggest(index, {});
    Suggestion s{Suggestion::Kind::kConfig, config, {}};
    for (const auto& p : space_.params) {
      std::string key = dotted(p.path);
      if (const json* v = lookup(config, key)) s.varying.emplace_back(key, *v);
    }
    char id[32];
    std::snprintf(id, sizeof id, "%05llu", static_cast<unsigned long long>(index));
    configs_[id] = std::move(config);
    return s;
  }
  void on_result(const std::string& trial, const json& result) override {
    if (auto c = configs_.find(trial); c != configs_.end()) observe(trial, c->second, result);
  }
  void on_complete(const Completion& c) override {
    observe(c.trial, c.config, c.result);  // a point's last result counts too
    if (c.error) fail_at_next_rung(c);
    configs_.erase(c.trial);
  }
  json save() const override { return bohb_.save(); }
  Result<void> restore(const json& state) override { return bohb_.restore(state); }
  Result<void> start(const std::vector<KnownTrial>& known) override {
    for (const auto& k : known)
      if (!k.finished && k.suggested) configs_[k.id] = k.config;  // running when it stopped
    return {};
  }

 private:
  void observe(const std::string& trial, const json& config, const json& result) {
    if (!result.is_object()) return;
    auto tm = result.find(target_.time_attr);
    auto mv = result.find(target_.metric);
    if (tm == result.end() || mv == result.end() || !tm->is_number() || !mv->is_number()) return;
    double v = mv->get<double>();
    bohb_.observe(trial, config, tm->get<double>(), target_.maximize ? -v : v);
  }
  // A trial in ERROR: the worst value at the first rung above its last result (the budget it
  // was running toward; hpbandster records a crashed run as loss +inf at its budget). One that
  // reached the top rung keeps the values it has.
  void fail_at_next_rung(const Completion& c) {
    double reached = 0;
    if (c.result.is_object())
      if (auto tm = c.result.find(target_.time_attr); tm != c.result.end() && tm->is_number())
        reached = tm->get<double>();
    std::vector<double> rungs = target_.budgets;
    std::sort(rungs.begin(), rungs.end());
    auto next = std::upper_bound(rungs.begin(), rungs.end(), reached);
    if (next != rungs.end())
      bohb_.observe(c.trial, c.config, *next, std::numeric_limits<double>::infinity());
  }
  Bohb bohb_;
  Space space_;
  uint64_t total_;
  BohbTarget target_;
  std::map<std::string, json> configs_;  // trial -> config, while it runs
};

// points_to_evaluate first, in order, then the searcher it wraps; which is told every result.
class PointsFirst final : public Searcher {
 public:
  PointsFirst(std::unique_ptr<Searcher> inner, Space space, std::vector<json> points, uint64_t seed)
      : inner_(std::move(inner)),
        space_(std::move(space)),
        points_(std::move(points)),
        seed_(seed) {}
  Suggestion suggest(uint64_t index) override {
    if (index >= points_.size()) return inner_->suggest(index);
    auto c = fill_point(space_, points_[index], seed_, index);
    return {Suggestion::Kind::kConfig, std::move(c.config), std::move(c.varying)};
  }
  void on_result(const std::string& trial, const json& result) override {
    inner_->on_result(trial, result);
  }
  void on_complete(const Completion& c) override { inner_->on_complete(c); }
  json save() const override { return inner_->save(); }
  Result<void> restore(const json& state) override { return inner_->restore(state); }
  Result<void> start(const std::vector<KnownTrial>& known) override {
    std::vector<KnownTrial> k = known;
    for (auto& t : k)
      if (t.id < first_searched_id()) t.suggested = false;
    return inner_->start(k);
  }
  bool poll() override { return inner_->poll(); }
  bool busy() const override { return inner_->busy(); }
  std::optional<std::string> failure() const override { return inner_->failure(); }
  void prepare_save() override { inner_->prepare_save(); }
  void state_written() override { inner_->state_written(); }
  void finish() override { inner_->finish(); }

 private:
  std::string first_searched_id() const {
    char id[32];
    std::snprintf(id, sizeof id, "%05llu", static_cast<unsigned long long>(points_.size()));
    return id;
  }
  std::unique_ptr<Searcher> inner_;
  Space space_;
  std::vector<json> points_;
  uint64_t seed_;
};

Result<std::unique_ptr<Searcher>> make_inner(const SearcherSpec& spec, const Space& space,
                                             uint64_t num_samples, uint64_t seed,
                                             const SearcherContext& ctx) {
  if (spec.kind == SearcherKind::kRandom)
    return std::make_unique<BasicVariant>(space, trial_count(space, num_samples), seed);
  if (spec.kind == SearcherKind::kExternal)
    return make_external_searcher(spec.external, space, num_samples, seed, ctx);
  if (spec.kind == SearcherKind::kBohb) {
    auto bohb = Bohb::create(space, spec.bohb, spec.bohb_target.budgets, seed);
    if (!bohb) return std::unexpected(bohb.error());
    return std::make_unique<BohbSearcher>(std::move(*bohb), space, num_samples, spec.bohb_target);
  }
  auto tpe = Tpe::create(space, spec.tpe, seed);
  if (!tpe) return std::unexpected(tpe.error());
  auto s = std::make_unique<TpeSearcher>(std::move(*tpe), space, num_samples);
  s->set_options(spec.tpe);
  return s;
}

}  // namespace

const char* searcher_name(SearcherKind k) {
  switch (k) {
    case SearcherKind::kTpe:
      return "tpe";
    case SearcherKind::kExternal:
      return "external";
    case SearcherKind::kBohb:
      return "bohb";
    default:
      return "random";
  }
}

Result<std::unique_ptr<Searcher>> make_searcher(const SearcherSpec& spec, const Space& space,
                                                uint64_t num_samples, uint64_t seed,
                                                const SearcherContext& ctx) {
  auto inner = make_inner(spec, space, num_samples, seed, ctx);
  if (!inner || spec.points_to_evaluate.empty()) return inner;
  for (size_t i = 0; i < spec.points_to_evaluate.size(); ++i)
    if (auto r = check_point(space, spec.points_to_evaluate[i]); !r)
      return fail("search_alg.points_to_evaluate[", std::to_string(i), "]: ", r.error().message);
  return std::make_unique<PointsFirst>(std::move(*inner), space, spec.points_to_evaluate, seed);
}

}  // namespace tune::search
