// Searchers on the digits problem (configs/asha_digits.yaml's space and objective), scored from
// a table of precomputed learning curves (bench/search/digits_table.py): a config gets the curve
// of the nearest listed config. Driven by bench/search/digits_search.py.
//
//   digits_bench search TABLE SEEDS TRIALS   native tpe and random search, sequential trials,
//       each trained to epoch 27; one JSON line per (alg, seed): {"alg", "seed", "best": [best
//       final val_acc after 1..TRIALS trials]}
//   digits_bench hyperband TABLE SEEDS ITERS synchronous HyperBand (max_t 27, reduction factor
//       3: brackets of 27/12/6/4 trials) run ITERS times, its configs from bohb or random search;
//       a paused trial resumes where it stopped, so both use the same trial-epochs. One JSON line
//       per (alg, seed): {"alg", "seed", "best", "final_best", "epochs", "trials"}; best is the
//       best val_acc reported at any epoch, final_best the best at epoch 27.
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "search/bohb.hpp"
#include "search/space.hpp"
#include "search/tpe.hpp"

using namespace tune::search;

namespace {

// Curves at listed configs; a config gets the curve of the nearest listed one with the same
// hidden and batch_size, in (log10 alpha, log10 lr) (the first listed on a tie).
struct Table {
  struct Row {
    double log_alpha, log_lr;
    std::vector<double> acc;
  };
  std::map<std::pair<int, int>, std::vector<Row>> rows;

  const std::vector<double>& curve(const json& c) const {
    const auto& list = rows.at({c["hidden"].get<int>(), c["batch_size"].get<int>()});
    double la = std::log10(c["alpha"].get<double>()), ll = std::log10(c["lr"].get<double>());
    const Row* best = nullptr;
    double best_d = INFINITY;
    for (const auto& r : list) {
      double d = (r.log_alpha - la) * (r.log_alpha - la) + (r.log_lr - ll) * (r.log_lr - ll);
      if (d < best_d) best_d = d, best = &r;
    }
    return best->acc;
  }
};

Table load(const char* path) {
  std::ifstream in(path);
  json j = json::parse(in);
  Table t;
  for (const auto& r : j["configs"])
    t.rows[{r["hidden"].get<int>(), r["batch_size"].get<int>()}].push_back(
        {std::log10(r["alpha"].get<double>()), std::log10(r["lr"].get<double>()),
         r["val_acc"].get<std::vector<double>>()});
  return t;
}

// configs/asha_digits.yaml's param_space.
Space digits_space() {
  Space s;
  json sizes = json::array({16, 32, 64, 128});
  s.base = {{"epochs", 27}};
  s.params.push_back({{"hidden"}, {Domain::Kind::kChoice, {}, sizes}});
  s.params.push_back({{"alpha"}, {Domain::Kind::kLogUniform, {1e-5, 1e-1}}});
  s.params.push_back({{"lr"}, {Domain::Kind::kLogUniform, {1e-4, 1e-1}}});
  s.params.push_back({{"batch_size"}, {Domain::Kind::kChoice, {}, sizes}});
  return s;
}

int search_main(const Table& table, int seeds, int trials) {
  Space space = digits_space();
  for (int seed = 0; seed < seeds; ++seed) {
    auto tpe = Tpe::create(space, {}, static_cast<uint64_t>(seed)).value();
    for (const char* alg : {"tpe", "random"}) {
      std::vector<Observation> done;
      std::vector<double> best;
      double top = 0;
      for (int i = 0; i < trials; ++i) {
        json c =
            std::string(alg) == "tpe"
                ? tpe.suggest(done, {})
                : generate(space, static_cast<uint64_t>(seed), static_cast<uint64_t>(i)).config;
        double acc = table.curve(c).back();
        done.push_back({c, -acc});  // mode max: the searcher sees the negated metric
        top = std::max(top, acc);
        best.push_back(top);
      }
      std::cout << json{{"alg", alg}, {"seed", seed}, {"best", best}}.dump() << "\n";
    }
  }
  return 0;
}

// One synchronous HyperBand run; `next(index)` gives config `index`, `report(trial, config,
// epoch, acc)` is told every epoch a trial runs.
template <typename Next, typename Report>
json hyperband(const Table& table, int iters, Next next, Report report) {
  const int max_t = 27, eta = 3, s_max = 3;
  uint64_t index = 0;
  int64_t epochs = 0;
  double best = 0, final_best = 0;
  for (int it = 0; it < iters; ++it)
    for (int s = s_max; s >= 0; --s) {
      int n = static_cast<int>(std::ceil((s_max + 1.0) / (s + 1) * std::pow(eta, s)));
      int r = max_t / static_cast<int>(std::pow(eta, s));
      struct Run {
        std::string id;
        json config;
        int at = 0;  // epochs run
      };
      std::vector<Run> runs;
      for (int k = 0; k < n; ++k) {
        std::string id = std::to_string(index);
        runs.push_back({id, next(index++), 0});
      }
      for (int i = 0; i <= s; ++i) {
        int r_i = r * static_cast<int>(std::pow(eta, i));
        std::vector<std::pair<double, size_t>> scored;
        for (size_t k = 0; k < runs.size(); ++k) {
          auto& run = runs[k];
          const auto& curve = table.curve(run.config);
          for (int e = run.at + 1; e <= r_i; ++e) {
            report(run.id, run.config, e, curve[e - 1]);
            best = std::max(best, curve[e - 1]);
            ++epochs;
          }
          run.at = r_i;
          if (r_i == max_t) final_best = std::max(final_best, curve[max_t - 1]);
          scored.push_back({-curve[r_i - 1], k});
        }
        std::stable_sort(scored.begin(), scored.end());
        std::vector<Run> kept;
        for (size_t k = 0; k < runs.size() / eta; ++k) kept.push_back(runs[scored[k].second]);
        runs = std::move(kept);
      }
    }
  return {{"best", best}, {"final_best", final_best}, {"epochs", epochs}, {"trials", index}};
}

int hyperband_main(const Table& table, int seeds, int iters) {
  Space space = digits_space();
  for (int seed = 0; seed < seeds; ++seed) {
    auto s = static_cast<uint64_t>(seed);
    auto bohb = Bohb::create(space, {}, {1, 3, 9, 27}, s).value();  // hyperband's rung budgets
    json b = hyperband(
        table, iters, [&](uint64_t i) { return bohb.suggest(i, {}); },
        [&](const std::string& id, const json& c, int epoch, double acc) {
          bohb.observe(id, c, epoch, -acc);
        });
    json r = hyperband(
        table, iters, [&](uint64_t i) { return generate(space, s, i).config; },
        [](const std::string&, const json&, int, double) {});
    b["alg"] = "bohb", b["seed"] = seed, r["alg"] = "random", r["seed"] = seed;
    std::cout << b.dump() << "\n" << r.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if ((mode == "search" || mode == "hyperband") && argc == 5) {
    Table t = load(argv[2]);
    int seeds = std::stoi(argv[3]), n = std::stoi(argv[4]);
    return mode == "search" ? search_main(t, seeds, n) : hyperband_main(t, seeds, n);
  }
  std::fprintf(stderr,
               "usage: digits_bench search TABLE SEEDS TRIALS | hyperband TABLE SEEDS ITERS\n");
  return 2;
}
