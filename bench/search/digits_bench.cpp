// Searchers on the digits problem (configs/asha_digits.yaml's space and objective), scored from
// a table of precomputed learning curves (bench/search/digits_table.py): a config gets the curve
// of the nearest listed config. Driven by bench/search/digits_search.py.
//
//   digits_bench search TABLE SEEDS TRIALS   native tpe and random search, sequential trials,
//       each trained to epoch 27; one JSON line per (alg, seed): {"alg", "seed", "best": [best
//       final val_acc after 1..TRIALS trials]}
//   digits_bench hyperband TABLE SEEDS ITERS synchronous HyperBand (max_t 27, reduction factor
//       3: brackets of 27/12/6/4 trials, the best ceil(n / 3) of a rung going on, as tune's
//       hyperband scheduler keeps them) run ITERS times, its configs from bohb or random search;
//       a paused trial resumes where it stopped, so both use the same trial-epochs (375 an
//       iteration). One JSON line
//       per (alg, seed): {"alg", "seed", "best", "final_best", "epochs", "trials"}; best is the
//       best val_acc reported at any epoch, final_best the best at epoch 27.
//   digits_bench hartmann SEEDS ITERS   the same HyperBand on a harder multi-fidelity problem:
//       Hartmann-6 with biased, noisy early epochs (Hartmann below); adds "regret" at epoch 27.
#include <bit>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "search/bohb.hpp"
#include "search/rng.hpp"
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
template <typename Curves, typename Next, typename Report>
json hyperband(const Curves& table, int iters, Next next, Report report) {
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
          const std::vector<double> curve = table.curve(run.config);
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
        // The best ceil(n / rf) go on, as tune's hyperband keeps them (ties: the earlier trial).
        std::vector<Run> kept;
        size_t keep = (runs.size() + eta - 1) / eta;
        for (size_t k = 0; k < keep; ++k) kept.push_back(runs[scored[k].second]);
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

// A harder multi-fidelity problem: Hartmann-6 on [0, 1]^6 (minimum -3.32237) as a 27-epoch
// "curve" whose early epochs are biased and noisy. The value at epoch e (maximised, as val_acc)
// is -(H6(x) + b(e) |x - c|^2 + n(e) eps(x, e)) with b(e) = 2 w(e), n(e) = 0.3 w(e),
// w(e) = (1/sqrt(e) - 1/sqrt(27)) / (1 - 1/sqrt(27)) (1 at epoch 1, 0 at 27), c = (0.8, ..., 0.8)
// (early budgets favour configs near c, far from the optimum), and eps a standard normal fixed
// by (x, e, the problem's seed): epoch 27 is H6 itself.
struct Hartmann {
  uint64_t seed;
  static double h6(const std::vector<double>& x) {
    static constexpr double a[4] = {1.0, 1.2, 3.0, 3.2};
    static constexpr double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                       {0.05, 10, 17, 0.1, 8, 14},
                                       {3, 3.5, 1.7, 10, 17, 8},
                                       {17, 8, 0.05, 10, 0.1, 14}};
    static constexpr double P[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                       {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                       {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                       {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
    double f = 0;
    for (int i = 0; i < 4; ++i) {
      double s = 0;
      for (int j = 0; j < 6; ++j) s += A[i][j] * (x[j] - P[i][j]) * (x[j] - P[i][j]);
      f -= a[i] * std::exp(-s);
    }
    return f;
  }
  static std::vector<double> xs(const json& c) {
    std::vector<double> x;
    for (int j = 0; j < 6; ++j) x.push_back(c["x" + std::to_string(j)].get<double>());
    return x;
  }
  std::vector<double> curve(const json& c) const {
    auto x = xs(c);
    double f = h6(x), bias = 0;
    uint64_t h = seed;
    for (double v : x) {
      bias += (v - 0.8) * (v - 0.8);
      h = mix_seed(h, std::bit_cast<uint64_t>(v));
    }
    std::vector<double> out;
    for (int e = 1; e <= 27; ++e) {
      double w = (1 / std::sqrt(double(e)) - 1 / std::sqrt(27.0)) / (1 - 1 / std::sqrt(27.0));
      Rng rng(mix_seed(h, static_cast<uint64_t>(e)));
      out.push_back(-(f + 2 * w * bias + 0.3 * w * rng.normal()));
    }
    return out;
  }
};

int hartmann_main(int seeds, int iters) {
  Space space;
  for (int j = 0; j < 6; ++j)
    space.params.push_back({{"x" + std::to_string(j)}, {Domain::Kind::kUniform, {0, 1}}});
  for (int seed = 0; seed < seeds; ++seed) {
    auto s = static_cast<uint64_t>(seed);
    Hartmann problem{mix_seed(s, 0x6861'7274'6d61'6e6eULL)};
    auto bohb = Bohb::create(space, {}, {1, 3, 9, 27}, s).value();
    json b = hyperband(
        problem, iters, [&](uint64_t i) { return bohb.suggest(i, {}); },
        [&](const std::string& id, const json& c, int epoch, double v) {
          bohb.observe(id, c, epoch, -v);
        });
    json r = hyperband(
        problem, iters, [&](uint64_t i) { return generate(space, s, i).config; },
        [](const std::string&, const json&, int, double) {});
    for (json* j : {&b, &r}) (*j)["regret"] = 3.32237 - (*j)["final_best"].get<double>();
    b["alg"] = "bohb", b["seed"] = seed, r["alg"] = "random", r["seed"] = seed;
    std::cout << b.dump() << "\n" << r.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hartmann" && argc == 4) return hartmann_main(std::stoi(argv[2]), std::stoi(argv[3]));
  if ((mode == "search" || mode == "hyperband") && argc == 5) {
    Table t = load(argv[2]);
    int seeds = std::stoi(argv[3]), n = std::stoi(argv[4]);
    return mode == "search" ? search_main(t, seeds, n) : hyperband_main(t, seeds, n);
  }
  std::fprintf(stderr,
               "usage: digits_bench search TABLE SEEDS TRIALS | hyperband TABLE SEEDS ITERS | "
               "hartmann SEEDS ITERS\n");
  return 2;
}
